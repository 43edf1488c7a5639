//! OPENDIR, READDIR, READDIRPLUS, RELEASEDIR and FSYNCDIR. A directory's listing is the merge of
//! every branch's copy, names de-duplicated with the first branch winning; it is taken once per
//! handle (at offset 0) so offsets stay stable while the guest pages through it, or, for a
//! directory the kernel opened without asking, once per reading from offset 0 and served in
//! the order of its names' keys, which its offsets are (`node_listings.rs`).

use crate::fs::call::Call;
use crate::fs::inode::Rebind;
use crate::sync::LockRecover;
use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;

use fuse_backend_rs::abi::fuse_abi::OpenOptions;
use fuse_backend_rs::api::filesystem::{DirEntry, Entry};

use crate::fs::errno;
use crate::fs::handle::{DirHandle, Handle};
use crate::fs::lookup_memo::{Positions, Ticket, LISTED_NAMES};
use crate::fs::node_listings;
use crate::fs::ops::lookup::{memo_applies, search_child, trusted, windows};
use crate::fs::options::{Func, InodeCalc};
use crate::fs::readdir_snapshot::{DirSnapshot, Listing, MergedEntry};
use crate::fs::resolve::{ino_for, join, split_parent};
use crate::fs::view::View;
use crate::sys::beneath;

/// Opens directory `inode`. ENOSYS, once its kernel may open directories without asking,
/// when every directory's listing is kept across opens anyway (`cache.readdir`, or only
/// `static` branches): the kernel then sends neither OPENDIR nor RELEASEDIR again and keeps
/// every listing as this reply would have let it (see [`crate::fs::negotiated`]).
pub fn opendir(fs: &Call<'_>, inode: u64) -> io::Result<(Option<u64>, OpenOptions)> {
    let f = fs.search_node(Func::Getattr, inode)?;
    if f.st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(errno(libc::ENOTDIR));
    }
    // As mergerfs's `cache.readdir`: the listing the guest cached stays across opens, until
    // the guest changes the directory itself or sees its mtime change. A directory only
    // static branches hold keeps it regardless.
    if fs.negotiated.elide_opendir(fs.view().keeps_every_listing()) {
        return Err(errno(libc::ENOSYS));
    }
    let fh = fs.new_handle(Handle::Dir(DirHandle {
        inode,
        snapshot: Default::default(),
    }))?;
    let cached = if fs.view().opts.cache_readdir {
        OpenOptions::CACHE_DIR | OpenOptions::KEEP_CACHE
    } else {
        OpenOptions::empty()
    };
    Ok((Some(fh), fs.node_standing(f.branch, inode).dir_open(cached)))
}

/// Builds the merged listing of directory `rel`. Each name comes from the first branch that has
/// it, and its number is computed as getattr would (the search policy also takes the first).
fn snapshot(fs: &Call<'_>, inode: u64, rel: &CStr) -> io::Result<DirSnapshot> {
    let calc = fs.view().opts.inodecalc;
    let parent = if rel.to_bytes() == b"." {
        rel.to_owned()
    } else {
        split_parent(rel).0
    };
    let dt_dir = u32::from(libc::DT_DIR);
    let dot = fs.search_node(Func::Getattr, inode)?;
    if dot.st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(errno(libc::ENOTDIR));
    }
    // A directory's number needs its host identity only under dev/ino-based modes.
    let dotdot = match calc {
        InodeCalc::Passthrough | InodeCalc::DevinoHash | InodeCalc::DevinoHash32 => {
            fs.union_ino(&fs.search(Func::Getattr, &parent)?.st, parent.to_bytes())
        }
        _ => ino_for(calc, true, parent.to_bytes(), 0, 0),
    };
    // Names need de-duplicating only against branches listed before; a directory on one
    // branch (the common case) needs no set at all. Where the directory is absent, and
    // where each name's first copy is, go to the lookup memo.
    let view = fs.shared_view();
    let ticket = fs.lookup_memo.ticket();
    let mut memo = MemoFill::new(view, rel);
    let mut dirs = Vec::new();
    for (pos, b) in view.branches.indices().enumerate() {
        match fs.lookup_on(b, rel) {
            Ok(Some(f)) if f.st.st_mode & libc::S_IFMT == libc::S_IFDIR => dirs.push((pos, f)),
            Ok(Some(_)) => {}
            Ok(None) => memo.absent.insert(pos),
            Err(_) => memo.failed = true,
        }
    }
    let mut entries = Listing::with_capacity(64);
    entries.push(b".", fs.union_ino(&dot.st, rel.to_bytes()), dt_dir)?;
    entries.push(b"..", dotdot, dt_dir)?;
    let cow = fs.view().opts.cow;
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    for (i, (pos, dir)) in dirs.iter().enumerate() {
        let (check, record) = (i > 0, i + 1 < dirs.len());
        let dev = dir.st.st_dev;
        beneath::for_each_dirent(dir.fd.as_fd(), |name, host_ino, dtype| {
            if check && seen.contains(name) {
                return Ok(());
            }
            // Copy-on-write: a whiteout is not shown, and hides the name on later branches.
            if cow && dtype == u32::from(libc::DT_CHR) {
                let c = CString::new(name).expect("no NUL in a name");
                let st = rustix::fs::statat(&*dir.fd, &c, rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
                if st.is_ok_and(|st| crate::fs::cow::is_whiteout(&st)) {
                    if record {
                        seen.insert(name.to_vec());
                    }
                    return Ok(());
                }
            }
            let is_dir = dtype == dt_dir;
            // Only path-based numbers need the entry's path; skip building it otherwise.
            let by_path = match calc {
                InodeCalc::PathHash | InodeCalc::PathHash32 => true,
                InodeCalc::HybridHash | InodeCalc::HybridHash32 => is_dir,
                _ => false,
            };
            let ino = if by_path {
                ino_for(
                    calc,
                    is_dir,
                    join(rel.to_bytes(), name).as_bytes(),
                    dev,
                    host_ino,
                )
            } else {
                ino_for(calc, is_dir, b"", dev, host_ino)
            };
            if record {
                seen.insert(name.to_vec());
            }
            memo.first_at(*pos);
            entries.push(name, ino, dtype)
        })?;
    }
    let snap = fs.listings.charge(entries)?;
    memo.note(fs, view, &ticket, inode, &snap);
    Ok(snap)
}

