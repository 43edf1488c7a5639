//! Detaching the host mount (SIGTERM, a start that failed after the mount) by the means that
//! made it: umount2 for a mount(2) of the daemon's own, `fusermount3 -u -z` for one
//! fusermount3 made. fusermount3 is set-user-ID root, which `no_new_privs` disarms, and the
//! seccomp filter allows no execve: the confined daemon cannot run it. So right after such a
//! mount, before confinement, the daemon starts a helper: a fresh image of this binary that
//! waits on a pipe, runs `fusermount3 -u -z` when asked and answers how it went. It is in a
//! process group of its own and ignores SIGTERM, SIGINT and SIGHUP, so that a Ctrl-C or a
//! service manager's SIGTERM to every process reaches only the daemon, which then asks it;
//! it ends when the daemon's end of the pipe closes. Unmounts nothing by itself.

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use super::fusermount::PROGRAM;
use crate::sync::LockRecover;

/// The environment variable that makes a process of this binary the helper, and names the
/// mount point it is to unmount.
const HELPER_ENV: &str = "UNION_VIRTIOFSD_UNMOUNT_HELPER";

/// How the mount is detached.
pub enum Unmounter {
    /// umount2 (the daemon mounted it itself).
    Direct(PathBuf),
    /// Through the helper that runs `fusermount3 -u -z`.
    Helper(Helper),
}

/// The helper process and the pipes to it.
pub struct Helper {
    pipes: Mutex<Option<(ChildStdin, BufReader<ChildStdout>)>>,
    _child: Child,
}

impl Unmounter {
    /// Starts the helper for a mount fusermount3 made on `at` (before confinement).
    pub fn helper(at: &Path) -> io::Result<Unmounter> {
        let mut cmd = Command::new("/proc/self/exe");
        // Ignored from the start (a handler of its own comes only once it runs).
        let mut child =
            crate::sys::spawn::ignoring(&mut cmd, &[libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
                .arg0("union-virtiofsd (unmount helper)")
                .env(HELPER_ENV, at)
                .process_group(0)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(io::Error::other("the helper's pipes are missing"));
        };
        Ok(Unmounter::Helper(Helper {
            pipes: Mutex::new(Some((stdin, BufReader::new(stdout)))),
            _child: child,
        }))
    }

    /// Detaches the mount now (files open on it keep working until closed); once only.
    pub fn detach(&self) -> io::Result<()> {
        match self {
            Unmounter::Direct(at) => crate::sys::fusedev::unmount(at, true),
            Unmounter::Helper(h) => {
                let taken = h.pipes.locked().take();
                let Some((mut stdin, mut stdout)) = taken else {
                    return Err(io::Error::other("already asked"));
                };
                stdin.write_all(b"u")?;
                let mut answer = String::new();
                stdout.read_line(&mut answer)?;
                match answer.trim_end() {
                    "ok" => Ok(()),
                    "" => Err(io::Error::other("the unmount helper is gone")),
                    why => Err(io::Error::other(why.to_owned())),
                }
            }
        }
    }
}

/// In a process started as the unmount helper: the mount point it is to unmount; `None`
/// in any other process.
pub fn helper_request() -> Option<PathBuf> {
    std::env::var_os(HELPER_ENV).map(PathBuf::from)
}

/// The helper: waits for the daemon's request on stdin, runs `fusermount3 -u -z` on `at`
/// and answers `ok` or fusermount3's message on stdout; ends without unmounting at end of
/// file (the daemon ended). Returns the exit status.
pub fn helper(at: &Path) -> u8 {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let ignored = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [SIGTERM, SIGINT, SIGHUP] {
        // Caught and dropped: the daemon decides when to unmount.
        let _ = signal_hook::flag::register(sig, ignored.clone());
    }
    let mut byte = [0u8; 1];
    loop {
        match io::stdin().read(&mut byte) {
            Ok(0) => return 0,
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return 1,
        }
    }
    let answer = match Command::new(PROGRAM)
        .args([OsString::from("-u"), "-z".into(), "--".into(), at.into()])
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => "ok".to_owned(),
        Ok(out) => {
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.trim().replace('\n', "; ");
            match said.is_empty() {
                true => format!("{PROGRAM} -u {}", out.status),
                false => said,
            }
        }
        Err(e) => format!("cannot run {PROGRAM}: {e}"),
    };
    let ok = answer == "ok";
    let _ = writeln!(io::stdout(), "{answer}");
    match ok {
        true => 0,
        false => 1,
    }
}
