//! The namespace sandbox: new mount, PID and network namespaces whose root is an empty tmpfs
//! holding only the branch roots (bind-mounted from the descriptors the daemon opened) and a
//! /proc of the new PID namespace; the old root is detached. The process forks once: the
//! child, PID 1 of the new namespace, serves; the parent stays outside (re-executed as a
//! fresh image of the binary, see [`exec_supervisor`]), forwards SIGTERM and
//! SIGINT and reports the child's exit status. Must run while the process has one thread.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::mount::{
    mount, mount_bind_recursive, mount_change, mount_remount, unmount, MountFlags,
    MountPropagationFlags, UnmountFlags,
};
use rustix::thread::UnshareFlags;

/// Where a process stands after [`enter`].
pub enum Entered {
    /// The parent, outside the namespaces; the serving child has this pid.
    Parent(libc::pid_t),
    /// The child inside the sandbox, with each branch root opened again from its bind mount
    /// (descriptors from outside would let `..` climb back into the host's tree).
    Child(Vec<OwnedFd>),
}

/// Where the new root is assembled before pivot_root (inside the private mount namespace, so
/// mounting over it hides nothing from anyone else).
const STAGING: &str = "/tmp";

/// Unshares the namespaces and forks; the child builds the new root from `roots` and pivots
/// into it. `roots` are the branch directories: the `O_PATH` descriptor opened at start and
/// its path (a bind mount needs the directory in the new mount namespace, so it is opened
/// again by path there and must still be the same directory).
pub fn enter(roots: &[(BorrowedFd<'_>, &Path)]) -> io::Result<Entered> {
    // The new PID namespace is for the child only; the parent stays in the host's mount and
    // network namespaces, so that it can remove the socket when the child is gone.
    // SAFETY: NEWPID does not unshare the descriptor table (no FILES), and the caller
    // guarantees the process has a single thread.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWPID) }?;
    // SIGTERM/SIGINT stay pending in the parent until `supervise` can forward them (a VMM
    // may signal as soon as the socket exists); the child takes them at once.
    stop_signals(libc::SIG_BLOCK);
    // SAFETY: single-threaded (caller's guarantee), so the child starts with a consistent
    // copy of every lock and allocator state.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(Entered::Parent(pid));
    }
    stop_signals(libc::SIG_UNBLOCK);
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) };
    // SAFETY: as above, and the child has a single thread too.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS | UnshareFlags::NEWNET) }?;
    build_root(roots).map(Entered::Child)
}