/// What a listing tells the lookup memo: the positions where the directory is absent and,
/// for each listed name (in listing order), the position of its first copy.
struct MemoFill {
    /// Whether the memo is used for this listing (first-found getattr, nonzero window).
    on: bool,
    /// The directory's path with its trailing `/` (empty for the root).
    dir: Vec<u8>,
    absent: Positions,
    /// A branch failed to answer: names are not recorded (one may hide there).
    failed: bool,
    /// Each listed name's position (after `.` and `..`).
    firsts: Vec<u32>,
}

impl MemoFill {
    fn new(view: &View, rel: &CStr) -> Self {
        let dir = match rel.to_bytes() {
            b"." => Vec::new(),
            r => [r, b"/"].concat(),
        };
        MemoFill {
            on: memo_applies(view, Func::Getattr),
            dir,
            absent: Positions::default(),
            failed: false,
            firsts: Vec::new(),
        }
    }

    #[inline]
    fn first_at(&mut self, pos: usize) {
        if self.on && self.firsts.len() < LISTED_NAMES {
            self.firsts.push(pos as u32);
        }
    }

    /// Fills the memo of directory node `inode` from `snap`.
    fn note(&self, fs: &Call<'_>, view: &Arc<View>, t: &Ticket, inode: u64, snap: &DirSnapshot) {
        if !self.on {
            return;
        }
        let w = windows(view);
        let names = snap
            .entries_from(2)
            .zip(&self.firsts)
            .filter(|_| !self.failed)
            .map(|((_, e), &pos)| (e.name, pos as usize));
        fs.lookup_memo
            .note_listing(t, view, inode, &self.dir, &self.absent, names, w);
    }
}

/// The part of a listing one READDIR serves.
struct Page {
    /// The directory's union path.
    rel: CString,
    listing: Served,
    /// The index of the first entry to serve.
    from: usize,
}

/// A listing and how its offsets are made.
enum Served {
    /// A handle's: offsets are index + 1.
    Handle(Arc<DirSnapshot>),
    /// A directory read without a handle: offsets are the names' keys.
    Keyed(Arc<node_listings::Keyed>),
}

impl Page {
    fn snapshot(&self) -> &DirSnapshot {
        match &self.listing {
            Served::Handle(s) => s,
            Served::Keyed(k) => &k.snapshot,
        }
    }

    /// The offset handed out with entry `index`.
    fn cookie(&self, index: usize) -> u64 {
        match &self.listing {
            Served::Handle(_) => index as u64 + 1,
            Served::Keyed(k) => k.cookie(index),
        }
    }
}

/// The listing READDIR at `offset` of directory `inode` continues: handle `fh`'s, (re)built
/// when the guest starts from offset 0; without a handle (`fh` 0: the kernel opened the
/// directory without asking), the directory's kept listing or a new one.
fn listing(fs: &Call<'_>, inode: u64, fh: u64, offset: u64) -> io::Result<Page> {
    if fh == 0 && fs.negotiated.handleless_readdir() {
        return handleless(fs, inode, offset);
    }
    let h = fs.handles.get(fh)?;
    let d = h.as_dir()?;
    if d.inode != inode {
        return Err(errno(libc::EBADF));
    }
    let rel = fs.inodes.path(inode)?;
    let mut snap = d.snapshot.locked();
    if offset == 0 || snap.is_none() {
        *snap = Some(Arc::new(snapshot(fs, inode, &rel)?));
    }
    Ok(Page {
        rel,
        listing: Served::Handle(snap.clone().expect("just set")),
        from: offset_index(offset),
    })
}

