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
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .args([&name, "--exact", "--test-threads=1"])
        .env(CHILD, &name)
        .output()
        .expect("run this test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name} in its own process: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
