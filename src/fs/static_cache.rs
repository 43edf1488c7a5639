//! How long the guest may cache a node, given where it lives: a node whose copies are all on
//! `static` branches (the host promises never to change them) gets a day's entry and attr
//! windows and keeps its page cache (FOPEN_KEEP_CACHE; directories also their listing,
//! FOPEN_CACHE_DIR); everything else keeps the configured windows. The decision is pure
//! ([`standing`] and the [`Standing`] methods); [`Call::standing`] only probes the branches
//! that may change. Nothing here tells the guest to drop what it cached: that is the host
//! user's side of the promise (docs/src/union.md, "Static branches").

use crate::fs::BranchId;
use std::ffi::CStr;
use std::io;
use std::time::Duration;

use fuse_backend_rs::abi::fuse_abi::OpenOptions;

use crate::fs::call::Call;
use crate::fs::found::present;

/// The entry and attr window of a static node: a day, as `--cache always` gives everything.
pub(crate) const STATIC_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// Whether what the guest caches of a node may outlive the configured windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Its copy is on a static branch and no other branch has the name: only the guest
    /// (through this daemon) changes it.
    Static,
    /// The host may change it: the configured windows.
    Host,
}

/// The standing of a name whose chosen copy is on a static branch (`on_static`) or not, given
/// for each branch that is not static whether it has the name too (an error: it cannot be
/// told, so it may). A directory merged with such a branch, or a file another branch also
/// holds (shadowing it or shadowed by it), is not static.
pub(crate) fn standing(
    on_static: bool,
    elsewhere: impl IntoIterator<Item = io::Result<bool>>,
) -> Standing {
    if on_static && elsewhere.into_iter().all(|has| matches!(has, Ok(false))) {
        Standing::Static
    } else {
        Standing::Host
    }
}

/// The window of a negative entry: a day when every branch is static (then only the guest
/// adds names, and its own creates replace the negative entry), else the configured one,
/// since the host may add the name on any branch that is not static.
pub(crate) fn negative_window(all_static: bool, configured: Duration) -> Duration {
    if all_static {
        configured.max(STATIC_WINDOW)
    } else {
        configured
    }
}

impl Standing {
    /// The entry or attr window: the configured one, lengthened to a day for a static node
    /// (never shortened: a longer configured window already promised more).
    pub(crate) fn window(self, configured: Duration) -> Duration {
        match self {
            Standing::Static => configured.max(STATIC_WINDOW),
            Standing::Host => configured,
        }
    }

    /// The FOPEN flags of a file open: a static file keeps its page cache across opens,
    /// unless the configuration asked for no page cache at all (direct I/O wins).
    pub(crate) fn file_open(self, configured: OpenOptions) -> OpenOptions {
        match self {
            Standing::Static if !configured.contains(OpenOptions::DIRECT_IO) => {
                configured | OpenOptions::KEEP_CACHE
            }
            _ => configured,
        }
    }

    /// The FOPEN flags of a directory open: a static directory's listing is cached and kept
    /// across opens (the guest drops it itself when it changes the directory).
    pub(crate) fn dir_open(self, configured: OpenOptions) -> OpenOptions {
        match self {
            Standing::Static => configured | OpenOptions::CACHE_DIR | OpenOptions::KEEP_CACHE,
            Standing::Host => configured,
        }
    }
}

impl Call<'_> {
    /// The standing of union path `rel`, found on branch `branch`: static only if that
    /// branch is, and every branch that is not lacks `rel` (one `O_PATH` probe each, stopping
    /// at the first that has it; none at all when `branch` is not static).
    pub(crate) fn standing(&self, branch: BranchId, rel: &CStr) -> Standing {
        let b = &self.view().branches;
        if !b.is_static(branch) {
            return Standing::Host;
        }
        standing(
            true,
            b.changing()
                .map(|id| present(self.open_on(id, rel)).map(|o| o.is_some())),
        )
    }

    /// [`Call::standing`] of node `inode` found on `branch`; its path is built only when
    /// `branch` is static.
    pub(crate) fn node_standing(&self, branch: BranchId, inode: u64) -> Standing {
        if !self.view().branches.is_static(branch) {
            return Standing::Host;
        }
        self.standing(branch, &self.node_rel(inode))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eio() -> io::Result<bool> {
        Err(io::Error::from_raw_os_error(libc::EIO))
    }

    #[test]
    fn static_only_when_no_changing_branch_has_the_name() {
        assert_eq!(standing(true, []), Standing::Static);
        assert_eq!(standing(true, [Ok(false), Ok(false)]), Standing::Static);
        // Merged with (or shadowed by, or shadowing) a branch the host may change.
        assert_eq!(standing(true, [Ok(false), Ok(true)]), Standing::Host);
        // Cannot tell: as if it were there.
        assert_eq!(standing(true, [eio()]), Standing::Host);
        // Not on a static branch at all.
        assert_eq!(standing(false, []), Standing::Host);
        assert_eq!(standing(false, [Ok(false)]), Standing::Host);
    }

    #[test]
    fn static_windows_lengthen_never_shorten() {
        let one = Duration::from_secs(1);
        assert_eq!(Standing::Host.window(one), one);
        assert_eq!(Standing::Static.window(one), STATIC_WINDOW);
        assert_eq!(Standing::Static.window(Duration::ZERO), STATIC_WINDOW);
        let week = STATIC_WINDOW * 7;
        assert_eq!(Standing::Static.window(week), week);
        assert_eq!(negative_window(false, Duration::ZERO), Duration::ZERO);
        assert_eq!(negative_window(false, one), one);
        assert_eq!(negative_window(true, Duration::ZERO), STATIC_WINDOW);
    }

    #[test]
    fn static_opens_keep_the_cache_unless_direct_io() {
        let none = OpenOptions::empty();
        assert_eq!(Standing::Host.file_open(none), none);
        assert_eq!(Standing::Static.file_open(none), OpenOptions::KEEP_CACHE);
        assert_eq!(
            Standing::Static.file_open(OpenOptions::DIRECT_IO),
            OpenOptions::DIRECT_IO
        );
        assert_eq!(Standing::Host.dir_open(none), none);
        assert_eq!(
            Standing::Static.dir_open(none),
            OpenOptions::CACHE_DIR | OpenOptions::KEEP_CACHE
        );
    }
}
