//! A merged directory listing: every branch's entries, names de-duplicated with the first
//! branch winning, preceded by `.` and `..`. Pure data; built by `ops::readdir`.

/// One entry of a merged listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergedEntry {
    /// The name.
    pub name: Vec<u8>,
    /// The union inode number the guest will also see from getattr.
    pub ino: u64,
    /// The `DT_*` type.
    pub dtype: u32,
}

/// The listing served to one open directory handle.
#[derive(Debug, Default)]
pub struct DirSnapshot {
    /// Entries in the order served; offsets are index + 1.
    pub entries: Vec<MergedEntry>,
}
