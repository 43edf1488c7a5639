//! Which build of the daemon a test runs: this tree's, or the previous release's (the commit
//! `.ci/previous-release` names, built from the repository's history by
//! scripts/build-previous.sh), for the tests that move a session between the two. Resolves
//! paths only; starts no daemon.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::guest;

/// A build of union-virtiofsd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// This tree's ([`guest::daemon_path`]).
    This,
    /// The previous release ([`previous_daemon_path`]).
    Previous,
}

impl Build {
    /// Its binary.
    pub fn path(self) -> PathBuf {
        match self {
            Build::This => guest::daemon_path(),
            Build::Previous => previous_daemon_path(),
        }
    }
}

/// The previous release's daemon: `$UVFS_PREVIOUS_DAEMON` when set, else what
/// scripts/build-previous.sh prints (it builds the binary into the cache the first time, a few
/// minutes), once per process; panics with the reason if neither gives one.
pub fn previous_daemon_path() -> PathBuf {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = PATH.get_or_init(|| match std::env::var_os("UVFS_PREVIOUS_DAEMON") {
        Some(p) => Ok(PathBuf::from(p)),
        None => guest::run_path_script("build-previous.sh"),
    });
    let path = found.clone().unwrap_or_else(|e| {
        panic!("the previous release's daemon: {e} (or set UVFS_PREVIOUS_DAEMON)")
    });
    assert!(
        path.is_file(),
        "the previous release's daemon not found at {} (UVFS_PREVIOUS_DAEMON)",
        path.display()
    );
    path
}
