//! Confinement of the daemon: sandbox (namespaces, user namespace, chroot), capabilities,
//! `no_new_privs` and the seccomp filter, entered in that order after the socket is bound and
//! before any thread starts. The settings are parsed and checked by `config` with virtiofsd's
//! meanings and defaults.

use caps::Capability;
use log::{info, warn};
use std::os::fd::AsFd;
use std::path::Path;

use crate::args::{SandboxMode, SeccompAction};
use crate::config::Confinement;
use crate::fs::UnionFs;
use crate::sys::sandbox::{self, Entered};

/// Enters the sandbox `c` asks for, after the socket is bound and before any thread starts
/// or any guest request is read. Returns `Some(exit status)` in a parent process that only
/// supervised the sandboxed child (it must exit with that status), `None` to go on serving.
pub fn enter(
    c: &Confinement,
    fs: &mut UnionFs,
    socket: Option<&Path>,
) -> std::io::Result<Option<i32>> {
    match c.sandbox {
        SandboxMode::None => Ok(None),
        SandboxMode::Chroot => {
            sandbox::enter_chroot()?;
            info!("sandbox: chroot into the daemon's own descriptor directory");
            Ok(None)
        }
        SandboxMode::Namespace => {
            if !rustix::process::geteuid().is_root() {
                let range = |m: &crate::args::IdMap| (m.inside, m.outside, m.count);
                let uids: Vec<_> = c.uid_map.iter().map(range).collect();
                let gids: Vec<_> = c.gid_map.iter().map(range).collect();
                sandbox::enter_user_namespace(&uids, &gids)?;
                info!("sandbox: new user namespace");
            }
            namespace(fs, socket)
        }
    }
}

/// The namespace sandbox proper (see [`sandbox::enter`]).
fn namespace(fs: &mut UnionFs, socket: Option<&Path>) -> std::io::Result<Option<i32>> {
    let roots = fs.root_fds();
    let borrowed: Vec<_> = roots
        .iter()
        .map(|(fd, p)| (fd.as_fd(), p.as_path()))
        .collect();
    match sandbox::enter(&borrowed)? {
        Entered::Parent(child) => {
            // The supervisor only forwards signals and removes the socket: a fresh image
            // of the binary does that ([`supervise`]), or, if it cannot be started, this one.
            let e = sandbox::exec_supervisor(child, socket);
            warn!("cannot re-execute the supervisor ({e}); supervising from this process");
            supervise(child).map(Some)
        }
        Entered::Child(roots) => {
            fs.replace_roots(roots)?;
            info!("sandbox: new mount, PID and network namespaces; / holds only the branches and /proc");
            Ok(None)
        }
    }
}

/// The sandbox's supervisor: limits itself to removing the socket files, then forwards
/// signals to `child` until it exits; returns its exit status.
pub fn supervise(child: libc::pid_t) -> std::io::Result<i32> {
    sandbox::no_new_privs()?;
    crate::sys::caps::limit_to(&[Capability::CAP_DAC_OVERRIDE])?;
    Ok(sandbox::supervise(child))
}

/// In a process started by [`sandbox::exec_supervisor`]: the child to supervise and the
/// socket to clean up after it, or `None` in any other process.
pub fn supervisor_request() -> Option<(libc::pid_t, Option<std::path::PathBuf>)> {
    let child = std::env::var_os(sandbox::SUPERVISOR_ENV)?;
    let child = child
        .to_str()?
        .parse()
        .ok()
        .filter(|p: &libc::pid_t| *p > 0)?;
    let socket = std::env::var_os(sandbox::SUPERVISOR_SOCKET_ENV).map(std::path::PathBuf::from);
    Some((child, socket))
}

/// Installs the seccomp filter `--seccomp` asks for; call before any thread is started.
pub fn filter(c: &Confinement) -> std::io::Result<()> {
    use crate::sys::seccomp::{install, Mismatch};
    match c.seccomp {
        SeccompAction::None => Ok(()),
        SeccompAction::Kill => install(Mismatch::Kill, c.file_handles),
        SeccompAction::Log => install(Mismatch::Log, c.file_handles),
        SeccompAction::Trap => install(Mismatch::Trap, c.file_handles),
    }
}

/// The capabilities a serving daemon keeps: virtiofsd's default set changed by `--modcaps`.
pub fn serving_caps(c: &Confinement) -> Vec<Capability> {
    let mut keep: Vec<Capability> = crate::sys::caps::SERVING.to_vec();
    if c.keep_sys_admin {
        keep.push(Capability::CAP_SYS_ADMIN);
    }
    if c.file_handles {
        keep.push(Capability::CAP_DAC_READ_SEARCH);
    }
    for change in c.modcaps.iter().flat_map(|m| m.0.iter()) {
        keep.retain(|k| *k != change.cap);
        if change.add {
            keep.push(change.cap);
        }
    }
    keep
}

/// Sets `no_new_privs` and drops every capability but those the serving daemon needs (see
/// [`serving_caps`]); call after the sandbox is entered (which needs CAP_SYS_ADMIN, and for an
/// unprivileged daemon the file capabilities of newuidmap(1)) and before any thread starts.
pub fn drop_caps(c: &Confinement) -> std::io::Result<()> {
    if let Err(e) = sandbox::no_new_privs() {
        warn!("cannot set no_new_privs: {e}");
    }
    let wanted = serving_caps(c);
    let kept = crate::sys::caps::limit_to(&wanted)?;
    let missing: Vec<String> = wanted
        .iter()
        .filter(|w| !kept.contains(w))
        .map(|w| w.to_string().to_ascii_lowercase())
        .collect();
    if !missing.is_empty() && rustix::process::geteuid().is_root() {
        warn!(
            "capabilities the daemon does not have: {}",
            missing.join(", ")
        );
    }
    let names: Vec<String> = kept
        .iter()
        .map(|k| k.to_string().to_ascii_lowercase())
        .collect();
    info!(
        "capabilities kept: {}",
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    );
    Ok(())
}
