//! Starting the process's one job from the parsed command line: the vhost-user daemon (the
//! sandbox, the socket, the serving loop), the host mount, or the sandbox's supervisor. Each
//! step's failure is logged once here and becomes the [`Exit`] `main` exits with; nothing
//! here exits the process.

use std::io::Write;

use log::error;

use crate::config::Config;
use crate::confine::{Files, SupervisorRequest};
use crate::fs::UnionFs;
use crate::sys::thread::set_umask;
use crate::vhost::{self, Bound};

/// How the process ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Done (0).
    Success,
    /// Bad command-line input or setup, as clap's own usage errors (2).
    Usage,
    /// Any other failure (1).
    Failure,
    /// A status of its own (the serving child's, a handover's).
    Status(u8),
}

impl Exit {
    /// The exit status.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Usage => 2,
            Exit::Failure => 1,
            Exit::Status(s) => s,
        }
    }
}

/// What a failed step does with its error: logs it after `what` (the one line it says) and
/// ends with `exit`.
fn fail<E: std::fmt::Display>(exit: Exit, what: &'static str) -> impl FnOnce(E) -> Exit {
    move |e| {
        error!("{what}{e}");
        exit
    }
}

/// The sandbox's supervisor, re-executed by the parent after the fork: waits for the serving
/// child and ends as it did.
pub fn supervisor(r: SupervisorRequest) -> Exit {
    match crate::confine::supervise(r.child, r.reload.as_ref()) {
        Ok(status) => supervised(status, &r.files),
        Err(e) => {
            eprintln!("union-virtiofsd: supervisor: {e}");
            r.files.remove();
            Exit::Failure
        }
    }
}

/// `--print-capabilities`: the vhost-user backend's capabilities as JSON.
pub fn print_capabilities() -> Exit {
    // A reader that stops early (`| head -c 1`) is no error: nothing more to say.
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{}", vhost::capabilities_json()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("union-virtiofsd: cannot write the capabilities: {e}");
            Exit::Failure
        }
        _ => Exit::Success,
    }
}

/// The vhost-user daemon, from its arguments until its session ends.
pub fn serve(args: crate::args::Args) -> Exit {
    if args.print_capabilities {
        return print_capabilities();
    }
    // RUST_LOG, when set (Podman passes RUST_LOG=ERROR), wins as it does for virtiofsd.
    let level = crate::config::early_log_level(&args);
    crate::logging::init(level, args.syslog);
    serve_logged(args).unwrap_or_else(|exit| exit)
}

