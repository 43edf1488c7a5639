//! A small idmapped-mount tool for the test guest (busybox has no `mount -o X-mount.idmap=` and
//! no setpriv), packed by scripts/build-tools-initrd.sh as /opt/tools/bin/guest_idmap:
//!
//! ```text
//! guest_idmap mount SRC DST MAP   bind SRC on DST as an idmapped mount; MAP is
//!                                 DISK:SHOWN:COUNT (e.g. 0:100000:65536: on-disk ids
//!                                 0..65535 appear as 100000..165535 in DST), the meaning of
//!                                 util-linux's X-mount.idmap=, for uids and gids alike
//! guest_idmap as UID GID CMD...   drop every supplementary group, set gid and uid, exec CMD
//!                                 (no passwd entry needed)
//! ```
//!
//! Any failing step prints `guest_idmap: STEP: strerror (os error N)` on stderr and exits 1, so
//! a scenario can match the errno.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{exit, Command};

/// `open_tree(2)`: a detached copy of the mount at the path, not yet attached anywhere.
const OPEN_TREE_CLONE: libc::c_uint = 1;
/// `move_mount(2)`: the source is the descriptor itself.
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
/// `mount_setattr(2)`: idmap the mount through `userns_fd`'s mappings.
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `struct mount_attr` of `mount_setattr(2)` (MOUNT_ATTR_SIZE_VER0, 32 bytes).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A failed step: what was tried, and the errno.
struct Failed {
    step: String,
    err: io::Error,
}

/// Wraps the last OS error as the failure of `step`.
fn failed(step: impl Into<String>) -> Failed {
    Failed {
        step: step.into(),
        err: io::Error::last_os_error(),
    }
}

fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|_| usage())
}

fn usage() -> ! {
    eprintln!("usage: guest_idmap mount SRC DST DISK:SHOWN:COUNT | guest_idmap as UID GID CMD...");
    exit(2)
}

/// Parses `DISK:SHOWN:COUNT` into the `uid_map` line "DISK SHOWN COUNT": the mount's user
/// namespace maps its id DISK (an on-disk id) to SHOWN, which is what the mount shows.
fn map_line(map: &str) -> String {
    let parts: Vec<u32> = map
        .split(':')
        .map(|p| p.parse().unwrap_or_else(|_| usage()))
        .collect();
    let [disk, shown, count] = parts[..] else {
        usage()
    };
    format!("{disk} {shown} {count}\n")
}

/// A child process parked in a new user namespace until dropped (then it exits and is reaped).
struct Userns {
    pid: libc::pid_t,
    /// Write end of the pipe the child waits on; closing it releases the child.
    release: Option<File>,
}

impl Userns {
    /// Forks a child that unshares its user namespace, says so, and waits.
    fn new() -> Result<Userns, Failed> {
        let (ready_r, ready_w) = pipe()?;
        let (release_r, release_w) = pipe()?;
        // SAFETY: this program is single-threaded, so the child may run any code; it only
        // makes raw syscalls and exits with _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(failed("fork"));
        }
        if pid == 0 {
            drop(ready_r);
            drop(release_w);
            // SAFETY: unshare takes flags only.
            let ok = unsafe { libc::unshare(libc::CLONE_NEWUSER) } == 0;
            let mut byte = [u8::from(ok)];
            let mut ready = File::from(ready_w);
            let _ = ready.write_all(&byte);
            drop(ready);
            // Blocks until the parent closes the write end (EOF).
            let _ = File::from(release_r).read(&mut byte);
            // SAFETY: _exit never returns and runs no destructors (the parent owns the state).
            unsafe { libc::_exit(0) };
        }
        drop(ready_w);
        drop(release_r);
        let ns = Userns {
            pid,
            release: Some(File::from(release_w)),
        };
        let mut byte = [0u8];
        let n = File::from(ready_r).read(&mut byte).map_err(|err| Failed {
            step: "read from the child".into(),
            err,
        })?;
        if n != 1 || byte[0] != 1 {
            return Err(Failed {
                step: "unshare(CLONE_NEWUSER) in the child".into(),
                err: io::Error::other("the child could not make a user namespace"),
            });
        }
        Ok(ns)
    }

    /// Writes `line` to the child's /proc/PID/`file`.
    fn write(&self, file: &str, line: &str) -> Result<(), Failed> {
        let path = format!("/proc/{}/{file}", self.pid);
        std::fs::write(&path, line).map_err(|err| Failed {
            step: format!("write {line:?} to {path}"),
            err,
        })
    }

    /// The child's user namespace, as a descriptor.
    fn open(&self) -> Result<File, Failed> {
        let path = format!("/proc/{}/ns/user", self.pid);
        File::open(&path).map_err(|err| Failed {
            step: format!("open {path}"),
            err,
        })
    }
}

