//! MKDIR, MKNOD, SYMLINK and CREATE: the create policy picks the branch (by default the first RW
//! branch where the parent directory exists), the entry is made there as the guest caller, and
//! host device nodes can never be made.
//!
//! With POSIX ACLs the guest leaves the umask to the daemon (FUSE_DONT_MASK): the entry is made
//! under the caller's umask (the worker's own, `sys::thread`), so the host applies the parent's
//! default ACL where there is one and the umask where there is none, exactly as the guest's
//! kernel would. With security labels, the context the guest sent (`fuse::secctx`) is set on the
//! entry under a hidden name, which then becomes the entry's name (RENAME_NOREPLACE): no other
//! process sees the entry unlabelled.

use crate::fs::call::Call;
use crate::fs::inode::Rebind;
use crate::fs::BranchId;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use fuse_backend_rs::abi::fuse_abi::{CreateIn, OpenOptions};
use fuse_backend_rs::api::filesystem::{Context, Entry};
use rustix::fs::{FileType, Mode, OFlags};

use crate::fs::caller::Groups;
use crate::fs::errno;
use crate::fs::handle::{FileHandle, Handle};
use crate::fs::ops::open::{host_open_flags, open};
use crate::fs::options::Func;
use crate::fs::passthrough::Want;
use crate::fs::resolve::{check_name, Found};
use crate::fuse::SecContext;
use crate::sys::thread::UmaskGuard;
use crate::sys::{beneath, creds};
use crate::union::ErrnoFold;

/// What a new entry gets beyond its mode: the caller's umask (POSIX ACLs only) and the
/// security context the guest sent.
pub struct NewEntry {
    /// The guest caller's umask, applied by the host (None: none applies).
    pub umask: Option<u32>,
    /// The security context for the entry.
    pub label: Option<SecContext>,
}

impl NewEntry {
    /// Nothing beyond the mode (entries the daemon makes for its own reasons).
    pub const PLAIN: NewEntry = NewEntry {
        umask: None,
        label: None,
    };

    /// For a request that brought `umask`: the umask if POSIX ACLs are on, and the request's
    /// security context.
    pub fn of_request(fs: &Call<'_>, umask: u32) -> Self {
        NewEntry {
            umask: fs.negotiated.posix_acl().then_some(umask),
            label: fs.label().cloned(),
        }
    }
}

/// Makes an entry named `name` in `dir` with `make` (given the name to make it under), with
/// `new`'s umask; a labelled entry is made under a hidden name, labelled with the daemon's
/// ids (the guest's LSM chose the label, not the caller), and renamed into place.
fn make_labelled<T>(
    fs: &Call<'_>,
    dir: BorrowedFd<'_>,
    name: &CStr,
    new: &NewEntry,
    mut make: impl FnMut(&CStr) -> io::Result<T>,
) -> io::Result<T> {
    let _umask = new.umask.map(UmaskGuard::new);
    let Some(label) = &new.label else {
        return make(name);
    };
    let xattr = crate::fs::ops::xattr::host_name(fs, &label.name, libc::EPERM)?;
    let tmp = CString::new(format!(".uvfs.label.{:016x}", fastrand::u64(..))).expect("no NUL");
    let made = make(&tmp)?;
    let _daemon = creds::as_daemon();
    let labelled = beneath::open_path(dir, &tmp).and_then(|p| {
        rustix::fs::setxattr(
            &beneath::proc_path(p.as_fd()),
            xattr.as_ref(),
            &label.value,
            rustix::fs::XattrFlags::empty(),
        )?;
        rustix::fs::renameat_with(dir, &tmp, dir, name, rustix::fs::RenameFlags::NOREPLACE)?;
        Ok(())
    });
    match labelled {
        Ok(()) => Ok(made),
        Err(e) => {
            // The hidden entry goes (rmdir if it is a directory).
            use rustix::fs::{unlinkat, AtFlags};
            if unlinkat(dir, &tmp, AtFlags::empty()) == Err(rustix::io::Errno::ISDIR) {
                let _ = unlinkat(dir, &tmp, AtFlags::REMOVEDIR);
            }
            Err(e)
        }
    }
}

/// Validates the name and picks the branches: (path of the new entry, parent dir on each).
fn prepare(
    fs: &Call<'_>,
    func: Func,
    parent: u64,
    name: &CStr,
) -> io::Result<(CString, crate::fs::resolve::Founds)> {
    check_name(name)?;
    let rel = fs.inodes.child_path(parent, name)?;
    // On a single branch without copy-on-write the creation itself answers EEXIST (O_EXCL,
    // mkdirat, symlinkat, mknodat, a label's RENAME_NOREPLACE): no look first.
    let alone = fs.view().branches.len() == 1 && !fs.view().opts.cow;
    if !alone && fs.exists_anywhere(&rel) {
        return Err(errno(libc::EEXIST));
    }
    let targets = match fs.create_targets(func, &fs.inodes.path(parent)?) {
        // An existing name is EEXIST before any refusal of the policy (EROFS, ENOSPC), as it
        // was when looked for first: open(2) without O_EXCL then opens it.
        Err(_) if alone && fs.exists_anywhere(&rel) => return Err(errno(libc::EEXIST)),
        r => r?,
    };
    Ok((rel, targets))
}