/// [`serve`] once logging is set up; each failed step is its `Err`.
fn serve_logged(args: crate::args::Args) -> Result<Exit, Exit> {
    let test_forbidden = args.test_forbidden_syscall;
    let cfg = Config::try_from(args).map_err(fail(Exit::Usage, ""))?;
    // Before anything is made or said: a --socket-path the daemon will not use is bad input.
    vhost::check_listen(&cfg.daemon).map_err(fail(Exit::Usage, ""))?;
    let summary = cfg.summary();
    let node_fds = cfg.fs.opts.node_fds;
    let nofile_wanted = crate::fs::nofile_wanted(node_fds);
    let mut fs = UnionFs::new(cfg.fs).map_err(fail(Exit::Usage, ""))?;
    for note in &cfg.notes {
        log::warn!("{note}");
    }
    match crate::sys::limits::set_nofile(cfg.rlimit_nofile) {
        // Said once: a warning only when the node table cannot keep its node-fds open.
        Ok(n) if n.limit < nofile_wanted => {
            log::warn!("{n}, below the {nofile_wanted} that node-fds={node_fds} needs: nodes are reopened more often, and the guest meets EMFILE sooner");
        }
        Ok(n) => log::info!("{n}"),
        Err(e) => return Err(fail(Exit::Usage, "")(e)),
    }
    let mut reload = crate::ctl::reload::Reload::open(cfg.config_file.as_deref()).map_err(fail(
        Exit::Failure,
        "cannot open the directory of --config: ",
    ))?;
    let bound = Bound::new(&cfg.daemon).map_err(|e| {
        let exit = match e.is_bad_input() {
            true => Exit::Usage,
            false => Exit::Failure,
        };
        fail(exit, "")(e)
    })?;
    let files = Files {
        socket: bound.path().map(Into::into),
        ctl: bound.own_ctl().map(Into::into),
    };
    // The socket exists; no thread runs yet and no guest request has been read.
    match crate::confine::enter(&cfg.confinement, &mut fs, &files, &mut reload) {
        Ok(None) => {}
        Ok(Some(status)) => return Ok(supervised(status, &files)),
        Err(e) => {
            error!("cannot enter the sandbox: {e}");
            files.remove();
            return Err(Exit::Failure);
        }
    }
    // The serving process only (the sandbox's supervisor forwards SIGHUP to it).
    reload
        .catch()
        .map_err(fail(Exit::Failure, "cannot catch SIGHUP: "))?;
    let in_sandbox_child = cfg.confinement.sandbox == crate::args::SandboxMode::Namespace;
    crate::confine::drop_caps(&cfg.confinement)
        .map_err(fail(Exit::Failure, "cannot drop capabilities: "))?;
    crate::confine::filter(&cfg.confinement)
        .map_err(fail(Exit::Failure, "cannot install the seccomp filter: "))?;
    if test_forbidden {
        let r = crate::sys::seccomp::call_forbidden();
        log::warn!("forbidden system call personality(2) returned {r:?}");
    }
    log::info!("{summary}");
    let mut daemon = bound.start(fs).map_err(fail(Exit::Failure, ""))?;
    crate::ctl::start(&mut daemon);
    reload.spawn(daemon.fs());
    // The guest's umask rules from here on (the socket was made with the inherited one).
    set_umask(0);
    Ok(match daemon.run() {
        Ok(vhost::Ended::Served) => Exit::Success,
        Ok(vhost::Ended::HandedOver) if in_sandbox_child => {
            Exit::Status(vhost::HANDED_OVER_STATUS as u8)
        }
        Ok(vhost::Ended::HandedOver) => Exit::Success,
        Err(e @ vhost::Error::Upgrade(_)) if in_sandbox_child => {
            // The socket files are the running daemon's still: the supervisor leaves them.
            error!("{e}");
            Exit::Status(vhost::UPGRADE_ABANDONED_STATUS as u8)
        }
        Err(e) => fail(Exit::Failure, "")(e),
    })
}

/// `union-virtiofsd mount`: the union on the host at `mountpoint` until it is unmounted. In
/// the `background` (the fstab form), a daemon started anew serves it, logging to syslog
/// where there is one, as mergerfs; this process exits once it serves, with its status if
/// it fails before.
pub fn mount(mountpoint: std::path::PathBuf, args: &crate::args::Args, background: bool) -> Exit {
    use crate::fusedev::background;
    if background && !background::is_child() {
        return match background::start() {
            Ok(status) => Exit::Status(status),
            Err(e) => {
                eprintln!("union-virtiofsd: cannot start the daemon in the background: {e}");
                Exit::Failure
            }
        };
    }
    let ready = match background {
        true => match background::Ready::new() {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("union-virtiofsd: cannot go to the background: {e}");
                return Exit::Failure;
            }
        },
        false => None,
    };
    let level = crate::config::early_log_level(args);
    let (level, syslog) = background::log_to(ready.is_some(), level, args.syslog);
    crate::logging::init(level, syslog);
    let cfg = match crate::config::mount::MountConfig::new(mountpoint, args) {
        Ok(cfg) => cfg,
        Err(e) => return fail(Exit::Usage, "")(e),
    };
    match crate::fusedev::run(cfg, ready) {
        Ok(()) => Exit::Success,
        Err(e) if e.is_bad_input() => fail(Exit::Usage, "")(e),
        Err(e) => fail(Exit::Failure, "")(e),
    }
}

/// The sandbox's supervisor's exit once the serving child has exited with `status`.
fn supervised(status: i32, files: &Files) -> Exit {
    if status == vhost::HANDED_OVER_STATUS {
        // The child's session went to a new daemon, which owns the socket files now.
        return Exit::Success;
    }
    if status == vhost::UPGRADE_ABANDONED_STATUS {
        // The child could not take the session over: the files are the old daemon's.
        return Exit::Failure;
    }
    files.remove();
    Exit::Status(u8::try_from(status).unwrap_or(1))
}