impl Drop for Userns {
    fn drop(&mut self) {
        drop(self.release.take());
        let mut status = 0;
        // SAFETY: waits for our own child; status is a live int.
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), Failed> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into a live array of two.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(failed("pipe2"));
    }
    // SAFETY: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `guest_idmap mount SRC DST MAP`.
fn idmapped_bind(src: &str, dst: &str, map: &str) -> Result<(), Failed> {
    let line = map_line(map);
    let ns = Userns::new()?;
    // Written by a process with CAP_SETUID/CAP_SETGID over the parent namespace, so any
    // mapping is allowed and setgroups needs no "deny" first.
    ns.write("uid_map", &line)?;
    ns.write("gid_map", &line)?;
    let userns = ns.open()?;
    drop(ns);

    let c_src = cstr(src);
    // SAFETY: a NUL-terminated path and flags; the result is checked.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c_src.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(failed(format!("open_tree({src}, OPEN_TREE_CLONE)")));
    }
    // SAFETY: open_tree returned a fresh descriptor that nothing else owns.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as RawFd) };

    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: an empty NUL-terminated path, a live mount_attr and its size; checked.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 {
        return Err(failed(format!("mount_setattr({src}, MOUNT_ATTR_IDMAP)")));
    }

    let c_dst = cstr(dst);
    // SAFETY: two NUL-terminated paths and a live descriptor; checked.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            c_dst.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r != 0 {
        return Err(failed(format!("move_mount(to {dst})")));
    }
    Ok(())
}

/// `guest_idmap as UID GID CMD...`: returns only on failure.
fn run_as(uid: &str, gid: &str, cmd: &[OsString]) -> Failed {
    let uid: libc::uid_t = uid.parse().unwrap_or_else(|_| usage());
    let gid: libc::gid_t = gid.parse().unwrap_or_else(|_| usage());
    // SAFETY: an empty group list (count 0, null pointer is allowed).
    if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
        return failed("setgroups([])");
    }
    // SAFETY: plain id arguments.
    if unsafe { libc::setgid(gid) } != 0 {
        return failed(format!("setgid({gid})"));
    }
    // SAFETY: plain id arguments.
    if unsafe { libc::setuid(uid) } != 0 {
        return failed(format!("setuid({uid})"));
    }
    let err = Command::new(&cmd[0]).args(&cmd[1..]).exec();
    Failed {
        step: format!("exec {}", cmd[0].to_string_lossy()),
        err,
    }
}

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let text = |i: usize| -> String {
        args.get(i)
            .and_then(|a| a.clone().into_string().ok())
            .unwrap_or_else(|| usage())
    };
    let result = match text(0).as_str() {
        "mount" if args.len() == 4 => idmapped_bind(&text(1), &text(2), &text(3)),
        "as" if args.len() >= 4 => Err(run_as(&text(1), &text(2), &args[3..])),
        _ => usage(),
    };
    if let Err(Failed { step, err }) = result {
        eprintln!("guest_idmap: {step}: {err}");
        exit(1);
    }
}
