//! SETXATTR, GETXATTR, LISTXATTR and REMOVEXATTR, passed through to the host inode via its
//! `/proc/self/fd` name. Reads use their function's search policy, changes the action policy.
//! Symlinks too, through the same name (it leads to the symlink itself, not its target), so
//! they answer as the host does (a `user.*` name: ENODATA to read, EPERM to set; `trusted.*`
//! and `security.*` pass). `xattr=nosys` answers
//! ENOSYS (the guest stops asking); `xattr=noattr` reports no attributes and refuses to set any.
//! With `--xattrmap` (`fs/xattrmap.rs`), a guest name becomes its host name or is refused as
//! virtiofsd refuses it (`bad`: EPERM, ENODATA for a read; `unsupported`: ENOTSUP), and a
//! host list is renamed and filtered before the guest sees it; its size (a listxattr of size
//! 0) is the mapped list's, where virtiofsd answers the host's.

use std::borrow::Cow;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use fuse_backend_rs::api::filesystem::{Context, GetxattrReply, ListxattrReply};
use rustix::fs::XattrFlags;

use crate::fs::call::Call;
use crate::fs::caller::Groups;
use crate::fs::errno;
use crate::fs::handle::FileHandle;
use crate::fs::options::{Func, XattrMode};
use crate::fs::resolve::Found;
use crate::fs::view::View;
use crate::fs::xattrmap::ClientName;
use crate::sys::abi::fuse::SETXATTR_ACL_KILL_SGID;
use crate::sys::beneath;
use crate::union::ErrnoFold;

/// Linux's largest xattr value and name list (XATTR_SIZE_MAX, XATTR_LIST_MAX): a guest asking
/// for more gets a buffer of this size, never an allocation of the size it named.
const XATTR_MAX: u32 = 65536;

/// What the configured `xattr=` mode answers instead of passing through, if anything.
fn mode_answer(fs: &Call<'_>, noattr: i32) -> io::Result<()> {
    match fs.view().opts.xattr {
        XattrMode::Passthrough => Ok(()),
        XattrMode::Noattr => Err(errno(noattr)),
        XattrMode::Nosys => Err(errno(libc::ENOSYS)),
    }
}

fn target(f: &Found) -> io::Result<beneath::ProcPath> {
    Ok(beneath::proc_path(f.fd.as_fd()))
}

fn found(fs: &Call<'_>, func: Func, inode: u64) -> io::Result<Found> {
    fs.search_node(func, inode)
}

/// The host name of the guest's `name` under `--xattrmap` (the same name without one), or
/// the errno it is refused with: `refused` for a `bad` rule (virtiofsd answers EPERM, but
/// ENODATA to a read), ENOTSUP for an `unsupported` one.
pub(crate) fn host_name<'a>(
    fs: &Call<'_>,
    name: &'a CStr,
    refused: i32,
) -> io::Result<Cow<'a, CStr>> {
    let Some(map) = &fs.view().opts.xattrmap else {
        return Ok(Cow::Borrowed(name));
    };
    match map.client(name) {
        ClientName::Use(host) => Ok(host),
        ClientName::Refused => Err(errno(refused)),
        ClientName::Unsupported => Err(errno(libc::ENOTSUP)),
    }
}

/// Clears the guest's file capability from the regular file `fd` (a descriptor of any kind)
/// when `--xattrmap` stores `security.capability` under another name: the host kernel clears
/// only the real name on a write, truncate or chown, and a capability must not outlive a change
/// to the program it empowers (virtiofsd does the same). A file without it (ENODATA) or a
/// filesystem without xattrs (ENOTSUP) is fine; any other error fails the change.
pub(crate) fn clear_renamed_capability(view: &View, fd: BorrowedFd<'_>) -> io::Result<()> {
    let Some(name) = view
        .opts
        .xattrmap
        .as_ref()
        .and_then(|m| m.renamed_capability())
    else {
        return Ok(());
    };
    match rustix::fs::removexattr(&beneath::proc_path(fd), name) {
        Err(e) if e == rustix::io::Errno::NODATA || e == rustix::io::Errno::NOTSUP => Ok(()),
        r => Ok(r?),
    }
}

