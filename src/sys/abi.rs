//! Constructing libc structs that have private padding fields and so cannot be built with a
//! struct literal.

/// An all-zero `stat64` (attributes of a negative lookup entry).
pub fn zeroed_stat() -> libc::stat64 {
    // SAFETY: stat64 is plain integers and padding; all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// An all-zero `statvfs64`.
pub fn zeroed_statvfs() -> libc::statvfs64 {
    // SAFETY: statvfs64 is plain integers and padding; all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// FUSE protocol structures newer than fuse-backend-rs 0.14 (Linux's `include/uapi/linux/fuse.h`,
/// protocol 7.39), for the requests the daemon decodes itself.
pub mod fuse {
    use vm_memory::ByteValued;

    /// `struct fuse_syncfs_in`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct SyncfsIn {
        /// Unused.
        pub padding: u64,
    }

    /// `struct fuse_statx_in`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct StatxIn {
        /// FUSE_GETATTR_FH when `fh` is valid.
        pub getattr_flags: u32,
        /// Unused.
        pub reserved: u32,
        /// The open file, with FUSE_GETATTR_FH.
        pub fh: u64,
        /// `AT_*` flags of the guest's statx.
        pub sx_flags: u32,
        /// `STATX_*` fields asked for.
        pub sx_mask: u32,
    }

    /// `struct fuse_sx_time`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct SxTime {
        /// Seconds.
        pub tv_sec: i64,
        /// Nanoseconds.
        pub tv_nsec: u32,
        /// Unused.
        pub reserved: i32,
    }

    /// `struct fuse_statx`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Statx {
        /// `STATX_*` fields filled in.
        pub mask: u32,
        /// Block size.
        pub blksize: u32,
        /// `STATX_ATTR_*` flags.
        pub attributes: u64,
        /// Link count.
        pub nlink: u32,
        /// Owner.
        pub uid: u32,
        /// Group.
        pub gid: u32,
        /// Type and mode.
        pub mode: u16,
        /// Unused.
        pub spare0: u16,
        /// Inode number.
        pub ino: u64,
        /// Size.
        pub size: u64,
        /// 512-byte blocks.
        pub blocks: u64,
        /// `STATX_ATTR_*` flags the filesystem supports.
        pub attributes_mask: u64,
        /// Access time.
        pub atime: SxTime,
        /// Birth time.
        pub btime: SxTime,
        /// Change time.
        pub ctime: SxTime,
        /// Modification time.
        pub mtime: SxTime,
        /// Device numbers of a device node.
        pub rdev_major: u32,
        /// See `rdev_major`.
        pub rdev_minor: u32,
        /// Device of the filesystem (left 0: the guest has its own).
        pub dev_major: u32,
        /// See `dev_major`.
        pub dev_minor: u32,
        /// Unused.
        pub spare2: [u64; 14],
    }

    /// INIT flag `FUSE_DONT_MASK`: the guest leaves the umask to the daemon (and sends it).
    pub const DONT_MASK: u64 = 1 << 6;
    /// INIT flag `FUSE_POSIX_ACL`: the guest enforces POSIX ACLs it reads as xattrs.
    pub const POSIX_ACL: u64 = 1 << 20;
    /// INIT flag `FUSE_SETXATTR_EXT`: SETXATTR carries `setxattr_flags` (the longer
    /// [`SetxattrInExt`]).
    pub const SETXATTR_EXT: u64 = 1 << 29;
    /// INIT flag (flags2) `FUSE_SECURITY_CTX`: create, mkdir, mknod and symlink carry the
    /// security context of the new object as a request extension.
    pub const SECURITY_CTX: u64 = 1 << 32;
    /// INIT flag (flags2) `FUSE_ALLOW_IDMAP` (7.40): the guest may make idmapped mounts; its
    /// requests that create nothing then carry uid and gid -1.
    pub const ALLOW_IDMAP: u64 = 1 << 40;
    /// INIT flag (flags2) `FUSE_PASSTHROUGH` (7.40): opens may hand the kernel a backing
    /// file to read and write directly; the INIT reply then sets `max_stack_depth`.
    pub const PASSTHROUGH: u64 = 1 << 37;
    /// `open_flags` bit `FOPEN_PASSTHROUGH` (7.40): the open's `backing_id` names the file
    /// the kernel reads and writes instead of sending READ and WRITE.
    pub const FOPEN_PASSTHROUGH: u32 = 1 << 7;
    /// OPEN `flags` bit `__FMODE_EXEC`: the kernel opens the file to execute it (the open
    /// lasts as long as the program runs).
    pub const FMODE_EXEC: u32 = 0x20;
    /// `FUSE_SETXATTR_ACL_KILL_SGID`: clear set-group-ID when this ACL is set.
    pub const SETXATTR_ACL_KILL_SGID: u32 = 1;
    /// The highest extension type that is a security context (its type is their count).
    pub const MAX_NR_SECCTX: u32 = 31;
    /// Extension type `FUSE_EXT_GROUPS`: the caller's supplementary group.
    pub const EXT_GROUPS: u32 = 32;

    /// `struct fuse_setxattr_in` with FUSE_SETXATTR_EXT.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct SetxattrInExt {
        /// Value length.
        pub size: u32,
        /// `XATTR_CREATE` / `XATTR_REPLACE`.
        pub flags: u32,
        /// `FUSE_SETXATTR_ACL_KILL_SGID`.
        pub setxattr_flags: u32,
        /// Unused.
        pub padding: u32,
    }

    /// `struct fuse_ext_header`: one request extension (`size` includes this header and
    /// is a multiple of 8).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct ExtHeader {
        /// Bytes of the extension, this header included.
        pub size: u32,
        /// 0..=31: a security-context list of that many; 32: supplementary groups.
        pub ext_type: u32,
    }

    /// `struct fuse_secctx`: one security context, followed by its NUL-terminated xattr
    /// name and `size` bytes of value.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Secctx {
        /// Bytes of the value.
        pub size: u32,
        /// Unused.
        pub padding: u32,
    }

    /// `struct fuse_statx_out`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct StatxOut {
        /// Attribute cache time, seconds.
        pub attr_valid: u64,
        /// Attribute cache time, nanoseconds.
        pub attr_valid_nsec: u32,
        /// Unused flags.
        pub flags: u32,
        /// Unused.
        pub spare: [u64; 2],
        /// The attributes.
        pub stat: Statx,
    }

    // SAFETY: each is repr(C) plain integers (and arrays and structs of them) with no
    // implicit padding, so any byte pattern is a valid value.
    unsafe impl ByteValued for SyncfsIn {}
    // SAFETY: as above.
    unsafe impl ByteValued for StatxIn {}
    // SAFETY: as above.
    unsafe impl ByteValued for SxTime {}
    // SAFETY: as above.
    unsafe impl ByteValued for Statx {}
    // SAFETY: as above.
    unsafe impl ByteValued for StatxOut {}
    // SAFETY: as above.
    unsafe impl ByteValued for SetxattrInExt {}
    // SAFETY: as above.
    unsafe impl ByteValued for ExtHeader {}
    // SAFETY: as above.
    unsafe impl ByteValued for Secctx {}

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn sizes_match_the_kernel_header() {
            assert_eq!(std::mem::size_of::<StatxIn>(), 24);
            assert_eq!(std::mem::size_of::<SxTime>(), 16);
            assert_eq!(std::mem::size_of::<Statx>(), 256);
            assert_eq!(std::mem::size_of::<StatxOut>(), 288);
            assert_eq!(std::mem::size_of::<SetxattrInExt>(), 16);
            assert_eq!(std::mem::size_of::<ExtHeader>(), 8);
            assert_eq!(std::mem::size_of::<Secctx>(), 8);
        }
    }
}
