//! Support code of union-virtiofsd's integration tests (tests/*/main.rs): the daemon as a
//! process, the filesystem harness (each operation called as one request: `calls`), host trees and locks, the mergerfs comparison, and the
//! real-guest and migration harnesses. Only tests and examples use it; it never ships.

pub mod alone;
pub mod bin;
pub mod builds;
pub mod calls;
pub mod ctl;
pub mod daemon;
pub mod errno;
pub mod ext4;
pub mod fsharness;
pub mod fstab;
pub mod guest;
pub mod hostlocks;
pub mod hostmount;
pub mod live;
pub mod mergerfs_diff;
pub mod migrate;
pub mod mount_ops;
pub mod pjdfstest;
pub mod proc;
pub mod qmp;
pub mod signal;
pub mod tmpfs;
pub mod tree;
pub mod union_case;
pub mod usermount;
pub mod users;
