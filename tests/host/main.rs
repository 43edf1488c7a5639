//! The union mounted on the host (`union-virtiofsd mount`), no guest: file operations through
//! the kernel's FUSE mount and where their results land on the branches, the mount's life
//! cycle (umount, SIGTERM, files open at unmount, the control socket, SIGHUP), bad input,
//! an ordinary user's mount through fusermount3, the fstab form through mount(8) and
//! mount.fuse3, O_DIRECT onto an ext4 branch, FUSE
//! passthrough, pjdfstest on the mount over one and three branches, and fsx. Needs root and
//! /dev/fuse.
//! One module per concern (`cargo test --test host ops::` runs one).
//!
//! These tests share one process and run on libtest's threads; each mounts its own tmpfs
//! branches and its own mount point (`testkit::hostmount`), and changes nothing else of the
//! host: pjdfstest's users are bind-mounted over /etc/passwd and /etc/group only inside the
//! private mount namespace of the suite's process (`unshare --mount`), a user's mount and its
//! /dev/fuse and /etc/fuse.conf, and mount(8)'s PATH directory holding the binary, live in a
//! mount namespace of their own. The fstab tests make this process the reaper of orphans
//! (PR_SET_CHILD_SUBREAPER), to read the exit status of a daemon gone to the background.

mod bad_input;
mod direct_io;
mod fstab;
mod fsx;
mod lifecycle;
mod ops;
mod passthrough;
mod pjdfstest;
mod user;
