//! The union against the real mergerfs 2.33: each scenario runs on a mergerfs FUSE mount,
//! through `UnionFs` and on our own host mount (`union-virtiofsd mount`), each over fresh
//! tmpfs branches, and the outcomes must be identical (`diff`).
//!
//! These tests share one process and run on libtest's threads. What they share: the process's
//! umask, which `testkit::mergerfs_diff::run_side` sets to 0 once (mergerfs and the daemon run
//! with none; the scenarios give exact modes) and which nothing else in this binary reads or
//! changes; and the mount table, where each tmpfs, each mergerfs and each of our host mounts
//! is mounted on a directory of its own scenario.

mod diff;
