//! Confinement of the daemon: sandbox (namespaces, user namespace, chroot), capabilities,
//! `no_new_privs` and the seccomp filter, entered in that order after the socket is bound and
//! before any thread starts. The settings are parsed and checked by `config` with virtiofsd's
//! meanings and defaults.

use caps::Capability;
use log::{info, warn};
use std::os::fd::AsFd;
use std::path::PathBuf;

use crate::args::{SandboxMode, SeccompAction};
use crate::config::Confinement;
use crate::ctl::reload::{Forwarder, Reload};
use crate::fs::UnionFs;
use crate::sys::sandbox::{self, Entered};

/// The files a daemon makes that outlive it unless removed: its `--socket-path` (and the
/// files beside it) and a `--ctl-socket` of its own. The sandbox's supervisor removes them
/// for its child.
#[derive(Clone, Debug, Default)]
pub struct Files {
    /// `--socket-path`.
    pub socket: Option<PathBuf>,
    /// `--ctl-socket`, when not `<socket>.ctl`.
    pub ctl: Option<PathBuf>,
}

impl Files {
    /// Removes them (a start that failed, a daemon that ended).
    pub fn remove(&self) {
        if let Some(p) = &self.socket {
            crate::vhost::remove_socket_files(p);
        }
        if let Some(c) = &self.ctl {
            crate::vhost::remove_ctl_socket(c);
        }
    }
}

/// Enters the sandbox `c` asks for, after the socket is bound and before any thread starts
/// or any guest request is read. Returns `Some(exit status)` in a parent process that only
/// supervised the sandboxed child (it must exit with that status), `None` to go on serving.
/// In the namespace sandbox the supervisor re-reads `--config` for the child (`reload`).
pub fn enter(
    c: &Confinement,
    fs: &mut UnionFs,
    files: &Files,
    reload: &mut Reload,
) -> std::io::Result<Option<i32>> {
    match c.sandbox {
        SandboxMode::None => Ok(None),
        SandboxMode::Chroot => {
            sandbox::enter_chroot()?;
            info!("sandbox: chroot into the daemon's own descriptor directory");
            if reload.has_file() {
                info!(
                    "sandbox: SIGHUP cannot add branches under --sandbox chroot (no host path \
                     is visible, and no process outside opens them); add them with \
                     `union-virtiofsd ctl`"
                );
            }
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
            namespace(fs, files, reload)
        }
    }
}

/// The namespace sandbox proper (see [`sandbox::enter`]).
fn namespace(fs: &mut UnionFs, files: &Files, reload: &mut Reload) -> std::io::Result<Option<i32>> {
    let roots = fs.root_fds();
    let borrowed: Vec<_> = roots
        .iter()
        .map(|(fd, p)| (fd.as_fd(), p.as_path()))
        .collect();
    let forwarder = reload.channel()?;
    match sandbox::enter(&borrowed)? {
        Entered::Parent(child) => {
            reload.drop_channel();
            // The supervisor only forwards signals, re-reads --config and removes the
            // socket: a fresh image of the binary does that ([`supervise`]), or, if it
            // cannot be started, this one.
            let mut env = Vec::new();
            if let Some(p) = &files.socket {
                env.push((sandbox::SUPERVISOR_SOCKET_ENV, p.as_os_str().to_owned()));
            }
            if let Some(p) = &files.ctl {
                env.push((sandbox::SUPERVISOR_CTL_ENV, p.as_os_str().to_owned()));
            }
            if let Some(f) = &forwarder {
                match f.pass_on() {
                    Ok(kv) => env.push(kv),
                    Err(e) => warn!("SIGHUP: the supervisor cannot re-read --config: {e}"),
                }
            }
            let e = sandbox::exec_supervisor(child, &env);
            warn!("cannot re-execute the supervisor ({e}); supervising from this process");
            supervise(child, forwarder.as_ref()).map(Some)
        }
        Entered::Child(roots) => {
            drop(forwarder);
            fs.replace_roots(roots)?;
            info!("sandbox: new mount, PID and network namespaces; / holds only the branches and /proc");
            Ok(None)
        }
    }
}

/// The sandbox's supervisor: limits itself to removing the socket files, then forwards
/// signals to `child` until it exits (SIGHUP to `reload`, if given); returns its exit status.
pub fn supervise(child: libc::pid_t, reload: Option<&Forwarder>) -> std::io::Result<i32> {
    sandbox::no_new_privs()?;
    crate::sys::caps::limit_to(&[Capability::CAP_DAC_OVERRIDE])?;
    let on_hup = reload.map(|f| move || f.forward());
    Ok(sandbox::supervise(
        child,
        on_hup.as_ref().map(|f| f as &dyn Fn() -> bool),
    ))
}

/// What a process started by [`sandbox::exec_supervisor`] is to do.
pub struct SupervisorRequest {
    /// The serving child.
    pub child: libc::pid_t,
    /// The files to remove once it is gone.
    pub files: Files,
    /// Where SIGHUP's re-reads of `--config` go.
    pub reload: Option<Forwarder>,
}

/// In a process started by [`sandbox::exec_supervisor`]: what it is to supervise, or `None`
/// in any other process.
pub fn supervisor_request() -> Option<SupervisorRequest> {
    let child = std::env::var_os(sandbox::SUPERVISOR_ENV)?;
    let child = child
        .to_str()?
        .parse()
        .ok()
        .filter(|p: &libc::pid_t| *p > 0)?;
    let path = |k| std::env::var_os(k).map(PathBuf::from);
    Some(SupervisorRequest {
        child,
        files: Files {
            socket: path(sandbox::SUPERVISOR_SOCKET_ENV),
            ctl: path(sandbox::SUPERVISOR_CTL_ENV),
        },
        reload: Forwarder::from_env(),
    })
}

/// Installs the seccomp filter `--seccomp` asks for; call before any thread is started.
pub fn filter(c: &Confinement) -> std::io::Result<()> {
    use crate::sys::seccomp::{install, Mismatch};
    match c.seccomp {
        SeccompAction::None => Ok(()),
        SeccompAction::Kill => install(Mismatch::Kill, c.file_handles, c.unmount),
        SeccompAction::Log => install(Mismatch::Log, c.file_handles, c.unmount),
        SeccompAction::Trap => install(Mismatch::Trap, c.file_handles, c.unmount),
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
