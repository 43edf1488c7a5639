//! Where log lines go: stderr in env_logger's format (as virtiofsd prints them; kata waits
//! for one of them), or with `--syslog` the local syslog socket, as virtiofsd does. The
//! filter is the same either way (`--log-level`, `-d`, `RUST_LOG`). Nothing here decides what
//! is logged.

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

use log::{Level, LevelFilter, Log, Metadata, Record};

/// The local syslog socket.
pub const SYSLOG_SOCKET: &str = "/dev/log";

/// The process name syslog lines carry.
const IDENT: &str = "union-virtiofsd";

/// syslog's `LOG_USER` facility (virtiofsd's).
const FACILITY_USER: u8 = 1;

/// Panics are logged as one error line (to syslog too), with no backtrace: capturing one reads
/// the binary and makes calls the seccomp filter does not allow, which would kill a daemon
/// whose panicking request was only to answer EIO (`RUST_BACKTRACE` is not honoured).
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        log::error!("panic in thread {}: {info}", thread.name().unwrap_or("?"));
    }));
}

/// Installs the process logger: syslog when `syslog` is set and [`SYSLOG_SOCKET`] answers,
/// stderr otherwise (with a warning when syslog was asked for, as virtiofsd falls back).
/// `level` is the default that `RUST_LOG`, when set, overrides (Podman passes `RUST_LOG=ERROR`).
/// Panics go to the same log, one line each and without a backtrace (capturing one inside
/// the seccomp sandbox would kill the daemon).
pub fn init(level: LevelFilter, syslog: bool) {
    log_panics();
    let filter = stderr_builder(level).build();
    if syslog {
        match Syslog::connect(Path::new(SYSLOG_SOCKET), filter) {
            Ok(logger) => {
                log::set_max_level(logger.filter.filter());
                if log::set_boxed_logger(Box::new(logger)).is_ok() {
                    return;
                }
            }
            Err(e) => {
                let _ = stderr_builder(level).try_init();
                log::warn!("--syslog: cannot reach {SYSLOG_SOCKET} ({e}); logging to stderr");
                return;
            }
        }
    }
    let _ = stderr_builder(level).try_init();
}

fn stderr_builder(level: LevelFilter) -> env_logger::Builder {
    let mut b = env_logger::Builder::new();
    b.filter_level(level)
        .parse_env("RUST_LOG")
        .format_timestamp_millis()
        .target(env_logger::Target::Stderr);
    b
}

/// A logger writing RFC 3164 datagrams (`<PRI>ident[pid]: message`) to a connected syslog
/// socket. The socket is connected before any sandbox is entered, so it keeps working after
/// `/dev/log` is out of sight. Errors are also written to stderr, where launchers (libvirt's
/// log file, kata) look when the daemon fails to start.
pub struct Syslog {
    socket: UnixDatagram,
    filter: env_logger::Logger,
    pid: u32,
}

impl Syslog {
    /// Connects to the syslog socket at `path`; `filter` decides which records pass.
    pub fn connect(path: &Path, filter: env_logger::Logger) -> std::io::Result<Self> {
        let socket = UnixDatagram::unbound()?;
        socket.connect(path)?;
        Ok(Syslog {
            socket,
            filter,
            pid: std::process::id(),
        })
    }
}

/// syslog severity of a log level.
fn severity(level: Level) -> u8 {
    match level {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug | Level::Trace => 7,
    }
}

impl Log for Syslog {
    fn enabled(&self, metadata: &Metadata) -> bool {
        self.filter.enabled(metadata)
    }

    fn log(&self, record: &Record) {
        if !self.filter.matches(record) {
            return;
        }
        let pri = FACILITY_USER * 8 + severity(record.level());
        let line = format!("<{pri}>{IDENT}[{}]: {}", self.pid, record.args());
        if self.socket.send(line.as_bytes()).is_err() || record.level() == Level::Error {
            let _ = writeln!(std::io::stderr(), "[{IDENT}] {}", record.args());
        }
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_reach_the_socket_as_rfc3164_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let server = UnixDatagram::bind(&path).unwrap();
        let filter = env_logger::Builder::new()
            .filter_level(LevelFilter::Info)
            .build();
        let logger = Syslog::connect(&path, filter).unwrap();
        let record = |level, text: &str| {
            logger.log(
                &Record::builder()
                    .level(level)
                    .args(format_args!("{text}"))
                    .build(),
            );
        };
        record(Level::Debug, "filtered out");
        record(Level::Info, "Waiting for vhost-user socket connection...");
        record(Level::Warn, "careful");
        let mut buf = [0u8; 256];
        let mut next = || {
            let n = server.recv(&mut buf).unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        };
        let pid = std::process::id();
        assert_eq!(
            next(),
            format!("<14>union-virtiofsd[{pid}]: Waiting for vhost-user socket connection...")
        );
        assert_eq!(next(), format!("<12>union-virtiofsd[{pid}]: careful"));
    }

    #[test]
    fn no_socket_is_an_error() {
        let filter = env_logger::Builder::new().build();
        assert!(Syslog::connect(Path::new("/nonexistent/log"), filter).is_err());
    }
}
