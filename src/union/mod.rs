//! The union layer: branches and the policies that choose among them. It never sees FUSE or
//! virtio types, so every policy is a pure function unit-tested with a fake probe.

pub mod branch;
pub mod edit;
pub mod errno;
pub mod policy;
pub mod size;

pub use branch::{Branch, BranchMode};
pub use errno::ErrnoFold;
pub use policy::{Category, Policy, Probe};
