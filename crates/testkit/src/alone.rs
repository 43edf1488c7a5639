//! Running one test in a process of its own, for a test that changes what every thread of its
//! process shares (a resource limit, the supplementary groups, a descriptor children inherit)
//! or that counts the process's descriptors. Tests of a binary share its process and run on
//! several threads: this gives such a test the process to itself, as when it was a binary of
//! its own, and leaves the other tests' process untouched.

use std::process::Command;

/// Set in the child to the name of the test it runs.
const CHILD: &str = "UVFS_TESTKIT_ALONE";

/// Runs `body` in a new process of this test binary that runs only the calling test, on one
/// thread; fails (with the child's output) unless that test passed there. Call it from a
/// `#[test]` function, with the whole test as `body`: the child finds the test by the name of
/// the thread libtest runs it on.
pub fn in_own_process(body: impl FnOnce()) {
    let name = std::thread::current()
        .name()
        .expect("libtest names a test's thread after the test")
        .to_owned();
    if std::env::var_os(CHILD).is_some_and(|v| v == name.as_str()) {
        body();
        return;
    }
    // Output to files, not pipes: a daemon the test started and could not stop (it failed
    // first) keeps its inherited descriptors, and reading a pipe to its end would wait for it.
    let (mut out, mut err) = (
        tempfile::tempfile().expect("a temporary file"),
        tempfile::tempfile().expect("a temporary file"),
    );
    let status = Command::new(std::env::current_exe().expect("this test binary"))
        .args([&name, "--exact", "--test-threads=1"])
        .env(CHILD, &name)
        .stdout(out.try_clone().expect("dup"))
        .stderr(err.try_clone().expect("dup"))
        .status()
        .expect("run this test binary again");
    let read = |f: &mut std::fs::File| {
        use std::io::{Read, Seek};
        let mut s = String::new();
        f.rewind().expect("rewind");
        let _ = f.read_to_string(&mut s);
        s
    };
    let (stdout, stderr) = (read(&mut out), read(&mut err));
    assert!(
        status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name} in its own process: {status}\n{stdout}{stderr}"
    );
}
