//! The end-to-end level: a real guest (QEMU, TCG, a Debian kernel) mounts the share through
//! union-virtiofsd, or through virtiofsd 1.14 as the reference, and the host checks what lands
//! where. One module per concern: `cargo test --test guest upgrade::` runs one. Needs QEMU,
//! the guest kernel and the initramfs (scripts/install-deps.sh, fetch-kernel.sh,
//! build-initramfs.sh); fails, never skips, without them.
//!
//! These tests share one process and run on libtest's threads. What they share:
//! - The guest lock (`testkit::guest::serialize_guests`, one per process): guests run one at
//!   a time, so that TCG on two cores stays within each run's timeout. `run_scenario`,
//!   `run_together` and `testkit::migrate::run_migration` take it; the tests that start their
//!   own QEMU or libvirt domain (`guest_memory`, `reboot_soak`, `runtime`, `upgrade`,
//!   `libvirt`) take it themselves. Tests that boot no guest (refused command lines, the
//!   `FileSystem`-level `xattrmap` tests) take nothing.
//! - The kernel, initramfs and tool archives, and the previous release's daemon
//!   (`testkit::builds`), prepared once per process.
//! - Locks this process takes as a host process (`locks`, `lock_waits`, `migration`,
//!   `upgrade`): each on a file of its own test's branch.
//! - The mount table: each tmpfs is mounted on a directory of its own test.

mod confinement;
mod cow_image;
mod guest;
mod guest_memory;
mod idmap;
mod integrity;
mod launchers;
mod libvirt;
mod lock_waits;
mod locks;
mod migration;
mod nodes;
mod ops;
mod pjdfstest;
mod policies;
mod posix;
mod posix_acl;
mod reboot_soak;
mod runtime;
mod security_label;
mod upgrade;
mod virtiofsd_options;
mod xattrmap;
