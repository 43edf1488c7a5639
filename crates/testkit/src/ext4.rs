//! An ext4 filesystem in an image file, mounted through a loop device (`mount -o loop`, which
//! frees the device at unmount) on a fresh temporary directory, unmounted on drop: a branch on
//! a block device, which enforces O_DIRECT alignment as a disk does (tmpfs ignores O_DIRECT).
//! Needs root and a free loop device. Mounts only on its own directory.

use std::path::Path;
use std::process::Command;

/// A mounted ext4 image.
pub struct Ext4 {
    dir: tempfile::TempDir,
    _image: tempfile::TempDir,
}

impl Ext4 {
    /// Makes an ext4 image of `mib` MiB and mounts it.
    pub fn new(mib: u64) -> Ext4 {
        let image = tempfile::tempdir().unwrap();
        let file = image.path().join("ext4.img");
        std::fs::File::create(&file)
            .and_then(|f| f.set_len(mib << 20))
            .unwrap();
        let ok = Command::new("mke2fs")
            .args(["-q", "-F", "-t", "ext4"])
            .arg(&file)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mke2fs {}", file.display());
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-o", "loop"])
            .arg(&file)
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "mounting an ext4 image needs root and a loop device");
        Ext4 { dir, _image: image }
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}
