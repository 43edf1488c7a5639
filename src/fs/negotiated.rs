//! What FUSE_INIT settles with the guest: the options the reply enables, chosen from the
//! daemon's options and the guest's offer (pure functions), and the choices that then
//! change how requests are served (the writeback cache, announced submounts, POSIX ACLs,
//! security labels), which a moved session carries to the next daemon.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use fuse_backend_rs::abi::fuse_abi::FsOptions;

use crate::fs::options::{Negotiate, UnionOptions};
use crate::sys::abi::fuse::{ALLOW_IDMAP, DONT_MASK, POSIX_ACL, SECURITY_CTX, SETXATTR_EXT};

/// The choices of the last INIT (or of the session moved here).
#[derive(Debug, Default)]
pub struct Negotiated {
    writeback: AtomicBool,
    submounts: AtomicBool,
    posix_acl: AtomicBool,
    security_ctx: AtomicBool,
    idmap: AtomicBool,
    /// The kernel may be told it need not send OPENDIR (FUSE_NO_OPENDIR_SUPPORT offered).
    opendir_optional: AtomicBool,
    /// The kernel was told so: it sends neither OPENDIR nor RELEASEDIR any more, and reads
    /// directories without a handle, keeping their listings (this INIT's session).
    opendir_elided: AtomicBool,
    /// The kernel leaves permission checks to the daemon (a host mount without
    /// `default_permissions`): every open must come here. A guest's kernel checks them itself.
    daemon_checks: AtomicBool,
}

/// The choices [`extra_options`] makes beyond fuse-backend-rs's names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extra {
    /// The raw INIT bits to enable.
    pub bits: u64,
    /// POSIX ACLs.
    pub posix_acl: bool,
    /// Security contexts with creates.
    pub security_ctx: bool,
    /// Idmapped mounts allowed.
    pub idmap: bool,
}

impl Extra {
    /// The choices, with the raw bits they enable.
    pub fn new(posix_acl: bool, security_ctx: bool, idmap: bool) -> Self {
        let on = |yes: bool, bits: u64| if yes { bits } else { 0 };
        Extra {
            bits: on(posix_acl, ACL_FLAGS)
                | on(security_ctx, SECURITY_CTX)
                | on(idmap, ALLOW_IDMAP),
            posix_acl,
            security_ctx,
            idmap,
        }
    }
}

/// The flags POSIX ACLs need together: the guest enforces them, leaves the umask to the
/// daemon, and says when setting one must clear set-group-ID.
const ACL_FLAGS: u64 = POSIX_ACL | DONT_MASK | SETXATTR_EXT;

