//! Safe wrappers around the system calls the daemon needs; the only module with unsafe.

pub mod fd;
pub mod thread;
