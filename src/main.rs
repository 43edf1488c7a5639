//! Entry point: parse, convert, run, log one error, exit non-zero. The only place that exits.

use std::io::Write;
use std::process::ExitCode;

use log::error;

use union_virtiofsd::config::Config;
use union_virtiofsd::confine::Files;
use union_virtiofsd::fs::UnionFs;
use union_virtiofsd::sys::thread::set_umask;
use union_virtiofsd::vhost::{self, Bound};

/// Bad command-line input or setup (like clap's own usage errors).
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    // The sandbox's supervisor, re-executed by the parent after the fork: nothing else to do.
    if let Some(r) = union_virtiofsd::confine::supervisor_request() {
        return match union_virtiofsd::confine::supervise(r.child, r.reload.as_ref()) {
            Ok(status) => supervised(status, &r.files),
            Err(e) => {
                eprintln!("union-virtiofsd: supervisor: {e}");
                r.files.remove();
                ExitCode::FAILURE
            }
        };
    }
    // The helper that unmounts a fusermount3 mount for a confined daemon: nothing else to do.
    if let Some(at) = union_virtiofsd::fusedev::unmount_helper_request() {
        return ExitCode::from(union_virtiofsd::fusedev::unmount_helper(&at));
    }
    union_virtiofsd::sys::mem::configure();
    let args = match union_virtiofsd::cli::parse(std::env::args_os().collect()) {
        union_virtiofsd::cli::Parsed::Serve(args) => *args,
        union_virtiofsd::cli::Parsed::Mount {
            mountpoint,
            args,
            background,
        } => return mount(mountpoint, &args, background),
        union_virtiofsd::cli::Parsed::Exit(status) => return ExitCode::from(status),
    };
    if args.print_capabilities {
        // A reader that stops early (`| head -c 1`) is no error: nothing more to say.
        let mut out = std::io::stdout().lock();
        return match writeln!(out, "{}", vhost::capabilities_json()).and_then(|()| out.flush()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                eprintln!("union-virtiofsd: cannot write the capabilities: {e}");
                ExitCode::FAILURE
            }
            _ => ExitCode::SUCCESS,
        };
    }
    // RUST_LOG, when set (Podman passes RUST_LOG=ERROR), wins as it does for virtiofsd.
    let level = union_virtiofsd::config::early_log_level(&args);
    union_virtiofsd::logging::init(level, args.syslog);

    let args_test_forbidden = args.test_forbidden_syscall;
    let cfg = match Config::try_from(args) {
        Ok(cfg) => cfg,
        Err(e) => {
            error!("{e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Before anything is made or said: a --socket-path the daemon will not use is bad input.
    if let Err(e) = vhost::check_listen(&cfg.daemon) {
        error!("{e}");
        return ExitCode::from(EXIT_USAGE);
    }
    let summary = cfg.summary();
    let node_fds = cfg.fs.opts.node_fds;
    let nofile_wanted = union_virtiofsd::fs::nofile_wanted(node_fds);
    let mut fs = match UnionFs::new(cfg.fs) {
        Ok(fs) => fs,
        Err(e) => {
            error!("{e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    for note in &cfg.notes {
        log::warn!("{note}");
    }
    match union_virtiofsd::sys::limits::set_nofile(cfg.rlimit_nofile) {
        // Said once: a warning only when the node table cannot keep its node-fds open.
        Ok(n) if n.limit < nofile_wanted => {
            log::warn!("{n}, below the {nofile_wanted} that node-fds={node_fds} needs: nodes are reopened more often, and the guest meets EMFILE sooner");
        }
        Ok(n) => log::info!("{n}"),
        Err(e) => {
            error!("{e}");
            return ExitCode::from(EXIT_USAGE);
        }
    }
    let mut reload = match union_virtiofsd::ctl::reload::Reload::open(cfg.config_file.as_deref()) {
        Ok(r) => r,
        Err(e) => {
            error!("cannot open the directory of --config: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bound = match Bound::new(&cfg.daemon) {
        Ok(b) => b,
        Err(e) => {
            error!("{e}");
            if e.is_bad_input() {
                return ExitCode::from(EXIT_USAGE);
            }
            return ExitCode::FAILURE;
        }
    };
    let files = Files {
        socket: bound.path().map(Into::into),
        ctl: bound.own_ctl().map(Into::into),
    };
    // The socket exists; no thread runs yet and no guest request has been read.
    match union_virtiofsd::confine::enter(&cfg.confinement, &mut fs, &files, &mut reload) {
        Ok(None) => {}
        Ok(Some(status)) => return supervised(status, &files),
        Err(e) => {
            error!("cannot enter the sandbox: {e}");
            files.remove();
            return ExitCode::FAILURE;
        }
    }
    // The serving process only (the sandbox's supervisor forwards SIGHUP to it).
    if let Err(e) = reload.catch() {
        error!("cannot catch SIGHUP: {e}");
        return ExitCode::FAILURE;
    }
    let in_sandbox_child = cfg.confinement.sandbox == union_virtiofsd::args::SandboxMode::Namespace;
    if let Err(e) = union_virtiofsd::confine::drop_caps(&cfg.confinement) {
        error!("cannot drop capabilities: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = union_virtiofsd::confine::filter(&cfg.confinement) {
        error!("cannot install the seccomp filter: {e}");
        return ExitCode::FAILURE;
    }
    if args_test_forbidden {
        let r = union_virtiofsd::sys::seccomp::call_forbidden();
        log::warn!("forbidden system call personality(2) returned {r:?}");
    }
    log::info!("{summary}");
    let mut daemon = match bound.start(fs) {
        Ok(d) => d,
        Err(e) => {
            error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    union_virtiofsd::ctl::start(&mut daemon);
    reload.spawn(daemon.fs());
    // The guest's umask rules from here on (the socket was made with the inherited one).
    set_umask(0);
    match daemon.run() {
        Ok(vhost::Ended::Served) => ExitCode::SUCCESS,
        Ok(vhost::Ended::HandedOver) if in_sandbox_child => {
            ExitCode::from(vhost::HANDED_OVER_STATUS as u8)
        }
        Ok(vhost::Ended::HandedOver) => ExitCode::SUCCESS,
        Err(e @ vhost::Error::Upgrade(_)) if in_sandbox_child => {
            // The socket files are the running daemon's still: the supervisor leaves them.
            error!("{e}");
            ExitCode::from(vhost::UPGRADE_ABANDONED_STATUS as u8)
        }
        Err(e) => {
            error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// `union-virtiofsd mount`: the union on the host at `mountpoint` until it is unmounted. In
/// the `background` (the fstab form), a daemon started anew serves it, logging to syslog
/// where there is one, as mergerfs; this process exits once it serves, with its status if
/// it fails before.
fn mount(
    mountpoint: std::path::PathBuf,
    args: &union_virtiofsd::args::Args,
    background: bool,
) -> ExitCode {
    use union_virtiofsd::fusedev::background;
    if background && !background::is_child() {
        return match background::start() {
            Ok(status) => ExitCode::from(status),
            Err(e) => {
                eprintln!("union-virtiofsd: cannot start the daemon in the background: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let ready = match background {
        true => match background::Ready::new() {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("union-virtiofsd: cannot go to the background: {e}");
                return ExitCode::FAILURE;
            }
        },
        false => None,
    };
    let level = union_virtiofsd::config::early_log_level(args);
    let (level, syslog) = background::log_to(ready.is_some(), level, args.syslog);
    union_virtiofsd::logging::init(level, syslog);
    let cfg = match union_virtiofsd::config::mount::MountConfig::new(mountpoint, args) {
        Ok(cfg) => cfg,
        Err(e) => {
            error!("{e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match union_virtiofsd::fusedev::run(cfg, ready) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e}");
            match e.is_bad_input() {
                true => ExitCode::from(EXIT_USAGE),
                false => ExitCode::FAILURE,
            }
        }
    }
}

/// The sandbox's supervisor's exit once the serving child has exited with `status`.
fn supervised(status: i32, files: &Files) -> ExitCode {
    if status == vhost::HANDED_OVER_STATUS {
        // The child's session went to a new daemon, which owns the socket files now.
        return ExitCode::SUCCESS;
    }
    if status == vhost::UPGRADE_ABANDONED_STATUS {
        // The child could not take the session over: the files are the old daemon's.
        return ExitCode::FAILURE;
    }
    files.remove();
    ExitCode::from(u8::try_from(status).unwrap_or(1))
}
