//! Confinement of the daemon (sandbox, seccomp, capabilities, id mapping). The settings are
//! parsed and checked by `config` with virtiofsd's meanings and defaults; what is not enforced
//! yet is said at start, one line each, so that no launcher believes the daemon confined when
//! it is not.

use log::warn;

use crate::args::{SandboxMode, SeccompAction};
use crate::config::Confinement;

/// Logs one warning for each confinement setting that is not enforced.
pub fn report(c: &Confinement) {
    if c.sandbox != SandboxMode::None {
        warn!(
            "--sandbox {:?}: sandboxing is not implemented yet; the daemon runs unconfined",
            c.sandbox
        );
    }
    if c.seccomp != SeccompAction::None {
        warn!(
            "--seccomp {:?}: no seccomp filter is installed yet; every system call is allowed",
            c.seccomp
        );
    }
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
