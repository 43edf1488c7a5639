//! Unix stream sockets that carry descriptors (SCM_RIGHTS): the vhost-user messages the
//! front-end tap forwards, and the upgrade channel that hands a running session to a new
//! daemon. Also the in-process socket pair the vhost-user handler is served through.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
#[cfg(test)]
use std::os::fd::AsFd;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Most descriptors one message carries (the kernel's SCM_MAX_FD is 253).
pub const MAX_FDS: usize = 64;

/// Sends all of `bytes`, with `fds` attached to the first byte.
pub fn send_with_fds(sock: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    if fds.len() > MAX_FDS {
        return Err(io::Error::other(format!(
            "{} descriptors in one message (at most {MAX_FDS})",
            fds.len()
        )));
    }
    let mut sent = 0;
    while sent < bytes.len() || (sent == 0 && bytes.is_empty()) {
        let mut control = SendAncillaryBuffer::new(&mut space);
        if sent == 0 && !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
            return Err(io::Error::other(
                "descriptors do not fit the control buffer",
            ));
        }
        let n = match rustix::net::sendmsg(
            sock,
            &[IoSlice::new(&bytes[sent..])],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 && !bytes.is_empty() {
            return Err(io::ErrorKind::WriteZero.into());
        }
        sent += n;
        if bytes.is_empty() {
            break;
        }
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes; the descriptors attached to any of them are returned.
/// `Ok(None)` when the peer closed before the first byte.
pub fn recv_exact_with_fds(sock: &UnixStream, buf: &mut [u8]) -> io::Result<Option<Vec<OwnedFd>>> {
    recv_exact_until(sock, buf, None)
}

/// [`recv_exact_with_fds`], failing with `TimedOut` if the bytes have not all come by
/// `deadline` (a peer that stalls cannot hold the reader).
pub fn recv_exact_with_fds_by(
    sock: &UnixStream,
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<Option<Vec<OwnedFd>>> {
    recv_exact_until(sock, buf, Some(deadline))
}

fn recv_exact_until(
    sock: &UnixStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> io::Result<Option<Vec<OwnedFd>>> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut fds = Vec::new();
    let mut got = 0;
    while got < buf.len() {
        if let Some(deadline) = deadline {
            wait_until_readable(sock, deadline)?;
        }
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let r = rustix::net::recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut buf[got..])],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        );
        let n = match r {
            Ok(m) => m.bytes,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = msg {
                fds.extend(received);
            }
        }
        if n == 0 {
            if got == 0 && fds.is_empty() {
                return Ok(None);
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
    }
    Ok(Some(fds))
}

/// Waits until `sock` is readable (or hung up); `TimedOut` once `deadline` has passed.
fn wait_until_readable(sock: &UnixStream, deadline: Instant) -> io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let timeout = Timespec {
            tv_sec: left.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: left.subsec_nanos().into(),
        };
        let mut fds = [PollFd::new(sock, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) => {}
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits until `sock` is readable or `wake` is (a pipe or eventfd); true when `sock` is.
pub fn wait_readable(sock: BorrowedFd<'_>, wake: BorrowedFd<'_>) -> io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags};
    loop {
        let mut fds = [
            PollFd::from_borrowed_fd(sock, PollFlags::IN),
            PollFd::from_borrowed_fd(wake, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        if !fds[1].revents().is_empty() {
            return Ok(false);
        }
        if !fds[0].revents().is_empty() {
            return Ok(true);
        }
    }
}

/// A listening socket of this process's own (an abstract name no file system shows) with
/// one connection already made to it: the listener for the vhost-user handler to accept,
/// and the stream the tap talks to it through. Made before the sandbox (which may forbid
/// `socket`, `bind` and `connect`).
pub fn inner_pair() -> io::Result<(UnixListener, UnixStream)> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "union-virtiofsd/{}/{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    let listener = UnixListener::bind_addr(&addr)?;
    let stream = UnixStream::connect_addr(&addr)?;
    Ok((listener, stream))
}

/// Writes 1 to an eventfd (a ring's kick): its reader wakes and looks at the ring.
pub fn kick(fd: BorrowedFd<'_>) -> io::Result<()> {
    rustix::io::write(fd, &1u64.to_ne_bytes())?;
    Ok(())
}

/// The pid (0 if outside this pid namespace) and user id of the process at the other end of
/// `sock`, as it connected.
pub fn peer(sock: &UnixStream) -> io::Result<(u32, u32)> {
    peer_cred(sock).map(|c| (c.pid, c.uid))
}

/// Who is at the other end of a unix socket, as it connected (SO_PEERCRED).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// Its pid (0 if outside this pid namespace).
    pub pid: u32,
    /// Its effective user id.
    pub uid: u32,
    /// Its effective group id.
    pub gid: u32,
}

/// The pid, user and group of the process at the other end of `sock`, as it connected.
pub fn peer_cred(sock: &UnixStream) -> io::Result<PeerCred> {
    use std::os::fd::AsRawFd;
    // Not rustix's socket_peercred: in a PID namespace the peer's pid reads as 0, which it
    // refuses.
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid out-pointers sized for SO_PEERCRED's ucred.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: cred.pid as u32,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// The supplementary groups of the process at the other end of `sock`, as it connected
/// (SO_PEERGROUPS).
pub fn peer_groups(sock: &UnixStream) -> io::Result<Vec<u32>> {
    use std::os::fd::AsRawFd;
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: `groups` is a writable buffer of `len` bytes, and `len` a valid out-pointer;
        // the kernel writes at most `len` bytes and sets `len` to what it wrote or needs.
        let r = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if r == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        // ERANGE: the buffer was too small, `len` says how large it must be.
        if e.raw_os_error() != Some(libc::ERANGE) || n <= groups.len() {
            return Err(e);
        }
        groups.resize(n, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn descriptors_cross_with_their_bytes() {
        let (a, b) = UnixStream::pair().unwrap();
        let (r, w) = rustix::pipe::pipe().unwrap();
        send_with_fds(&a, b"hello world", &[r.as_fd(), w.as_fd()]).unwrap();
        let mut buf = [0u8; 11];
        let fds = recv_exact_with_fds(&b, &mut buf).unwrap().unwrap();
        assert_eq!(&buf, b"hello world");
        assert_eq!(fds.len(), 2);
        assert_ne!(fds[0].as_raw_fd(), r.as_raw_fd());
        rustix::io::write(&fds[1], b"x").unwrap();
        let mut one = [0u8; 1];
        rustix::io::read(&r, &mut one).unwrap();
        assert_eq!(&one, b"x");
    }

    #[test]
    fn a_closed_peer_reads_as_none() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        let mut buf = [0u8; 4];
        assert!(recv_exact_with_fds(&b, &mut buf).unwrap().is_none());
    }

    #[test]
    fn a_stalled_peer_times_out() {
        let (a, b) = UnixStream::pair().unwrap();
        std::io::Write::write_all(&mut &a, b"ab").unwrap();
        let mut buf = [0u8; 4];
        let deadline = Instant::now() + std::time::Duration::from_millis(50);
        let e = recv_exact_with_fds_by(&b, &mut buf, deadline).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn peers_are_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let c = peer_cred(&a).unwrap();
        assert_eq!(c.uid, rustix::process::geteuid().as_raw());
        assert_eq!(c.gid, rustix::process::getegid().as_raw());
        let mine: Vec<u32> = rustix::process::getgroups()
            .unwrap()
            .iter()
            .map(|g| g.as_raw())
            .collect();
        let mut theirs = peer_groups(&a).unwrap();
        let mut mine = mine;
        theirs.sort_unstable();
        mine.sort_unstable();
        assert_eq!(theirs, mine);
    }

    #[test]
    fn the_inner_pair_is_connected() {
        let (l, s) = inner_pair().unwrap();
        let (mut accepted, _) = l.accept().unwrap();
        std::io::Write::write_all(&mut &s, b"ok").unwrap();
        let mut buf = [0u8; 2];
        std::io::Read::read_exact(&mut accepted, &mut buf).unwrap();
        assert_eq!(&buf, b"ok");
    }
}
