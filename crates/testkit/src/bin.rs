//! Where the daemon binary under test is. Reads only the environment and the file system.

use std::path::PathBuf;

/// The name of the daemon's binary target.
const NAME: &str = "union-virtiofsd";

/// The daemon binary cargo built for this test run: `CARGO_BIN_EXE_union-virtiofsd`, which
/// cargo sets while it runs an integration test, else `union-virtiofsd` in the target
/// directory above this executable (a test binary run by hand from `deps/`, an example from
/// `examples/`). Panics if neither names a file.
pub fn daemon_path() -> PathBuf {
    if let Some(path) = std::env::var_os(format!("CARGO_BIN_EXE_{NAME}")) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the path of this executable");
    let path = exe
        .parent()
        .and_then(|dir| dir.parent())
        .map(|dir| dir.join(NAME))
        .filter(|path| path.is_file());
    path.unwrap_or_else(|| {
        panic!(
            "no {NAME} binary beside {}: run through cargo test, or cargo build first",
            exe.display()
        )
    })
}
