//! Process resource limits. Each node the guest holds keeps an `O_PATH` descriptor (as in
//! virtiofsd), so the open-file limit is raised at start the way virtiofsd raises it.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// virtiofsd's default target for `RLIMIT_NOFILE`.
pub const DEFAULT_NOFILE: u64 = 1_000_000;

/// Why the open-file limit could not be set.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    /// `--rlimit-nofile` above the kernel's `fs.nr_open`.
    #[error("--rlimit-nofile {asked}: the kernel allows at most {nr_open} (fs.nr_open)")]
    AboveNrOpen {
        /// What was asked for.
        asked: u64,
        /// `/proc/sys/fs/nr_open`.
        nr_open: u64,
    },
    /// setrlimit refused the value asked for.
    #[error("cannot set the open file limit to {asked}: {source}")]
    Set {
        /// What was asked for.
        asked: u64,
        /// The error.
        source: std::io::Error,
    },
}

/// `--rlimit-nofile`, with virtiofsd's meaning: `Some(0)` leaves the limit alone, `Some(n)`
/// sets soft and hard limit to `n` (above `fs.nr_open` is an error), `None` sets both to
/// min(1,000,000, `fs.nr_open`) unless the soft limit is already that high. Where raising the
/// hard limit is not allowed (no CAP_SYS_RESOURCE, as in many containers) the soft limit is
/// raised to the hard one with a warning; virtiofsd exits there for an explicit N, which
/// would stop launchers that always pass one (libvirt, microvm.nix) in such containers.
/// Returns the soft limit now in force, and why it is not what was asked for (logged by the
/// caller, once, with what the limit means for the daemon).
pub fn set_nofile(n: Option<u64>) -> Result<Nofile, LimitError> {
    let nr_open = nr_open();
    let cur = nofile();
    let target = match n {
        Some(0) => return Ok(Nofile::now(None)),
        Some(n) if nr_open.is_some_and(|max| n > max) => {
            return Err(LimitError::AboveNrOpen {
                asked: n,
                nr_open: nr_open.unwrap_or(0),
            })
        }
        Some(n) => n,
        None if cur >= DEFAULT_NOFILE => return Ok(Nofile::now(None)),
        None => nr_open.map_or(DEFAULT_NOFILE, |max| max.min(DEFAULT_NOFILE)),
    };
    match set_both(target) {
        Ok(()) => Ok(Nofile::now(None)),
        Err(e) => {
            // Not privileged enough: as far as the hard limit allows.
            let hard = getrlimit(Resource::Nofile).maximum.unwrap_or(u64::MAX);
            set_both(hard).map_err(|source| LimitError::Set {
                asked: hard,
                source,
            })?;
            Ok(Nofile::now(Some(NotRaised { target, error: e })))
        }
    }
}

/// The open-file limit after [`set_nofile`].
#[derive(Debug)]
pub struct Nofile {
    /// The soft limit now in force.
    pub limit: u64,
    /// Set when the limit could not be raised as far as asked (no CAP_SYS_RESOURCE, as in
    /// most containers): it stays at the hard limit.
    pub not_raised: Option<NotRaised>,
}

/// Why the open-file limit stayed below what was asked for.
#[derive(Debug)]
pub struct NotRaised {
    /// What was asked for.
    pub target: u64,
    /// setrlimit's refusal.
    pub error: std::io::Error,
}

impl Nofile {
    fn now(not_raised: Option<NotRaised>) -> Self {
        Nofile {
            limit: nofile(),
            not_raised,
        }
    }
}

impl std::fmt::Display for Nofile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "open file limit: {}", self.limit)?;
        if let Some(n) = &self.not_raised {
            write!(
                f,
                " (the hard limit: cannot raise it to {}: {})",
                n.target, n.error
            )?;
        }
        Ok(())
    }
}

fn set_both(n: u64) -> std::io::Result<()> {
    let limit = Rlimit {
        current: Some(n),
        maximum: Some(n),
    };
    setrlimit(Resource::Nofile, limit).map_err(std::io::Error::from)
}

/// The kernel's ceiling for `RLIMIT_NOFILE` (`/proc/sys/fs/nr_open`), if readable.
fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The soft `RLIMIT_NOFILE` now in force.
pub fn nofile() -> u64 {
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}
