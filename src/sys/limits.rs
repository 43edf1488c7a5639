//! Process resource limits. Each node the guest holds keeps an `O_PATH` descriptor (as in
//! virtiofsd), so the soft open-file limit is raised to the hard one at start.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// `--rlimit-nofile`: `Some(0)` leaves the limit alone, `Some(n)` sets soft and hard limit to
/// `n`, `None` raises the soft limit to the hard one. Returns the limit now in force.
pub fn set_nofile(n: Option<u64>) -> std::io::Result<u64> {
    match n {
        None => raise_nofile(),
        Some(0) => Ok(nofile()),
        Some(n) => {
            setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(n),
                    maximum: Some(n),
                },
            )?;
            Ok(nofile())
        }
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the limit now in force.
pub fn raise_nofile() -> std::io::Result<u64> {
    let cur = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: cur.maximum,
        maximum: cur.maximum,
    };
    setrlimit(Resource::Nofile, raised)?;
    Ok(getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX))
}

/// The soft `RLIMIT_NOFILE` now in force.
pub fn nofile() -> u64 {
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}