fn build_root(roots: &[(BorrowedFd<'_>, &Path)]) -> io::Result<Vec<OwnedFd>> {
    mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )?;
    let mut here = Vec::with_capacity(roots.len());
    for (fd, path) in roots {
        let again = rustix::fs::open(
            *path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let (a, b) = (rustix::fs::fstat(fd)?, rustix::fs::fstat(&again)?);
        if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino) {
            return Err(io::Error::from_raw_os_error(libc::ESTALE));
        }
        here.push(again);
    }
    let nosuid = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
    mount("tmpfs", STAGING, "tmpfs", nosuid, c"mode=0755,size=1m")?;
    let at = |p: &str| format!("{STAGING}/{p}");
    for dir in ["proc", "branches", "old"] {
        rustix::fs::mkdir(at(dir), Mode::from_raw_mode(0o755))?;
    }
    for (i, fd) in here.iter().enumerate() {
        let target = at(&format!("branches/{i}"));
        rustix::fs::mkdir(&target, Mode::from_raw_mode(0o755))?;
        let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
        mount_bind_recursive(source, target)?;
    }
    // A /proc of the new PID namespace: it shows this process only, and gives the
    // descriptor-based operations their /proc/self/fd.
    mount("proc", at("proc"), "proc", nosuid, None)?;
    rustix::process::pivot_root(STAGING, at("old"))?;
    rustix::process::chdir("/")?;
    unmount("/old", UnmountFlags::DETACH)?;
    rustix::fs::rmdir("/old")?;
    // Nothing in the new root may change but the branches.
    mount_remount("/", MountFlags::RDONLY | nosuid, c"")?;
    let mut reopened = Vec::with_capacity(roots.len());
    for i in 0..roots.len() {
        reopened.push(rustix::fs::open(
            format!("/branches/{i}"),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?);
    }
    Ok(reopened)
}

/// The environment variable naming the child a re-executed supervisor watches (see
/// [`exec_supervisor`]); the socket path goes in [`SUPERVISOR_SOCKET_ENV`].
pub const SUPERVISOR_ENV: &str = "UNION_VIRTIOFSD_SUPERVISE";
/// The socket whose files the re-executed supervisor removes once the child is gone (unset
/// with `--fd`).
pub const SUPERVISOR_SOCKET_ENV: &str = "UNION_VIRTIOFSD_SUPERVISE_SOCKET";
/// The `--ctl-socket` the re-executed supervisor removes once the child is gone (unset when
/// there is none, or it is `<socket>.ctl`).
pub const SUPERVISOR_CTL_ENV: &str = "UNION_VIRTIOFSD_SUPERVISE_CTL";

/// In the parent, right after [`enter`]: replaces this process's image with a fresh one of
/// the same binary (`/proc/self/exe`, same arguments) that only supervises `child`, told so
/// by [`SUPERVISOR_ENV`] and [`SUPERVISOR_SOCKET_ENV`]. The supervisor then holds only the
/// pages its few steps touch instead of everything start-up touched (about 3 MiB: the
/// command line, the configuration, the union). The pid, the signal mask and the pending
/// SIGTERM/SIGINT/SIGHUP carry over (std's `Command` would clear the mask, delivering them
/// before the new image can forward them). Returns only if the exec fails.
pub fn exec_supervisor(child: libc::pid_t, env: &[(&str, std::ffi::OsString)]) -> io::Error {
    use std::ffi::{CString, OsStr};
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &OsStr| {
        CString::new(s.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
    };
    let built = (|| -> io::Result<(Vec<CString>, Vec<CString>)> {
        let argv = std::env::args_os()
            .map(|a| c(&a))
            .collect::<io::Result<Vec<_>>>()?;
        let mut envp = Vec::new();
        for (k, v) in std::env::vars_os() {
            if k == SUPERVISOR_ENV || env.iter().any(|(name, _)| k == *name) {
                continue;
            }
            let mut kv = k;
            kv.push("=");
            kv.push(v);
            envp.push(c(&kv)?);
        }
        envp.push(c(OsStr::new(&format!("{SUPERVISOR_ENV}={child}")))?);
        for (name, value) in env {
            let mut kv = std::ffi::OsString::from(format!("{name}="));
            kv.push(value);
            envp.push(c(&kv)?);
        }
        Ok((argv, envp))
    })();
    let (argv, envp) = match built {
        Ok(b) => b,
        Err(e) => return e,
    };
    let ptrs = |v: &[CString]| {
        let mut p: Vec<*const libc::c_char> = v.iter().map(|s| s.as_ptr()).collect();
        p.push(std::ptr::null());
        p
    };
    let (argp, envpp) = (ptrs(&argv), ptrs(&envp));
    // SAFETY: the path is a NUL-terminated literal; `argp` and `envpp` are NULL-terminated
    // arrays of pointers into `argv` and `envp`, which outlive the call (it returns only on
    // failure).
    unsafe { libc::execve(c"/proc/self/exe".as_ptr(), argp.as_ptr(), envpp.as_ptr()) };
    io::Error::last_os_error()
}

/// In the parent: forwards SIGTERM/SIGINT to `child` until it exits; returns its exit code
/// (128 + signal if it was killed). SIGHUP (re-read `--config`) goes to `on_hup` if given
/// (which reads the file where the host's paths are seen; `false`: it could not, and the
/// child gets SIGHUP), else to the child.
/// Single-threaded: SIGCHLD wakes it when the child is gone.
pub fn supervise(child: libc::pid_t, on_hup: Option<&dyn Fn() -> bool>) -> i32 {
    use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
    let reap = || {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer for the call.
        let r = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        match r {
            0 => None,
            r if r == child && libc::WIFEXITED(status) => Some(libc::WEXITSTATUS(status)),
            r if r == child => Some(128 + libc::WTERMSIG(status)),
            _ => Some(1),
        }
    };
    let mut signals = match signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGCHLD, SIGHUP])
    {
        Ok(s) => s,
        Err(_) => return 1,
    };
    // Signals that came since the fork are delivered (and forwarded) from here on.
    stop_signals(libc::SIG_UNBLOCK);
    // The child may have exited before SIGCHLD was caught.
    if let Some(code) = reap() {
        return code;
    }
    for sig in signals.forever() {
        if sig == SIGCHLD {
            if let Some(code) = reap() {
                return code;
            }
        } else if sig == SIGHUP && on_hup.is_some_and(|f| f()) {
            // Handled where the host's paths are seen.
        } else {
            // SAFETY: kill with plain integers.
            unsafe { libc::kill(child, sig) };
        }
    }
    1
}

/// Blocks or unblocks SIGTERM, SIGINT and SIGHUP for this thread (`how`: SIG_BLOCK or
/// SIG_UNBLOCK).
fn stop_signals(how: libc::c_int) {
    // SAFETY: the set is initialised by sigemptyset before use; the old set is not asked for.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Sets `no_new_privs`: nothing the daemon executes can gain privileges.
pub fn no_new_privs() -> io::Result<()> {
    Ok(rustix::thread::set_no_new_privs(true)?)
}

/// `--sandbox chroot`: the root directory becomes this process's own descriptor directory
/// (`/proc/PID/fd`), so that no absolute path and no `..` reaches any host file; what the
/// daemon uses it reaches through descriptors it already holds, and `/N` names descriptor N
/// for the path-only system calls. No new namespace: host processes and the network stay
/// reachable. CAP_SYS_CHROOT must be dropped afterwards (a second chroot would let `..`
/// escape).
pub fn enter_chroot() -> io::Result<()> {
    let fd_dir = rustix::fs::open(
        "/proc/self/fd",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    rustix::process::fchdir(&fd_dir)?;
    rustix::process::chroot(".")?;
    rustix::process::chdir("/")?;
    crate::sys::beneath::fd_dir_is_root();
    Ok(())
}

/// One id-map range as `/proc/PID/uid_map` and newuidmap(1) take it: (inside, outside, count).
pub type IdRange = (u32, u32, u32);

/// For a daemon that is not root: moves this process into a new user namespace in which it is
/// root (as virtiofsd does), so that the namespace sandbox can be built. The id maps are
/// written from outside by a short-lived child: with `uid_map`/`gid_map` (or any map other
/// than the daemon's own single id) through the setuid helpers newuidmap(1)/newgidmap(1),
/// which check /etc/subuid and /etc/subgid; otherwise directly, mapping the daemon's own uid
/// and gid to themselves. Must run while the process has one thread.
pub fn enter_user_namespace(uid_map: &[IdRange], gid_map: &[IdRange]) -> io::Result<()> {
    use std::io::{Read, Write};
    let (uid, gid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    let (go_r, go_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let (done_r, done_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    // SAFETY: single-threaded (caller's guarantee); the child only reads a pipe, runs the
    // map helpers and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        drop((go_w, done_r));
        let mut byte = [0u8];
        let ok = std::fs::File::from(go_r).read_exact(&mut byte).is_ok()
            && write_maps(
                rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get()),
                uid,
                gid,
                uid_map,
                gid_map,
            )
            .map_err(|e| log::error!("sandbox: cannot write the id maps: {e}"))
            .is_ok()
            && std::fs::File::from(done_w).write_all(&[1]).is_ok();
        // SAFETY: _exit ends the forked child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    drop((go_r, done_w));
    let unshared = {
        // SAFETY: NEWUSER needs a single-threaded process (caller's guarantee).
        unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER) }
    };
    let signalled = unshared.is_ok() && std::fs::File::from(go_w).write_all(&[1]).is_ok();
    let mut byte = [0u8];
    let mapped = signalled && std::fs::File::from(done_r).read_exact(&mut byte).is_ok();
    let mut status = 0;
    // SAFETY: waits for the child forked above; `status` is a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    unshared?;
    if !mapped {
        return Err(io::Error::other(
            "the id maps were not written (see the line above)",
        ));
    }
    // Root of the namespace where the maps allow it (the capabilities are ours anyway).
    // SAFETY: plain integer arguments; only this (single) thread exists.
    unsafe {
        if libc::setresgid(0, 0, 0) != 0 || libc::setresuid(0, 0, 0) != 0 {
            log::info!("sandbox: uid 0 is not mapped in the user namespace; keeping uid {uid}");
        }
    }
    Ok(())
}

/// Writes `pid`'s uid and gid maps (see [`enter_user_namespace`]).
fn write_maps(
    pid: i32,
    uid: u32,
    gid: u32,
    uid_map: &[IdRange],
    gid_map: &[IdRange],
) -> io::Result<()> {
    let own = |id: u32| vec![(id, id, 1)];
    for (kind, map, id) in [("uid", uid_map, uid), ("gid", gid_map, gid)] {
        let map = if map.is_empty() {
            own(id)
        } else {
            map.to_vec()
        };
        if map.len() == 1 && map[0].1 == id && map[0].2 == 1 {
            if kind == "gid" {
                std::fs::write(format!("/proc/{pid}/setgroups"), "deny")?;
            }
            std::fs::write(
                format!("/proc/{pid}/{kind}_map"),
                format!("{} {} 1", map[0].0, id),
            )?;
            continue;
        }
        let helper = format!("new{kind}map");
        let mut cmd = std::process::Command::new(&helper);
        cmd.arg(pid.to_string());
        for (inside, outside, count) in &map {
            cmd.args([inside.to_string(), outside.to_string(), count.to_string()]);
        }
        let out = cmd
            .output()
            .map_err(|e| io::Error::new(e.kind(), format!("{helper}: {e}")))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(io::Error::other(format!("{helper}: {}", err.trim())));
        }
    }
    Ok(())
}
