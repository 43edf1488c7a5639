//! Sending a signal to a daemon a test started, the way a VMM stops it.

use std::process::{Child, Command};

/// Sends SIGTERM to `child`; panics if kill(1) fails (the process is already gone).
pub fn sigterm(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM {}", child.id());
}
