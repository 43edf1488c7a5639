//! The filesystem level: `UnionFs` called through the `FileSystem` trait over real tmpfs and
//! temporary-directory branches, as the dispatcher calls it; no daemon, no guest. One module
//! per concern (`cargo test --test fs cow::` runs one).
//!
//! These tests share one process and run on libtest's threads. What they share, and how that
//! cannot change a result:
//! - The umask and working directory (one `fs_struct`): `testkit::fsharness::union_with` moves
//!   its own thread to a private one (`unshare(CLONE_FS)`) before clearing the umask there;
//!   no test changes the process's.
//! - Credentials: the union switches fsuid/fsgid and clears the supplementary groups per
//!   thread (raw system calls). `creds`' test that calls glibc's setgroups, which changes every
//!   thread's, runs in a process of its own (`testkit::alone`).
//! - The descriptor table and RLIMIT_NOFILE: `budget` (lowers the limit, counts descriptors)
//!   and `nodes`' walk test (counts descriptors) each run in a process of their own.
//! - Locks held by the process (`session`): each test locks only files of its own, and reads
//!   /proc/locks for those files only.
//! - The mount table: each tmpfs or overlayfs is mounted on a test's own temporary directory.

mod budget;
mod control;
mod cow;
mod creds;
mod dir_links;
mod lookup_memo;
mod nodes;
mod opendir;
mod options;
mod rename_link;
mod session;
mod static_cache;
mod symlinks;
mod union;
