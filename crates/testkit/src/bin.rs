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

/// Where scripts/lib.sh installs the test tools (`$UVFS_TOOLS`): `$UVFS_CACHE/tools`, the cache
/// being `$XDG_CACHE_HOME/union-virtiofsd` or `~/.cache/union-virtiofsd` by default.
pub fn tools_dir() -> PathBuf {
    let cache = std::env::var_os("UVFS_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|c| PathBuf::from(c).join("union-virtiofsd"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/union-virtiofsd"))
        })
        .expect("HOME is set");
    cache.join("tools")
}

/// The tool `name` as scripts/lib.sh's `install_<name>` installs it (`$UVFS_TOOLS/<name>/bin/
/// <name>`), or `$<NAME>` when set. Panics, saying how to install it, when it is missing.
pub fn tool(name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(name.to_ascii_uppercase()) {
        return PathBuf::from(p);
    }
    let bin = tools_dir().join(name).join("bin").join(name);
    assert!(
        bin.is_file(),
        "no {name} at {}: scripts/test.sh --quick installs it (scripts/lib.sh's install_{name})",
        bin.display()
    );
    bin
}
