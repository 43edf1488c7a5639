//! The control socket's server: one thread accepting connections on `<socket>.ctl` and
//! answering their requests ([`super::proto`]), one connection at a time. Only the host's
//! daemon user, root, or (with `--socket-group`) that group's members are served, by
//! SO_PEERCRED besides the socket's mode. Their input is still untrusted: frames are bounded,
//! nothing here panics on it, and a client that hangs up or stalls loses its own connection
//! and nothing else.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::{debug, error, warn};

use super::proto::{self, ProtoError, Reply, Request};
use super::Control;
use crate::sys::uds::{self, PeerCred};

/// How long one request may take to arrive, from when the server starts waiting for it:
/// connections are served one at a time, so a stalled client must not hold the others.
const PATIENCE: Duration = Duration::from_secs(10);

/// Starts the thread serving `listener` for `fs`. Peers are served if they are root, this
/// daemon's user, or (when `group` is given) members of that group.
pub fn spawn<C: Control>(
    listener: UnixListener,
    group: Option<u32>,
    fs: Arc<C>,
) -> io::Result<JoinHandle<()>> {
    let access = Access {
        uid: rustix::process::geteuid().as_raw(),
        group,
    };
    std::thread::Builder::new()
        .name("ctl".to_string())
        .spawn(move || serve(&listener, access, &*fs))
}

/// Whom the server answers.
#[derive(Clone, Copy, Debug)]
struct Access {
    /// The daemon's own user.
    uid: u32,
    /// `--socket-group`.
    group: Option<u32>,
}

impl Access {
    /// Whether a peer with `cred` (and, asked only if needed, supplementary `groups`) may use
    /// the socket.
    fn allows(&self, cred: PeerCred, groups: impl FnOnce() -> io::Result<Vec<u32>>) -> bool {
        if cred.uid == 0 || cred.uid == self.uid {
            return true;
        }
        let Some(group) = self.group else {
            return false;
        };
        cred.gid == group || groups().is_ok_and(|g| g.contains(&group))
    }
}

/// Accepts connections until the listener fails for good.
fn serve<C: Control + ?Sized>(listener: &UnixListener, access: Access, fs: &C) {
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBADF | libc::EINVAL)) => {
                error!("ctl: the control socket cannot accept any more: {e}");
                return;
            }
            Err(e) => {
                // Out of descriptors or memory: a pause instead of a busy loop.
                warn!("ctl: accept: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        match uds::peer_cred(&stream) {
            Ok(cred) if access.allows(cred, || uds::peer_groups(&stream)) => {
                serve_connection(&stream, fs);
            }
            Ok(cred) => warn!(
                "ctl: refused uid {} gid {} (pid {}): not this daemon's user or group",
                cred.uid, cred.gid, cred.pid
            ),
            Err(e) => warn!("ctl: cannot tell who connected: {e}"),
        }
    }
}

/// One request as it came: its payload and the descriptors sent with it.
struct Frame {
    payload: Vec<u8>,
    fds: Vec<OwnedFd>,
}

/// Why no request could be read.
enum ReadError {
    /// A frame longer than the protocol allows (the stream cannot be followed any further).
    Frame(ProtoError),
    /// The connection failed, timed out or ended inside a frame.
    Io(io::Error),
}

/// Answers the requests on one connection until the client hangs up (or breaks the framing).
pub(crate) fn serve_connection<C: Control + ?Sized>(stream: &UnixStream, fs: &C) {
    loop {
        let Frame { payload, fds } = match read_frame(stream) {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(ReadError::Io(e)) => {
                debug!("ctl: connection ends: {e}");
                return;
            }
            Err(ReadError::Frame(e)) => {
                warn!("ctl: malformed request: {e}");
                let _ = send_reply(stream, &refusal(libc::EMSGSIZE, &e));
                return;
            }
        };
        let reply = if fds.len() > uds::MAX_FDS {
            warn!("ctl: request with {} descriptors refused", fds.len());
            Reply::Err {
                errno: libc::EINVAL,
                message: format!(
                    "{} descriptors in one request (at most {})",
                    fds.len(),
                    uds::MAX_FDS
                ),
            }
        } else {
            match Request::decode(&payload) {
                Ok(req) => answer(fs, req, fds),
                Err(e) => {
                    warn!("ctl: malformed request: {e}");
                    refusal(libc::EINVAL, &e)
                }
            }
        };
        if let Err(e) = send_reply(stream, &reply) {
            debug!("ctl: cannot reply: {e}");
            return;
        }
    }
}

/// The error reply for a request that is not the protocol.
fn refusal(errno: i32, e: &ProtoError) -> Reply {
    Reply::Err {
        errno,
        message: format!("malformed request: {e}"),
    }
}

