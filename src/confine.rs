//! Confinement of the daemon (sandbox, seccomp, capabilities, id mapping). The settings are
//! parsed and checked by `config` with virtiofsd's meanings and defaults. `--sandbox
//! namespace` (the default, as root) is enforced; what is not enforced yet is said at start,
//! one line each, so that no launcher believes the daemon confined when it is not.

use log::{info, warn};

use crate::args::{SandboxMode, SeccompAction};
use crate::config::Confinement;
use crate::fs::UnionFs;
use crate::sys::sandbox::{self, Entered};

/// Enters the sandbox `c` asks for, after the socket is bound and before any thread starts
/// or any guest request is read. Returns `Some(exit status)` in a parent process that only
/// supervised the sandboxed child (it must exit with that status), `None` to go on serving.
pub fn enter(c: &Confinement, fs: &mut UnionFs) -> std::io::Result<Option<i32>> {
    if let Err(e) = sandbox::no_new_privs() {
        warn!("cannot set no_new_privs: {e}");
    }
    match c.sandbox {
        SandboxMode::None => Ok(None),
        SandboxMode::Chroot => {
            warn!("--sandbox chroot: not implemented yet; the daemon runs unconfined");
            Ok(None)
        }
        SandboxMode::Namespace if !rustix::process::geteuid().is_root() => {
            warn!("--sandbox namespace needs root (user namespaces are not implemented yet); the daemon runs unconfined");
            Ok(None)
        }
        SandboxMode::Namespace => match sandbox::enter(&fs.root_fds())? {
            Entered::Parent(child) => Ok(Some(sandbox::supervise(child))),
            Entered::Child(roots) => {
                fs.replace_roots(roots)?;
                info!("sandbox: new mount, PID and network namespaces; / holds only the branches and /proc");
                Ok(None)
            }
        },
    }
}

/// Installs the seccomp filter `--seccomp` asks for; call before any thread is started.
pub fn filter(c: &Confinement) -> std::io::Result<()> {
    use crate::sys::seccomp::{install, Mismatch};
    match c.seccomp {
        SeccompAction::None => Ok(()),
        SeccompAction::Kill => install(Mismatch::Kill),
        SeccompAction::Log => install(Mismatch::Log),
        SeccompAction::Trap => install(Mismatch::Trap),
    }
}

/// Logs one warning for each confinement setting that is not enforced.
pub fn report(c: &Confinement) {
    if let Some(m) = &c.modcaps {
        warn!("--modcaps {m}: capabilities are not changed yet");
    }
    if !c.uid_map.is_empty() || !c.gid_map.is_empty() {
        warn!("--uid-map/--gid-map: no user namespace is created yet; ids are the daemon's own");
    }
    if !c.translate_uid.is_empty() || !c.translate_gid.is_empty() {
        warn!("--translate-uid/--translate-gid: id translation is not implemented yet; ids pass through");
    }
}