/// Looks up what was just created on `branch` and hands the guest a node for it.
fn finish(
    fs: &Call<'_>,
    parent: u64,
    name: &CStr,
    rel: &CStr,
    branch: BranchId,
) -> io::Result<Entry> {
    let f = fs.find_on(branch, rel).ok_or_else(|| errno(libc::ENOENT))?;
    let entry = fs.entry_for(parent, name, rel, &f, Rebind::Yes)?;
    // A node number that once named another directory must not keep its facts.
    fs.lookup_memo.forget_dir(entry.inode);
    Ok(entry)
}

/// Makes the entry with `make` (given the parent and the name to use) in each chosen parent
/// directory, as the caller; the entry the guest gets is the one on the first branch where it
/// was made.
#[allow(clippy::too_many_arguments)]
fn make_on_each(
    fs: &Call<'_>,
    ctx: &Context,
    func: Func,
    parent: u64,
    name: &CStr,
    new: &NewEntry,
    make: impl Fn(&Found, &CStr) -> rustix::io::Result<()>,
) -> io::Result<Entry> {
    let _memo = fs.lookup_memo.changing_in(parent);
    let (rel, targets) = prepare(fs, func, parent, name)?;
    let mut fold = ErrnoFold::new();
    let mut first = None;
    for dir in &targets {
        // Copy-on-write: a whiteout in the way goes; a directory made over one is opaque.
        let r = fs.make_entry(ctx, dir.fd.as_fd(), name, || {
            make_labelled(fs, dir.fd.as_fd(), name, new, |n| {
                make(dir, n).map_err(io::Error::from)
            })
        });
        let over_whiteout = matches!(r, Ok((_, true)));
        let r = r.map(|(made, _)| made);
        if r.is_ok() && over_whiteout && func == Func::Mkdir {
            fs.make_opaque(&*dir.fd, name)?;
        }
        fold.add(&r);
        if r.is_ok() && first.is_none() {
            first = Some(dir.branch);
        }
    }
    fold.result()?;
    finish(fs, parent, name, &rel, first.expect("a success was folded"))
}

/// Creates directory `name` in `parent`.
pub fn mkdir(
    fs: &Call<'_>,
    ctx: &Context,
    parent: u64,
    name: &CStr,
    mode: u32,
    new: &NewEntry,
) -> io::Result<Entry> {
    let mode = Mode::from_raw_mode(mode & 0o7777);
    make_on_each(fs, ctx, Func::Mkdir, parent, name, new, |d, n| {
        rustix::fs::mkdirat(&d.fd, n, mode)
    })
}

/// Creates symlink `name` → `target` in `parent`. The target is stored, never resolved on the host.
pub fn symlink(
    fs: &Call<'_>,
    ctx: &Context,
    target: &CStr,
    parent: u64,
    name: &CStr,
    new: &NewEntry,
) -> io::Result<Entry> {
    if target.is_empty() || target.to_bytes().len() >= libc::PATH_MAX as usize {
        return Err(errno(libc::EINVAL));
    }
    make_on_each(fs, ctx, Func::Symlink, parent, name, new, |d, n| {
        rustix::fs::symlinkat(target, &d.fd, n)
    })
}

/// Creates a regular file, FIFO, socket or device node, as the calling guest user (so only a
/// privileged guest user can make a device node, as on a local filesystem). The daemon never
/// opens what it makes here: OPEN accepts regular files only.
pub fn mknod(
    fs: &Call<'_>,
    ctx: &Context,
    parent: u64,
    name: &CStr,
    mode: u32,
    rdev: u32,
    new: &NewEntry,
) -> io::Result<Entry> {
    let ftype = match mode & libc::S_IFMT {
        0 | libc::S_IFREG => FileType::RegularFile,
        libc::S_IFIFO => FileType::Fifo,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharacterDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => return Err(errno(libc::EINVAL)),
    };
    let perm = Mode::from_raw_mode(mode & 0o7777);
    make_on_each(fs, ctx, Func::Mknod, parent, name, new, |d, n| {
        rustix::fs::mknodat(&d.fd, n, ftype, perm, u64::from(rdev))
    })
}

