//! union-virtiofsd: a vhost-user virtio-fs device backend serving a mergerfs-style union of host
//! directories. Layers: `args → config → vhost | fusedev → fuse → fs → union → sys`; only `sys` may use `unsafe`.

pub mod args;
pub mod cli;
pub mod config;
pub mod confine;
pub mod ctl;
pub mod docs;
pub mod fs;
pub mod fuse;
pub mod fusedev;
pub mod logging;
pub mod start;
pub mod sync;
pub mod sys;
pub mod union;
pub mod vhost;