/// Reads one frame: its payload and the descriptors that came with it. `None` when the client
/// hung up between requests.
fn read_frame(stream: &UnixStream) -> Result<Option<Frame>, ReadError> {
    let deadline = Instant::now() + PATIENCE;
    let mut header = [0u8; proto::HEADER_LEN];
    let Some(mut fds) =
        uds::recv_exact_with_fds_by(stream, &mut header, deadline).map_err(ReadError::Io)?
    else {
        return Ok(None);
    };
    let len = proto::frame_len(header).map_err(ReadError::Frame)?;
    let mut payload = vec![0u8; len];
    match uds::recv_exact_with_fds_by(stream, &mut payload, deadline).map_err(ReadError::Io)? {
        Some(more) => fds.extend(more),
        None => return Err(ReadError::Io(io::ErrorKind::UnexpectedEof.into())),
    }
    Ok(Some(Frame { payload, fds }))
}

/// Runs one request against `fs`. A panic in the filesystem becomes an EIO reply: the
/// control thread stays.
fn answer<C: Control + ?Sized>(fs: &C, req: Request, fds: Vec<OwnedFd>) -> Reply {
    if !fds.is_empty() && !matches!(req, Request::Set { .. }) {
        debug!(
            "ctl: {} descriptors with a request that takes none",
            fds.len()
        );
    }
    let run = AssertUnwindSafe(|| match &req {
        Request::Keys => Ok(fs.ctl_keys().into_iter().map(String::into_bytes).collect()),
        Request::Get { key } => fs.ctl_get(key).map(|v| vec![v.into_bytes()]),
        Request::Set { key, value } => super::apply_set(fs, key, value, fds).map(|_| Vec::new()),
        Request::Query { path, what } => fs.ctl_query(path, what),
        Request::Protocol => Ok(vec![proto::PROTOCOL_VERSION.to_string().into_bytes()]),
    });
    match catch_unwind(run) {
        Ok(Ok(values)) => Reply::Ok(values),
        Ok(Err(e)) => {
            debug!("ctl: {req:?}: {e}");
            Reply::Err {
                errno: e.errno,
                message: e.message,
            }
        }
        Err(_) => {
            error!("ctl: {req:?} panicked");
            Reply::Err {
                errno: libc::EIO,
                message: "internal error".to_string(),
            }
        }
    }
}