/// Creates and opens regular file `name`. If it already exists (the guest's view was stale),
/// O_EXCL gets EEXIST and otherwise the existing file is opened, as open(2) would.
pub fn create(
    fs: &Call<'_>,
    ctx: &Context,
    parent: u64,
    name: &CStr,
    args: CreateIn,
) -> io::Result<(Entry, Option<u64>, OpenOptions, Option<u32>)> {
    let flags = host_open_flags(fs, args.flags);
    let new = NewEntry::of_request(fs, args.umask);
    let _memo = fs.lookup_memo.changing_in(parent);
    // The name exists after all (the guest's view was stale): without O_EXCL, open(2) opens it.
    let existing = |e: io::Error| {
        if e.raw_os_error() != Some(libc::EEXIST) || args.flags & libc::O_EXCL as u32 != 0 {
            return Err(e);
        }
        let entry = crate::fs::ops::lookup::lookup(fs, parent, name)?;
        match open(fs, ctx, entry.inode, args.flags, args.fuse_flags) {
            Ok((fh, opts, p)) => Ok((entry, fh, opts, p)),
            Err(e) => {
                fs.inodes.forget(entry.inode, 1);
                Err(e)
            }
        }
    };
    let (rel, dir) = match prepare(fs, Func::Create, parent, name) {
        Err(e) => return existing(e),
        Ok((rel, mut targets)) => (rel, targets.swap_remove(0)),
    };
    fs.check_handle_room()?;
    let made = fs.make_entry(ctx, dir.fd.as_fd(), name, || {
        make_labelled(fs, dir.fd.as_fd(), name, &new, |n| {
            beneath::open_beneath(
                dir.fd.as_fd(),
                n,
                flags | OFlags::CREATE | OFlags::EXCL,
                Mode::from_raw_mode(args.mode & 0o7777),
            )
        })
    });
    let (fd, _) = match made {
        Ok(m) => m,
        Err(e) => return existing(e),
    };
    let st = beneath::stat_fd(fd.as_fd())?;
    // The node keeps an O_PATH descriptor of the new file, not the open one.
    let node_fd = beneath::open_path(dir.fd.as_fd(), name)?;
    let found = Found {
        branch: dir.branch,
        fd: std::sync::Arc::new(node_fd),
        st,
    };
    let entry = fs.entry_for(parent, name, &rel, &found, Rebind::Yes)?;
    let opts = crate::fs::ops::open::open_options(fs, entry.inode, &st);
    let fh = fs.new_handle(Handle::File(FileHandle::new(
        fd,
        entry.inode,
        dir.branch,
        flags & !OFlags::TRUNC,
    )))?;
    let wanted = crate::fs::ops::open::guest_open_flags(args.flags, false);
    let (opts, backing) =
        crate::fs::ops::open::pass_through(fs, fh, entry.inode, wanted, false, opts)?;
    Ok((entry, Some(fh), opts, backing))
}

/// TMPFILE: an unnamed regular file (O_TMPFILE) in `parent`'s directory on the branch the
/// create policy picks, made as the caller and opened; LINK may name it later.
pub fn tmpfile(
    fs: &Call<'_>,
    ctx: &Context,
    parent: u64,
    args: CreateIn,
) -> io::Result<(Entry, Option<u64>, OpenOptions)> {
    let flags = host_open_flags(fs, args.flags);
    if flags & OFlags::RWMODE == OFlags::RDONLY {
        return Err(errno(libc::EINVAL));
    }
    let parent_rel = fs.inodes.path(parent)?;
    let dir = fs.create_targets(Func::Create, &parent_rel)?.swap_remove(0);
    fs.check_handle_room()?;
    let new = NewEntry::of_request(fs, args.umask);
    let fd = fs.as_caller(ctx, &[dir.fd.as_fd()], &[], Groups::OnRefusal, || {
        let _umask = new.umask.map(UmaskGuard::new);
        beneath::open_tmpfile(
            dir.fd.as_fd(),
            flags & !(OFlags::CREATE | OFlags::EXCL | OFlags::TRUNC),
            Mode::from_raw_mode(args.mode & 0o7777),
        )
    })?;
    // Unnamed, so unseen: labelled in place.
    if let Some(label) = &new.label {
        let xattr = crate::fs::ops::xattr::host_name(fs, &label.name, libc::EPERM)?;
        rustix::fs::fsetxattr(
            &fd,
            xattr.as_ref(),
            &label.value,
            rustix::fs::XattrFlags::empty(),
        )?;
    }
    let st = beneath::stat_fd(fd.as_fd())?;
    let node_fd = beneath::reopen_path(fd.as_fd())?;
    let inode = fs.inodes.insert_unnamed(
        crate::fs::inode::Bind {
            branch: dir.branch,
            fd: std::sync::Arc::new(node_fd),
            key: (st.st_dev, st.st_ino),
            is_dir: false,
            // Never closed while unnamed; a LINK names it (and binds it anew).
            handle: None,
        },
        fs.node_room(),
    )?;
    let entry = Entry {
        inode,
        generation: 0,
        attr: fs.union_attr(st, b""),
        attr_flags: 0,
        attr_timeout: fs.view().opts.cache_attr,
        entry_timeout: fs.view().opts.cache_entry,
    };
    let opts = crate::fs::ops::open::open_options(fs, inode, &st);
    let fh = fs.new_handle(Handle::File(FileHandle::new(fd, inode, dir.branch, flags)));
    match fh {
        Ok(fh) => {
            // Open through the daemon (TMPFILE's reply has no backing id): a later open of
            // the file, once linked, must not ask the kernel for passthrough beside it.
            if fs.passthrough.bits() != 0 {
                let h = fs.handles.file(fh, inode)?;
                let fd = h.as_file()?.fd.as_fd();
                fs.passthrough.opened(fh, inode, fd, Want::NotCovered);
            }
            Ok((entry, Some(fh), opts))
        }
        Err(e) => {
            fs.inodes.forget(inode, 1);
            Err(e)
        }
    }
}