/// The INIT options fuse-backend-rs cannot name, for a guest offering `offered` (`flags |
/// flags2 << 32`); the option whose `always` the guest cannot meet, if any (INIT then fails,
/// as with virtiofsd).
pub fn extra_options(opts: &UnionOptions, offered: u64) -> Result<Extra, &'static str> {
    let pick = |mode: Negotiate, bits: u64, what: &'static str| match mode {
        Negotiate::Never => Ok(false),
        _ if offered & bits == bits => Ok(true),
        Negotiate::Auto => Ok(false),
        Negotiate::Always => Err(what),
    };
    let posix_acl = pick(opts.posix_acl, ACL_FLAGS, "--posix-acl")?;
    let security_ctx = pick(opts.security_label, SECURITY_CTX, "--security-label")?;
    let idmap = opts.allow_idmap && offered & ALLOW_IDMAP != 0;
    Ok(Extra::new(posix_acl, security_ctx, idmap))
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

    /// POSIX ACLs are on (FUSE_POSIX_ACL, DONT_MASK, SETXATTR_EXT).
    pub fn posix_acl(&self) -> bool {
        self.posix_acl.load(Ordering::Relaxed)
    }

    /// New objects come with a security context (FUSE_SECURITY_CTX).
    pub fn security_ctx(&self) -> bool {
        self.security_ctx.load(Ordering::Relaxed)
    }

    /// Records the choices (INIT, or an imported session).
    pub fn set(&self, writeback: bool, submounts: bool) {
        self.writeback.store(writeback, Ordering::Relaxed);
        self.submounts.store(submounts, Ordering::Relaxed);
    }

    /// Idmapped mounts are allowed (FUSE_ALLOW_IDMAP): requests that create nothing carry
    /// no caller.
    pub fn idmap(&self) -> bool {
        self.idmap.load(Ordering::Relaxed)
    }

    /// The choices of [`extra_options`] in force.
    pub fn extra(&self) -> Extra {
        Extra::new(self.posix_acl(), self.security_ctx(), self.idmap())
    }

    /// Records the choices of [`extra_options`] (INIT, or an imported session).
    pub fn set_extra(&self, e: Extra) {
        self.posix_acl.store(e.posix_acl, Ordering::Relaxed);
        self.security_ctx.store(e.security_ctx, Ordering::Relaxed);
        self.idmap.store(e.idmap, Ordering::Relaxed);
    }

    /// INIT, after [`Negotiated::init`]: the raw flags to enable for a guest offering
    /// `offered`; EPROTO (logged) for a guest that cannot meet an `always`.
    pub fn init_extra(&self, opts: &UnionOptions, offered: u64) -> io::Result<u64> {
        match extra_options(opts, offered) {
            Ok(e) => {
                self.set_extra(e);
                Ok(e.bits)
            }
            Err(what) => {
                self.set_extra(Extra::default());
                log::error!(
                    "{what}=always, but the guest's kernel does not offer it: INIT refused"
                );
                Err(io::Error::from_raw_os_error(libc::EPROTO))
            }
        }
    }

    /// INIT: the options to enable for a guest that offers `capable`; records the choices.
    pub fn init(&self, opts: &UnionOptions, capable: FsOptions) -> FsOptions {
        let (enabled, writeback, submounts) = reply_options(opts, capable);
        self.set(writeback, submounts);
        // A new connection: its kernel sends OPENDIR until told otherwise.
        let optional = capable.contains(FsOptions::ZERO_MESSAGE_OPENDIR);
        self.opendir_optional.store(optional, Ordering::Relaxed);
        self.opendir_elided.store(false, Ordering::Relaxed);
        enabled
    }

    /// Says whether the kernel leaves permission checks to the daemon (a host mount without
    /// `default_permissions`; never a guest, whose kernel checks them).
    pub fn set_daemon_checks(&self, yes: bool) {
        self.daemon_checks.store(yes, Ordering::Relaxed);
    }

    /// Whether a directory may be read without a handle (the kernel checked the reader's
    /// permission to open it: nothing is skipped by serving it).
    pub fn handleless_readdir(&self) -> bool {
        !self.daemon_checks.load(Ordering::Relaxed)
    }

    /// OPENDIR of a directory whose listing the kernel may keep across opens anyway
    /// (`cache_dirs`: FOPEN_CACHE_DIR and FOPEN_KEEP_CACHE for every directory): whether to
    /// answer ENOSYS, after which the kernel opens directories without asking, with exactly
    /// those two flags (fs/fuse/file.c, "Default for no-open"), and never sends RELEASEDIR.
    /// Only where the kernel offered it and checks permissions itself. The first time, says
    /// so in the log.
    pub fn elide_opendir(&self, cache_dirs: bool) -> bool {
        let elide = cache_dirs
            && self.opendir_optional.load(Ordering::Relaxed)
            && self.handleless_readdir();
        if elide && !self.opendir_elided.swap(true, Ordering::Relaxed) {
            log::info!(
                "directories kept in the guest's cache: its kernel opens them without OPENDIR and RELEASEDIR from now on (FUSE_NO_OPENDIR_SUPPORT)"
            );
        }
        elide
    }

    /// Whether the kernel was told it need not send OPENDIR (since this INIT).
    pub fn opendir_elided(&self) -> bool {
        self.opendir_elided.load(Ordering::Relaxed)
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
        | on(opts.auto_inval_data, FsOptions::AUTO_INVAL_DATA)
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

    #[test]
    fn auto_inval_data_follows_the_option() {
        let mut o = UnionOptions::default();
        assert!(reply_options(&o, FsOptions::empty())
            .0
            .contains(FsOptions::AUTO_INVAL_DATA));
        o.auto_inval_data = false;
        assert!(!reply_options(&o, FsOptions::empty())
            .0
            .contains(FsOptions::AUTO_INVAL_DATA));
    }

    #[test]
    fn acls_need_all_three_flags_and_always_needs_the_guest() {
        let mut o = UnionOptions::default();
        let all = ACL_FLAGS | SECURITY_CTX | ALLOW_IDMAP;
        let bits = |r: Result<Extra, &'static str>| r.map(|e| e.bits);
        assert_eq!(extra_options(&o, all), Ok(Extra::default()));
        o.posix_acl = Negotiate::Auto;
        assert_eq!(bits(extra_options(&o, all)), Ok(ACL_FLAGS));
        assert!(extra_options(&o, all).unwrap().posix_acl);
        assert_eq!(bits(extra_options(&o, POSIX_ACL | DONT_MASK)), Ok(0));
        o.posix_acl = Negotiate::Always;
        assert_eq!(
            bits(extra_options(&o, POSIX_ACL | DONT_MASK)),
            Err("--posix-acl")
        );
        o.security_label = Negotiate::Auto;
        assert_eq!(bits(extra_options(&o, all)), Ok(ACL_FLAGS | SECURITY_CTX));
        o.posix_acl = Negotiate::Never;
        o.security_label = Negotiate::Always;
        assert_eq!(bits(extra_options(&o, ACL_FLAGS)), Err("--security-label"));
        assert_eq!(bits(extra_options(&o, SECURITY_CTX)), Ok(SECURITY_CTX));
        o.allow_idmap = true;
        assert_eq!(bits(extra_options(&o, all)), Ok(SECURITY_CTX | ALLOW_IDMAP));
        let n = Negotiated::default();
        assert!(n.init_extra(&o, 0).is_err());
        assert!(!n.security_ctx());
        assert_eq!(n.init_extra(&o, all).unwrap(), SECURITY_CTX | ALLOW_IDMAP);
        assert!(n.security_ctx() && !n.posix_acl() && n.idmap());
        assert_eq!(n.extra(), extra_options(&o, all).unwrap());
        o.security_label = Negotiate::Never;
        assert_eq!(n.init_extra(&o, SECURITY_CTX).unwrap(), 0);
        assert!(!n.idmap() && !n.security_ctx());
    }
}
