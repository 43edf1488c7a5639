//! The end-to-end level: a real guest (QEMU, TCG, a Debian kernel) mounts the share through
//! union-virtiofsd, or through virtiofsd 1.14 as the reference, and the host checks what lands
//! where. One module per concern: `cargo test --test guest upgrade::` runs one. Needs QEMU,
//! the guest kernel and the initramfs (scripts/install-deps.sh, fetch-kernel.sh,
//! build-initramfs.sh); fails, never skips, without them.
//!
//! These tests share one process and run on libtest's threads. What they share:
//! - The guest slots (`testkit::guest`, one per core unless `UVFS_GUESTS` says otherwise):
//!   a TCG guest with one vCPU keeps one core busy, so two run side by side at about the speed
//!   of one. `run_scenario` takes one slot, `run_together` one per guest, and the harnesses that
//!   start their own QEMU or libvirt domain (`reboot_soak`, `runtime`, `upgrade`, `libvirt`)
//!   take one with `one_guest`; `testkit::migrate::run_migration` (two QEMUs) and
//!   `guest_memory` (which reads within a second how much guest memory the daemon maps) take
//!   every slot with `serialize_guests`. Tests that boot no guest (refused command lines, the
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
mod host_changes;
mod idmap;
mod integrity;
mod launchers;
mod libvirt;
mod lock_waits;
mod locks;
mod migration;
mod migration_listings;
mod nodes;
mod ops;
mod pjdfstest;
mod policies;
mod posix;
mod posix_acl;
mod reboot_soak;
mod runtime;
mod security_label;
mod static_cache;
mod upgrade;
mod virtiofsd_options;
mod xattrmap;
