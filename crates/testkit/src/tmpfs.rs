//! A tmpfs of a given size mounted on a fresh temporary directory, unmounted on drop: a real,
//! small filesystem as a branch (needs root, as CI has). Mounts only on its own directory.

use std::path::Path;
use std::process::Command;

/// A mounted tmpfs.
pub struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (mount(8) syntax, e.g. `16M`).
    pub fn new(size: &str) -> Tmpfs {
        Tmpfs::with_options(&format!("size={size}"))
    }

    /// Mounts a tmpfs with mount(8) options `opts` (`size=16M,mode=0755`).
    pub fn with_options(opts: &str) -> Tmpfs {
        let d = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(d.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "mounting a tmpfs needs root");
        Tmpfs(d)
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}
