//! The fstab form's trip to the background, as mergerfs and libfuse's `fuse_daemonize` do it:
//! mount(8) waits for its helper to exit, so the process it starts must exit once the union
//! is mounted and served, with a failure's status before that. That process starts a fresh
//! image of this binary with the same arguments (no fork of a process that may hold threads)
//! and waits for a byte on the child's stdout: the child writes it once its readers serve the
//! mount, then lets go of the terminal or pipe it was given (stdin, stdout and stderr become
//! /dev/null). End of file without the byte means the child failed before: its status (and
//! its error line, on the stderr they share) is the starter's. Serves nothing itself.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use log::LevelFilter;

/// The environment variable that makes a process of this binary the background daemon.
const CHILD_ENV: &str = "UNION_VIRTIOFSD_BACKGROUND";

/// Whether this process is the background daemon a [`start`] started.
pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// In the starting process: starts the background daemon and waits until it serves the mount
/// (0) or has exited (its status). Errors are the starter's own (it could not start one).
pub fn start() -> io::Result<u8> {
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| "union-virtiofsd".into());
    let mut child = Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(args)
        .env(CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| io::Error::other("no pipe"))?;
    let mut byte = [0u8; 1];
    loop {
        match stdout.read(&mut byte) {
            Ok(1) => return Ok(0),
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let status = child.wait()?;
    Ok(status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(1))
}

/// How much a daemon logs and whether to syslog, given the level and `--syslog` asked for:
/// in the `background`, to syslog where there is one, as mergerfs; where there is none,
/// only warnings and errors, which mount(8)'s terminal shows until the daemon lets go of it
/// (as for a mount of any filesystem).
pub fn log_to(background: bool, level: LevelFilter, syslog: bool) -> (LevelFilter, bool) {
    if !background || syslog {
        return (level, syslog);
    }
    match Path::new(crate::logging::SYSLOG_SOCKET).exists() {
        true => (level, true),
        false => (level.min(LevelFilter::Warn), false),
    }
}

/// The background daemon's way to say it serves the mount.
pub struct Ready {
    null: OwnedFd,
}

impl Ready {
    /// In the background daemon, at its start: leaves the starter's session (no terminal's
    /// SIGHUP or SIGINT reaches it) and opens /dev/null for [`Ready::serving`].
    pub fn new() -> io::Result<Ready> {
        rustix::process::setsid()?;
        let null = File::options().read(true).write(true).open("/dev/null")?;
        Ok(Ready { null: null.into() })
    }

    /// Before confinement: the working directory becomes `/`, so that the daemon holds no
    /// filesystem busy (relative paths were resolved by then).
    pub fn leave_cwd(&self) -> io::Result<()> {
        std::env::set_current_dir("/")
    }

    /// Tells the starter the mount is served, then lets go of its stdin, stdout and stderr.
    pub fn serving(self) -> io::Result<()> {
        io::stdout().write_all(b"\n")?;
        io::stdout().flush()?;
        crate::sys::fusedev::detach_stdio(&self.null)
    }
}
