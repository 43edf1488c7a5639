//! What FUSE_INIT settles with the guest: the options the reply enables, chosen from the
//! daemon's options and the guest's offer (a pure function), and the two choices that then
//! change how requests are served (the writeback cache, announced submounts), which a moved
//! session carries to the next daemon.

use std::sync::atomic::{AtomicBool, Ordering};

use fuse_backend_rs::abi::fuse_abi::FsOptions;

use crate::fs::options::UnionOptions;

/// The choices of the last INIT (or of the session moved here).
#[derive(Debug, Default)]
pub struct Negotiated {
    writeback: AtomicBool,
    submounts: AtomicBool,
}

impl Negotiated {
    /// FUSE_WRITEBACK_CACHE is on: the guest's page cache holds writes.
    pub fn writeback(&self) -> bool {
        self.writeback.load(Ordering::Relaxed)
    }

    /// Mount points are announced (FUSE_ATTR_SUBMOUNT).
    pub fn submounts(&self) -> bool {
        self.submounts.load(Ordering::Relaxed)
    }

    /// Records the choices (INIT, or an imported session).
    pub fn set(&self, writeback: bool, submounts: bool) {
        self.writeback.store(writeback, Ordering::Relaxed);
        self.submounts.store(submounts, Ordering::Relaxed);
    }

    /// INIT: the options to enable for a guest that offers `capable`; records the choices.
    pub fn init(&self, opts: &UnionOptions, capable: FsOptions) -> FsOptions {
        let (enabled, writeback, submounts) = reply_options(opts, capable);
        self.set(writeback, submounts);
        enabled
    }
}

/// The INIT reply's options for `opts` and a guest offering `capable` (the caller keeps only
/// what the guest offered), and whether the writeback cache and submounts are on.
pub fn reply_options(opts: &UnionOptions, capable: FsOptions) -> (FsOptions, bool, bool) {
    let on = |yes: bool, f: FsOptions| if yes { f } else { FsOptions::empty() };
    let writeback = opts.writeback && capable.contains(FsOptions::WRITEBACK_CACHE);
    // FUSE_SUBMOUNTS is the guest's to offer, not ours to enable: nothing in the reply.
    let submounts = opts.announce_submounts && capable.contains(FsOptions::SUBMOUNTS);
    let enabled = on(opts.killpriv_v2, FsOptions::HANDLE_KILLPRIV_V2)
        | on(writeback, FsOptions::WRITEBACK_CACHE)
        | on(
            opts.host_locks,
            FsOptions::POSIX_LOCKS | FsOptions::FLOCK_LOCKS,
        )
        | on(
            opts.readdirplus,
            FsOptions::DO_READDIRPLUS | FsOptions::READDIRPLUS_AUTO,
        )
        | FsOptions::ASYNC_READ
        // The guest sends the pieces of one large O_DIRECT request together instead of one
        // after another (a 4 MiB read is four 1 MiB READs in flight), as virtiofsd.
        | FsOptions::ASYNC_DIO
        | FsOptions::PARALLEL_DIROPS
        | FsOptions::BIG_WRITES
        | FsOptions::AUTO_INVAL_DATA
        | FsOptions::ATOMIC_O_TRUNC
        | FsOptions::MAX_PAGES;
    (enabled, writeback, submounts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writeback_and_submounts_need_the_option_and_the_guest() {
        let mut o = UnionOptions::default();
        let all = FsOptions::WRITEBACK_CACHE | FsOptions::SUBMOUNTS;
        let (e, wb, sm) = reply_options(&o, all);
        assert!(!wb && sm && !e.contains(FsOptions::WRITEBACK_CACHE));
        assert!(!e.contains(FsOptions::SUBMOUNTS));
        o.writeback = true;
        let (e, wb, _) = reply_options(&o, all);
        assert!(wb && e.contains(FsOptions::WRITEBACK_CACHE));
        let (e, wb, sm) = reply_options(&o, FsOptions::empty());
        assert!(!wb && !sm && !e.contains(FsOptions::WRITEBACK_CACHE));
        o.announce_submounts = false;
        assert!(!reply_options(&o, all).2);
        let n = Negotiated::default();
        n.init(&o, all);
        assert!(n.writeback() && !n.submounts());
    }
}
