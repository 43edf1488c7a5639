//! The protocol level: the daemon binary run as a process over temporary branches, driven
//! through its vhost-user socket by the vufs-frontend driver (no VM): FUSE frames on the wire,
//! request extensions, the opcodes the daemon serves itself, locks, and a randomized stress
//! run. One module per concern (`cargo test --test protocol locks::` runs one).
//!
//! These tests share one process and run on libtest's threads. Each starts a daemon of its
//! own (its process, socket and branches), so the daemons share nothing. In this process,
//! `locks` takes POSIX locks as a host process does; such locks belong to the whole process,
//! so each test locks only files of its own daemon's branches, and reads /proc/locks for those
//! files only. No test changes anything else the process shares.

mod ext;
mod locks;
mod opcodes;
mod stress;
mod wire;
