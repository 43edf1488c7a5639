//! The daemon as a launcher runs it on the host: the command line, the control socket and
//! `union-virtiofsd ctl`, the life cycle and signals, confinement (capabilities, seccomp,
//! sandboxes, the user namespace) and syslog. One module per concern (`cargo test --test cli
//! ctl::` runs one).
//!
//! These tests share one process and run on libtest's threads; each starts daemons of its own,
//! with sockets and branches of their own. What they share, and how that cannot change a
//! result:
//! - Inheritable descriptors: a child spawned by any test inherits them. `lifecycle`'s `--fd`
//!   test makes its listener inheritable, so it runs in a process of its own
//!   (`testkit::alone`); everything else this process opens is close-on-exec.
//! - The kernel log (`confinement`'s `--seccomp log` test reads /dev/kmsg): it looks only for
//!   records of its own daemon's pid, and no other test asks for such records.
//! - This process's capabilities, which `confinement` hands down and compares with: no test
//!   changes them.
//! - The mount namespace: `syslog` mounts its /dev/log only inside the private namespace of
//!   its daemon (`unshare --mount`).

mod bad_input;
mod cli;
mod confinement;
mod ctl;
mod lifecycle;
mod syslog;
