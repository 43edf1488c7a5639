//! The daemon's own files next to its socket: the locked `<socket>.pid` file, the socket's
//! group (`--socket-group`) and sockets staged to replace a running daemon's. Nothing here
//! touches guest data.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rustix::fs::FlockOperation;

/// Creates (or reuses) `path`, takes an exclusive lock on it without waiting, and writes the
/// daemon's pid into it. Fails if another process holds the lock (another daemon serving the
/// same socket). Keep the returned file open: closing it releases the lock.
/// Never follows a symlink at `path` (ELOOP): the daemon truncates the file it locks.
pub fn write_pid_file(path: &Path) -> io::Result<File> {
    loop {
        let file = OpenOptions::new()
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive)?;
        // The file locked must still be the one at `path` (another daemon may have removed
        // and recreated it in between).
        let still_there = std::fs::metadata(path)
            .is_ok_and(|m| m.ino() == file.metadata().map(|f| f.ino()).unwrap_or(0));
        if !still_there {
            continue;
        }
        say_pid(&file, std::process::id())?;
        return Ok(file);
    }
}

/// Whether a daemon holds the lock on the pid file `path` (false when there is none). Takes a
/// shared lock for the moment it looks: a daemon starting at that very moment on the same
/// socket fails as if this one held it.
pub fn pid_file_is_locked(path: &Path) -> io::Result<bool> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match rustix::fs::flock(&file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => Ok(false),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// Makes the pid file `file` (received locked from the daemon this one upgrades) say `pid`.
pub fn claim_pid_file(file: &File, pid: u32) -> io::Result<()> {
    say_pid(file, pid)
}

/// Writes `pid` over the start of the pid file, then cuts what is left of a longer one: a
/// reader never finds the file empty (truncating first left a moment where it was, and a
/// reader then saw no pid at all).
fn say_pid(file: &File, pid: u32) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let line = format!("{pid}\n");
    file.write_all_at(line.as_bytes(), 0)?;
    file.set_len(line.len() as u64)
}