/// Sends `reply`, or an error reply if it cannot be encoded (a value with a NUL byte, or
/// too long).
fn send_reply(stream: &UnixStream, reply: &Reply) -> io::Result<()> {
    let bytes = match reply.encode().and_then(|p| proto::frame(&p)) {
        Ok(b) => b,
        Err(e) => {
            warn!("ctl: cannot encode a reply: {e}");
            let fallback = Reply::Err {
                errno: libc::EIO,
                message: format!("the reply cannot be sent: {e}"),
            };
            fallback
                .encode()
                .and_then(|p| proto::frame(&p))
                .map_err(io::Error::other)?
        }
    };
    uds::send_with_fds(stream, &bytes, &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::control::CtlError;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::sync::Mutex;

    /// A control interface with one key, `k`, and a record of the descriptors each set got.
    #[derive(Default)]
    struct Fake {
        value: Mutex<String>,
        fds_seen: Mutex<Vec<usize>>,
    }

    impl Control for Fake {
        fn ctl_keys(&self) -> Vec<String> {
            vec!["k".into(), "panics".into()]
        }
        fn ctl_get(&self, key: &str) -> Result<String, CtlError> {
            match key {
                "k" => Ok(self.value.lock().map(|v| v.clone()).unwrap_or_default()),
                "panics" => panic!("boom"),
                _ => Err(CtlError::new(
                    libc::ENODATA,
                    format!("unknown option '{key}'"),
                )),
            }
        }
        fn ctl_set(&self, key: &str, value: &str, dirs: Vec<OwnedFd>) -> Result<String, CtlError> {
            self.fds_seen.lock().unwrap().push(dirs.len());
            if key != "k" {
                return Err(CtlError::new(
                    libc::EROFS,
                    format!("read-only option '{key}'"),
                ));
            }
            *self.value.lock().unwrap() = value.to_string();
            Ok(format!("k is {value}"))
        }
        fn ctl_query(&self, path: &str, _what: &str) -> Result<Vec<Vec<u8>>, CtlError> {
            Ok(vec![path.as_bytes().to_vec(), b"two".to_vec()])
        }
    }

    fn served() -> (UnixStream, std::thread::JoinHandle<()>, Arc<Fake>) {
        let (client, server) = UnixStream::pair().unwrap();
        let fake = Arc::new(Fake::default());
        let f = fake.clone();
        let t = std::thread::spawn(move || serve_connection(&server, &*f));
        (client, t, fake)
    }

    fn ask(c: &UnixStream, req: &Request, fds: &[std::os::fd::BorrowedFd<'_>]) -> Reply {
        let bytes = proto::frame(&req.encode().unwrap()).unwrap();
        uds::send_with_fds(c, &bytes, fds).unwrap();
        read_reply(c)
    }

    fn read_reply(mut c: &UnixStream) -> Reply {
        let mut header = [0u8; 4];
        c.read_exact(&mut header).unwrap();
        let mut payload = vec![0; proto::frame_len(header).unwrap()];
        c.read_exact(&mut payload).unwrap();
        Reply::decode(&payload).unwrap()
    }

    #[test]
    fn requests_are_answered_on_one_connection() {
        let (c, t, fake) = served();
        let (r, w) = rustix::pipe::pipe().unwrap();
        let set = Request::Set {
            key: "k".into(),
            value: "v".into(),
        };
        assert_eq!(ask(&c, &set, &[r.as_fd(), w.as_fd()]), Reply::Ok(vec![]));
        assert_eq!(*fake.fds_seen.lock().unwrap(), [2]);
        let get = Request::Get { key: "k".into() };
        assert_eq!(ask(&c, &get, &[]), Reply::Ok(vec![b"v".to_vec()]));
        let keys = ask(&c, &Request::Keys, &[]);
        assert_eq!(keys, Reply::Ok(vec![b"k".to_vec(), b"panics".to_vec()]));
        assert_eq!(
            ask(&c, &Request::Protocol, &[]),
            Reply::Ok(vec![b"1".to_vec()])
        );
        let nope = Request::Set {
            key: "version".into(),
            value: "1".into(),
        };
        assert_eq!(
            ask(&c, &nope, &[]),
            Reply::Err {
                errno: libc::EROFS,
                message: "read-only option 'version'".into()
            }
        );
        let q = Request::Query {
            path: "/f".into(),
            what: "allpaths".into(),
        };
        assert_eq!(
            ask(&c, &q, &[]),
            Reply::Ok(vec![b"/f".to_vec(), b"two".to_vec()])
        );
        drop(c);
        t.join().unwrap();
    }

    #[test]
    fn garbage_gets_an_error_and_the_connection_goes_on() {
        let (mut c, t, _) = served();
        for bad in [&b"frob"[..], b"get", b"set\0k", b"", b"\xff\xfe"] {
            c.write_all(&proto::frame(bad).unwrap()).unwrap();
            match read_reply(&c) {
                Reply::Err { errno, message } => {
                    assert_eq!(errno, libc::EINVAL);
                    assert!(message.starts_with("malformed request"), "{message}");
                }
                r => panic!("{r:?} for {bad:?}"),
            }
        }
        let panics = Request::Get {
            key: "panics".into(),
        };
        assert!(matches!(
            ask(&c, &panics, &[]),
            Reply::Err {
                errno: libc::EIO,
                ..
            }
        ));
        assert_eq!(
            ask(&c, &Request::Keys, &[]),
            Reply::Ok(vec![b"k".to_vec(), b"panics".to_vec()])
        );
        drop(c);
        t.join().unwrap();
    }

    #[test]
    fn an_oversized_frame_is_refused_and_the_connection_closed() {
        let (mut c, t, _) = served();
        c.write_all(&u32::MAX.to_le_bytes()).unwrap();
        assert!(matches!(
            read_reply(&c),
            Reply::Err {
                errno: libc::EMSGSIZE,
                ..
            }
        ));
        t.join().unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
    }

    #[test]
    fn a_client_hanging_up_mid_frame_ends_only_its_connection() {
        let (mut c, t, _) = served();
        c.write_all(&[10, 0, 0, 0, b'g', b'e']).unwrap();
        drop(c);
        t.join().unwrap();
        let (mut c, t, _) = served();
        c.write_all(&[10, 0]).unwrap();
        drop(c);
        t.join().unwrap();
    }

    #[test]
    fn access_is_for_root_the_daemon_user_and_the_socket_group() {
        let cred = |uid, gid| PeerCred { pid: 1, uid, gid };
        let none = || -> io::Result<Vec<u32>> { Ok(vec![]) };
        let a = Access {
            uid: 1000,
            group: None,
        };
        assert!(a.allows(cred(0, 0), none));
        assert!(a.allows(cred(1000, 5), none));
        assert!(!a.allows(cred(1001, 5), none));
        assert!(!a.allows(cred(1001, 5), || Ok(vec![5, 36])));
        let a = Access {
            uid: 1000,
            group: Some(36),
        };
        assert!(a.allows(cred(1001, 36), none));
        assert!(a.allows(cred(1001, 5), || Ok(vec![5, 36])));
        assert!(!a.allows(cred(1001, 5), || Ok(vec![5])));
        assert!(!a.allows(cred(1001, 5), || Err(io::ErrorKind::Other.into())));
    }
}
