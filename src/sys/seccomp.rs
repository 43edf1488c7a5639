//! The seccomp filter: an allowlist of exactly the system calls the serving daemon makes
//! (found by running the whole test suite, the real-guest tests included, under `--seccomp
//! log` and reading the kernel's log), built with seccompiler and installed before any worker
//! or queue thread exists, so every thread inherits it. A call outside the list kills the
//! daemon (`kill`, the default), is logged and allowed (`log`), or raises SIGSYS (`trap`).

use std::collections::BTreeMap;
use std::io;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

/// What happens to a system call outside the allowlist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// Kill the process.
    Kill,
    /// Log it and allow it.
    Log,
    /// Send SIGSYS.
    Trap,
}

/// The system calls the serving daemon makes.
const ALLOWED: &[libc::c_long] = &[
    // Memory, threads, signals, time.
    libc::SYS_brk,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_futex,
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_sigaltstack,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_yield,
    libc::SYS_getrandom,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_tgkill,
    libc::SYS_prctl,
    libc::SYS_clock_gettime,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_prlimit64,
    libc::SYS_getrlimit,
    // Event loop and the vhost-user socket.
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_eventfd2,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_accept4,
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_recvfrom,
    libc::SYS_sendto,
    libc::SYS_shutdown,
    libc::SYS_getsockopt,
    // Descriptors and files (everything below a branch root, through descriptors).
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_close,
    libc::SYS_dup,
    libc::SYS_dup3,
    libc::SYS_fcntl,
    libc::SYS_ioctl,
    libc::SYS_lseek,
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_open,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_fstatfs,
    libc::SYS_statfs,
    libc::SYS_getdents64,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_symlinkat,
    libc::SYS_linkat,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_unlinkat,
    libc::SYS_readlinkat,
    libc::SYS_fchownat,
    libc::SYS_fchown,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_chmod,
    libc::SYS_utimensat,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_ftruncate,
    libc::SYS_fallocate,
    libc::SYS_fsync,
    libc::SYS_syncfs,
    libc::SYS_fdatasync,
    libc::SYS_fadvise64,
    libc::SYS_copy_file_range,
    libc::SYS_sendfile,
    libc::SYS_flock,
    libc::SYS_getxattr,
    libc::SYS_lgetxattr,
    libc::SYS_fgetxattr,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_listxattr,
    libc::SYS_llistxattr,
    libc::SYS_flistxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    libc::SYS_umask,
    libc::SYS_unlink,
    // Credentials (per thread) and capabilities.
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    libc::SYS_setgroups,
    libc::SYS_capget,
    libc::SYS_capset,
    libc::SYS_unshare,
    libc::SYS_geteuid,
    libc::SYS_getuid,
    libc::SYS_getegid,
    libc::SYS_getgid,
];

/// The calls of nodes that use file handles, allowed only then.
const FILE_HANDLES: &[libc::c_long] = &[libc::SYS_name_to_handle_at, libc::SYS_open_by_handle_at];

/// The call a host mount makes to detach itself on SIGTERM, allowed only then.
const UNMOUNT: &[libc::c_long] = &[libc::SYS_umount2];

/// The system calls allowed: [`ALLOWED`], the file-handle calls when `file_handles`, and
/// umount2 when `unmount`.
fn allowlist(file_handles: bool, unmount: bool) -> Vec<libc::c_long> {
    let handles = if file_handles { FILE_HANDLES } else { &[] };
    let unmounts = if unmount { UNMOUNT } else { &[] };
    ALLOWED
        .iter()
        .chain(handles)
        .chain(unmounts)
        .copied()
        .collect()
}

/// Installs the filter on the calling thread (threads started later inherit it), with the
/// file-handle calls when `file_handles` and umount2 when `unmount` (a host mount).
pub fn install(mismatch: Mismatch, file_handles: bool, unmount: bool) -> io::Result<()> {
    let action = match mismatch {
        Mismatch::Kill => SeccompAction::KillProcess,
        Mismatch::Log => SeccompAction::Log,
        Mismatch::Trap => SeccompAction::Trap,
    };
    let rules = allowlist(file_handles, unmount)
        .into_iter()
        .map(|n| (n, Vec::new()))
        .collect::<BTreeMap<_, _>>();
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(io::Error::other)?;
    let filter =
        SeccompFilter::new(rules, action, SeccompAction::Allow, arch).map_err(io::Error::other)?;
    let prog: BpfProgram = filter.try_into().map_err(io::Error::other)?;
    seccompiler::apply_filter(&prog).map_err(io::Error::other)
}

/// Makes one system call that is not in the allowlist: personality(2) asked for the current
/// persona only (0xffffffff changes nothing). Under `kill` the process dies of SIGSYS; under
/// `log` the kernel logs it (audit type 1326) and it returns.
pub fn call_forbidden() -> io::Result<i32> {
    debug_assert!(!ALLOWED.contains(&libc::SYS_personality));
    // SAFETY: personality with 0xffffffff only reads the current persona.
    let r = unsafe { libc::syscall(libc::SYS_personality, 0xffff_ffff_u64) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_handle_calls_are_allowed_only_with_file_handles() {
        for call in [libc::SYS_name_to_handle_at, libc::SYS_open_by_handle_at] {
            assert!(!allowlist(false, false).contains(&call));
            assert!(allowlist(true, false).contains(&call));
        }
        assert_eq!(allowlist(true, false).len(), ALLOWED.len() + 2);
        assert!(!allowlist(true, false).contains(&libc::SYS_umount2));
        assert!(allowlist(false, true).contains(&libc::SYS_umount2));
    }
}