/// Whether a process accepts connections on the unix socket `path`: a non-blocking connect
/// that is refused (nothing listens) says no; one that succeeds or would wait (a full
/// backlog) says yes. The connection, if any, is closed at once; the listener sees it as a
/// client that hung up.
pub fn socket_is_served(path: &Path) -> io::Result<bool> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    match rustix::net::connect(&fd, &SocketAddrUnix::new(path)?) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INPROGRESS) => Ok(true),
        Err(rustix::io::Errno::CONNREFUSED) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether this process may create and remove files in the directory `dir` (write and
/// search permission, with its effective ids; EROFS on a read-only filesystem).
pub fn may_create_in(dir: &Path) -> io::Result<()> {
    use rustix::fs::{Access, AtFlags, CWD};
    rustix::fs::accessat(
        CWD,
        dir,
        Access::WRITE_OK | Access::EXEC_OK,
        AtFlags::EACCESS,
    )?;
    Ok(())
}

/// Removes the unix socket at `path` if it is one (left by a daemon that is gone): never a
/// file of any other type, and nothing when nothing is there.
pub fn remove_stale_socket(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(io::Error::from_raw_os_error(libc::EEXIST)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Listens on the unix socket `path`, replacing a stale socket (never another kind of file:
/// EEXIST); `mode` for its permissions. The
/// socket file never has more than `mode` (the socket's own mode, set before `bind`, is what
/// `bind` creates the file with, less the umask; the exact mode follows): no one outside it
/// can connect in between, whatever the umask.
pub fn bind_unix(path: &Path, mode: Option<u32>) -> io::Result<std::os::unix::net::UnixListener> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    remove_stale_socket(path)?;
    let Some(mode) = mode else {
        return std::os::unix::net::UnixListener::bind(path);
    };
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(mode))?;
    rustix::net::bind(&fd, &SocketAddrUnix::new(path)?)?;
    rustix::net::listen(&fd, 128)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(fd.into())
}

/// A unix socket bound under a temporary name beside its final path, until [`Staged::publish`]
/// renames it into place (`--upgrade`: the running daemon's socket stays until the session is
/// ours). Holds its directory open, so both ends work from inside a sandbox too. Dropped
/// unpublished, the temporary name is removed.
#[derive(Debug)]
pub struct Staged {
    dir: std::os::fd::OwnedFd,
    temp: std::ffi::OsString,
    name: std::ffi::OsString,
    published: bool,
}

/// Listens on a new unix socket that will replace `path`: bound as `<path>.new-<pid>` with
/// `mode`, and given to group `gid` (read/write for owner and group only) if there is one.
pub fn bind_staged(
    path: &Path,
    mode: u32,
    gid: Option<u32>,
) -> io::Result<(std::os::unix::net::UnixListener, Staged)> {
    use rustix::fs::{Mode, OFlags};
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?
        .to_owned();
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut temp = name.clone();
    temp.push(format!(".new-{}", std::process::id()));
    let dir = rustix::fs::open(
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let temp_path = parent.join(&temp);
    let listener = bind_unix(&temp_path, Some(mode))?;
    let staged = Staged {
        dir,
        temp,
        name,
        published: false,
    };
    if let Some(gid) = gid {
        give_socket_to_group(&temp_path, gid)?;
    }
    Ok((listener, staged))
}

impl Staged {
    /// Renames the socket over its final path (atomically replacing the old one).
    pub fn publish(mut self) -> io::Result<()> {
        rustix::fs::renameat(&self.dir, &self.temp, &self.dir, &self.name)?;
        self.published = true;
        Ok(())
    }

    /// Removes the socket's temporary name (as dropping it does).
    pub fn abandon(self) {}
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.published {
            let _ = rustix::fs::unlinkat(&self.dir, &self.temp, rustix::fs::AtFlags::empty());
        }
    }
}

/// The gid of group `name` (a number, or a name in /etc/group), if it exists.
pub fn group_id(name: &str) -> Option<u32> {
    if let Ok(gid) = name.parse() {
        return Some(gid);
    }
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

/// Gives the socket at `path` to group `gid`, read/write for owner and group only.
pub fn give_socket_to_group(path: &Path, gid: u32) -> io::Result<()> {
    std::os::unix::fs::chown(path, None, Some(gid))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_file_is_locked_once() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.pid");
        let f = write_pid_file(&p).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap().trim(),
            std::process::id().to_string()
        );
        // flock locks belong to the open file description: a second open conflicts.
        let e = write_pid_file(&p).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EWOULDBLOCK));
        drop(f);
        let f = write_pid_file(&p).unwrap();
        // Claimed by a pid shorter or longer than the one there: exactly the new one.
        for pid in [7, 1234567, 42] {
            claim_pid_file(&f, pid).unwrap();
            assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("{pid}\n"));
        }
    }

    #[test]
    fn a_staged_socket_replaces_the_old_one_when_published() {
        use std::os::unix::fs::FileTypeExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.ctl");
        let _old = bind_unix(&p, Some(0o600)).unwrap();
        let old_ino = std::fs::metadata(&p).unwrap().ino();
        let (l, staged) = bind_staged(&p, 0o600, None).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().ino(), old_ino);
        staged.publish().unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert!(m.file_type().is_socket());
        assert_ne!(m.ino(), old_ino);
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        let _c = std::os::unix::net::UnixStream::connect(&p).unwrap();
        l.accept().unwrap();
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        let (_l, staged) = bind_staged(&p, 0o600, None).unwrap();
        staged.abandon();
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        drop(bind_staged(&p, 0o600, None).unwrap());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn groups_by_number_and_name() {
        assert_eq!(group_id("1234"), Some(1234));
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_id("no-such-group-here"), None);
    }
}