/// [`clear_renamed_capability`] before a change made through the open file `h`: only if it
/// was opened for writing (the kernel's check before it clears the real name), so a handle
/// that cannot change the file cannot strip its capability either.
pub(crate) fn clear_renamed_capability_through(view: &View, h: &FileHandle) -> io::Result<()> {
    if h.is_writable() {
        clear_renamed_capability(view, h.fd.as_fd())?;
    }
    Ok(())
}

/// Value of `name` (or its size when `size` is 0).
pub fn getxattr(fs: &Call<'_>, inode: u64, name: &CStr, size: u32) -> io::Result<GetxattrReply> {
    mode_answer(fs, libc::ENODATA)?;
    if fs.view().opts.path_queries {
        if let Some(what) = name.to_bytes().strip_prefix(b"user.mergerfs.") {
            return path_query(fs, inode, what, size);
        }
    }
    let name = host_name(fs, name, libc::ENODATA)?;
    let name = name.as_ref();
    // Keep the descriptor alive while its /proc path is used. No fstat: only the descriptor
    // is needed (a guest asks for security.capability before every write).
    let (_, fd) = fs.search_node_fd(Func::Getxattr, inode)?;
    let p = beneath::proc_path(fd.as_fd());
    if size == 0 {
        return Ok(GetxattrReply::Count(
            rustix::fs::getxattr_query(&p, name)? as u32
        ));
    }
    let mut buf = vec![0u8; size.min(XATTR_MAX) as usize];
    let n = rustix::fs::getxattr(&p, name, &mut buf[..])?;
    buf.truncate(n);
    Ok(GetxattrReply::Value(buf))
}

/// mergerfs's per-file queries as the guest reads them (`path-queries=true`): where the
/// node's file lives on the host, each value as mergerfs gives it (`allpaths` NUL-separated).
fn path_query(fs: &Call<'_>, inode: u64, what: &[u8], size: u32) -> io::Result<GetxattrReply> {
    let what = match what {
        b"basepath" => "basepath",
        b"relpath" => "relpath",
        b"fullpath" => "fullpath",
        b"allpaths" => "allpaths",
        _ => return Err(errno(libc::ENODATA)),
    };
    let rel = fs.inodes.path(inode)?;
    let rel = std::str::from_utf8(rel.to_bytes()).map_err(|_| errno(libc::ENODATA))?;
    let rel = if rel == "." { "/" } else { rel };
    let v = fs
        .query_path(rel, what)
        .map_err(|e| errno(e.errno))?
        .join(&0u8);
    match size {
        0 => Ok(GetxattrReply::Count(v.len() as u32)),
        _ if v.len() > size as usize => Err(errno(libc::ERANGE)),
        _ => Ok(GetxattrReply::Value(v)),
    }
}

/// NUL-separated names (or their total size when `size` is 0).
pub fn listxattr(fs: &Call<'_>, inode: u64, size: u32) -> io::Result<ListxattrReply> {
    if let Err(e) = mode_answer(fs, 0) {
        return match e.raw_os_error() {
            Some(0) if size == 0 => Ok(ListxattrReply::Count(0)),
            Some(0) => Ok(ListxattrReply::Names(Vec::new())),
            _ => Err(e),
        };
    }
    // Keep `f` (and so its descriptor) alive while its /proc path is used.
    let f = found(fs, Func::Listxattr, inode)?;
    let p = target(&f)?;
    if let Some(map) = &fs.view().opts.xattrmap {
        // The whole host list (at most XATTR_MAX), mapped: its size is the guest's answer
        // to a size query, and the guest's buffer must hold the mapped list, not the host's.
        let mut buf = vec![0u8; XATTR_MAX as usize];
        let n = rustix::fs::listxattr(&p, &mut buf[..])?;
        let names = map.server_list(&buf[..n]);
        return match size {
            0 => Ok(ListxattrReply::Count(names.len() as u32)),
            _ if names.len() > size as usize => Err(errno(libc::ERANGE)),
            _ => Ok(ListxattrReply::Names(names)),
        };
    }
    if size == 0 {
        return Ok(ListxattrReply::Count(
            rustix::fs::listxattr_query(&p)? as u32
        ));
    }
    let mut buf = vec![0u8; size.min(XATTR_MAX) as usize];
    let n = rustix::fs::listxattr(&p, &mut buf[..])?;
    buf.truncate(n);
    Ok(ListxattrReply::Names(buf))
}