/// [`listing`] for a directory read without a handle (`node_listings.rs`): a reading from
/// offset 0 gets a new listing, one that goes on the kept one, or a new one if none is kept.
fn handleless(fs: &Call<'_>, inode: u64, offset: u64) -> io::Result<Page> {
    let rel = fs.inodes.path(inode)?;
    let kept = match offset {
        0 => None,
        _ => fs.node_listings.latest(inode),
    };
    let keyed = match kept {
        Some(k) => k,
        None => {
            let snap = match snapshot(fs, inode, &rel) {
                // The kept listings hold the budget: they go first (their readers go on in
                // new ones).
                Err(e)
                    if e.raw_os_error() == Some(libc::ENOMEM) && fs.node_listings.clear() > 0 =>
                {
                    snapshot(fs, inode, &rel)?
                }
                r => r?,
            };
            let keyed = Arc::new(node_listings::Keyed::new(snap));
            fs.node_listings.keep(inode, keyed.clone());
            keyed
        }
    };
    Ok(Page {
        rel,
        from: keyed.index_after(offset),
        listing: Served::Keyed(keyed),
    })
}

fn dirent<'a>(e: &MergedEntry<'a>, offset: u64) -> DirEntry<'a> {
    DirEntry {
        ino: e.ino,
        offset,
        type_: e.dtype,
        name: e.name,
    }
}

/// The index of the entry after the guest's `offset` (offsets are index + 1); past the end
/// for any offset no listing reaches.
fn offset_index(offset: u64) -> usize {
    usize::try_from(offset).unwrap_or(usize::MAX)
}

/// Lists entries from `offset` until the guest's buffer is full.
pub fn readdir(
    fs: &Call<'_>,
    inode: u64,
    fh: u64,
    offset: u64,
    add_entry: &mut dyn FnMut(DirEntry) -> io::Result<usize>,
) -> io::Result<()> {
    let page = listing(fs, inode, fh, offset)?;
    for (i, e) in page.snapshot().entries_from(page.from) {
        if add_entry(dirent(&e, page.cookie(i)))? == 0 {
            break;
        }
    }
    Ok(())
}

/// Like [`readdir`], with each entry looked up (one guest reference per entry the guest takes).
pub fn readdirplus(
    fs: &Call<'_>,
    inode: u64,
    fh: u64,
    offset: u64,
    add_entry: &mut dyn FnMut(DirEntry, Entry) -> io::Result<usize>,
) -> io::Result<()> {
    let page = listing(fs, inode, fh, offset)?;
    let rel = &page.rel;
    let dot = fs.search_node(Func::Getattr, inode)?.st;
    let mut path: smallvec::SmallVec<[u8; 512]> = smallvec::SmallVec::new();
    for (i, e) in page.snapshot().entries_from(page.from) {
        let entry = if e.name == b"." || e.name == b".." {
            // The kernel ignores entries for the dot names; no reference is taken.
            Entry {
                inode: 0,
                generation: 0,
                attr: dot,
                attr_flags: 0,
                attr_timeout: Default::default(),
                entry_timeout: Default::default(),
            }
        } else {
            // The entry's union path and, as its tail, its name: one buffer, reused.
            path.clear();
            if rel.to_bytes() != b"." {
                path.extend_from_slice(rel.to_bytes());
                path.push(b'/');
            }
            let at = path.len();
            path.extend_from_slice(e.name);
            path.push(0);
            let (Ok(full), Ok(name)) = (
                CStr::from_bytes_with_nul(&path),
                CStr::from_bytes_with_nul(&path[at..]),
            ) else {
                continue; // a name the host would not have listed (a NUL in it)
            };
            let answer = search_child(fs, Func::Getattr, inode, name, full);
            match answer.found {
                Ok(f) => trusted(
                    fs.view(),
                    fs.entry_for(inode, name, full, &f, Rebind::No)?,
                    answer.trust,
                ),
                Err(_) => continue, // removed since the snapshot
            }
        };
        let taken = add_entry(dirent(&e, page.cookie(i)), entry);
        if !matches!(taken, Ok(n) if n > 0) {
            if entry.inode != 0 {
                fs.inodes.forget(entry.inode, 1);
            }
            taken?;
            break;
        }
    }
    Ok(())
}

/// Closes directory handle `fh`.
pub fn releasedir(fs: &Call<'_>, inode: u64, fh: u64) -> io::Result<()> {
    match &*fs.handles.get(fh)? {
        Handle::Dir(d) if d.inode == inode => fs.handles.remove(fh).map(drop),
        Handle::Lost { inode: i } if *i == inode => fs.handles.remove(fh).map(drop),
        _ => Err(errno(libc::EBADF)),
    }
}

/// Nothing to flush for a merged directory beyond checking the handle (none where the
/// kernel opened the directory without asking).
pub fn fsyncdir(fs: &Call<'_>, inode: u64, _datasync: bool, fh: u64) -> io::Result<()> {
    if fh == 0 && fs.negotiated.handleless_readdir() {
        return match fs.inodes.is_dir(inode) {
            true => Ok(()),
            false => Err(errno(libc::ENOTDIR)),
        };
    }
    match &*fs.handles.get(fh)? {
        Handle::Dir(d) if d.inode == inode => Ok(()),
        Handle::Lost { inode: i } if *i == inode => Err(errno(libc::EIO)),
        _ => Err(errno(libc::EBADF)),
    }
}
