//! Adopting an inherited listening socket (`--fd`): the one place that turns a raw fd number
//! into an owned object. Validates the fd first; never closes fds it does not own.

use crate::sync::LockRecover;
use std::io;
use std::mem::size_of;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::sync::Mutex;

/// Fds already adopted; adopting one twice would create two owners of the same fd.
static ADOPTED: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

fn sockopt_int(fd: RawFd, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut val: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: val and len are valid for writes of the sizes given; the kernel validates fd.
    let ret = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut val as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if ret == 0 {
        Ok(val)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Checks that `fd` is open and is a listening unix stream socket, without taking ownership.
pub fn check_listening_socket(fd: RawFd) -> io::Result<()> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: F_GETFD only queries the descriptor flags; an invalid fd yields EBADF.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: an all-zero stat is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid, writable stat buffer.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a socket"));
    }
    if sockopt_int(fd, libc::SO_DOMAIN)? != libc::AF_UNIX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a unix socket",
        ));
    }
    if sockopt_int(fd, libc::SO_TYPE)? != libc::SOCK_STREAM {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a stream socket",
        ));
    }
    if sockopt_int(fd, libc::SO_ACCEPTCONN)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket is not listening",
        ));
    }
    Ok(())
}

/// Takes ownership of the inherited listening socket `fd` (passed on our command line by the
/// parent, which owns nothing in this process). Fails if it is not a listening unix socket or was
/// already adopted. The listener is made blocking and close-on-exec.
pub fn adopt_listener(fd: RawFd) -> io::Result<UnixListener> {
    check_listening_socket(fd)?;
    let listener = UnixListener::from(adopt_checked(fd)?);
    listener.set_nonblocking(false)?;
    Ok(listener)
}

/// Takes ownership of the inherited connected unix stream socket `fd` (the sandbox's
/// supervisor's end of its channel to the child, passed across its exec). Fails if it is not
/// an open unix stream socket or was already adopted. Made close-on-exec.
pub fn adopt_stream(fd: RawFd) -> io::Result<std::os::unix::net::UnixStream> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    if sockopt_int(fd, libc::SO_DOMAIN)? != libc::AF_UNIX
        || sockopt_int(fd, libc::SO_TYPE)? != libc::SOCK_STREAM
        || sockopt_int(fd, libc::SO_ACCEPTCONN)? != 0
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a connected unix stream socket",
        ));
    }
    Ok(adopt_checked(fd)?.into())
}

/// Takes ownership of `fd`, an open socket its caller checked, inherited for this use alone:
/// once only (ADOPTED), made close-on-exec.
fn adopt_checked(fd: RawFd) -> io::Result<OwnedFd> {
    let mut adopted = ADOPTED.locked();
    if adopted.contains(&fd) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "fd already adopted",
        ));
    }
    // SAFETY: fd is an open socket (the caller checked) handed to this process for this use
    // alone, adopted only once (ADOPTED): no other object in this process owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    adopted.push(fd);
    // SAFETY: F_SETFD with FD_CLOEXEC only changes descriptor flags of an fd we now own.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn rejects_non_sockets_and_accepts_listeners() {
        assert!(check_listening_socket(-1).is_err());
        assert!(check_listening_socket(987_654).is_err());
        let file = std::fs::File::open("/").unwrap();
        assert!(check_listening_socket(file.as_raw_fd()).is_err());
        let dir = std::env::temp_dir().join(format!("uvfs-fd-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let l = UnixListener::bind(&dir).unwrap();
        assert!(check_listening_socket(l.as_raw_fd()).is_ok());
        let _ = std::fs::remove_file(&dir);
    }
}