/// Applies `op` to every copy the action policy selects, as the caller, with the host name
/// of the guest's `name` (a name `--xattrmap` refuses answers EPERM or ENOTSUP).
fn each_copy(
    fs: &Call<'_>,
    ctx: &Context,
    func: Func,
    inode: u64,
    name: &CStr,
    groups: Groups,
    op: impl Fn(&Found, &beneath::ProcPath, &CStr) -> io::Result<()>,
) -> io::Result<()> {
    mode_answer(fs, libc::ENOTSUP)?;
    let name = host_name(fs, name, libc::EPERM)?;
    // A map that leads a guest name to an ACL name on the host is refused as the guest's
    // ACL names are (see `refuse_acl`).
    refuse_acl(fs, &name)?;
    let rel = fs.inodes.path(inode)?;
    let mut fold = ErrnoFold::new();
    for f in fs.action(func, &rel)? {
        fold.add(
            &target(&f).and_then(|p| {
                fs.as_caller(ctx, &[f.fd.as_fd()], &[], groups, || op(&f, &p, &name))
            }),
        );
    }
    fold.result_all()
}

/// Whether `name` is one of the two POSIX ACL names.
fn is_acl(name: &CStr) -> bool {
    name.to_bytes().starts_with(b"system.posix_acl_")
}

/// Without `--posix-acl` (or a guest that did not take it), ACLs are not offered: the guest
/// kernel checks mode bits only and refuses ACL xattrs itself, and one that sends them anyway
/// is refused too (set without the guest's word on set-group-ID, the host could keep a bit
/// the guest's kernel would have cleared).
fn refuse_acl(fs: &Call<'_>, name: &CStr) -> io::Result<()> {
    if is_acl(name) && !fs.negotiated.posix_acl() {
        return Err(errno(libc::EOPNOTSUPP));
    }
    Ok(())
}

/// Sets `name` on every writable copy. With POSIX ACLs, an access ACL is set as the caller
/// with the file's group among the caller's groups (so the host keeps set-group-ID, as it
/// would for a member), and set-group-ID is then cleared where the guest's kernel says a
/// caller outside the group set it (`FUSE_SETXATTR_ACL_KILL_SGID`).
pub fn setxattr(
    fs: &Call<'_>,
    ctx: &Context,
    inode: u64,
    name: &CStr,
    value: &[u8],
    flags: u32,
    setxattr_flags: u32,
) -> io::Result<()> {
    refuse_acl(fs, name)?;
    let _memo = cow_masks_may_change(fs);
    let flags = XattrFlags::from_bits(flags).ok_or_else(|| errno(libc::EINVAL))?;
    let access_acl = name.to_bytes() == b"system.posix_acl_access";
    let kill_sgid = access_acl && setxattr_flags & SETXATTR_ACL_KILL_SGID != 0;
    let groups = if access_acl {
        Groups::Always
    } else {
        Groups::OnRefusal
    };
    each_copy(
        fs,
        ctx,
        Func::Setxattr,
        inode,
        name,
        groups,
        |f, p, name| {
            rustix::fs::setxattr(p, name, value, flags)?;
            if kill_sgid {
                let mode = beneath::stat_fd(f.fd.as_fd())?.st_mode;
                if mode & libc::S_ISGID != 0 {
                    let m = rustix::fs::Mode::from_raw_mode(mode & 0o7777 & !libc::S_ISGID);
                    rustix::fs::chmod(p, m)?;
                }
            }
            Ok(())
        },
    )
}

/// Under copy-on-write an xattr can make a directory opaque (hiding the layers below), so
/// the lookup memo is dropped after the change.
fn cow_masks_may_change<'a>(fs: &Call<'a>) -> Option<impl Drop + 'a> {
    fs.with_view(|v| v.opts.cow)
        .then(|| fs.fs().lookup_memo.changing_everywhere())
}

/// Removes `name` from every writable copy.
pub fn removexattr(fs: &Call<'_>, ctx: &Context, inode: u64, name: &CStr) -> io::Result<()> {
    refuse_acl(fs, name)?;
    let _memo = cow_masks_may_change(fs);
    each_copy(
        fs,
        ctx,
        Func::Removexattr,
        inode,
        name,
        Groups::OnRefusal,
        |_, p, name| Ok(rustix::fs::removexattr(p, name)?),
    )
}
