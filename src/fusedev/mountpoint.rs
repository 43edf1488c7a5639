//! The mount point and the kernel's mount options: what is checked before anything is
//! mounted (a directory, empty unless `nonempty`), and the option string the FUSE mount is
//! made with. Reads the mount point only; mounts nothing.

use std::path::Path;

use super::Error;
use crate::config::mount::MountOptions;

/// Checks that `path` is a directory, and empty unless `nonempty`.
pub fn check(path: &Path, nonempty: bool) -> Result<(), Error> {
    let bad = |why: String| Error::Mountpoint {
        path: path.to_owned(),
        why,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if !meta.is_dir() {
        return Err(bad("not a directory".into()));
    }
    if !nonempty {
        let mut entries = std::fs::read_dir(path).map_err(|e| bad(e.to_string()))?;
        if entries.next().is_some() {
            return Err(bad("not empty (add -o nonempty to mount over it)".into()));
        }
    }
    Ok(())
}

/// The FUSE mount's data string (without `fd=`): the root is a directory, the mount is the
/// daemon's user's, plus `allow_other` and `default_permissions` when asked, and READs of at
/// most `max_read` bytes.
pub fn kernel_options(o: &MountOptions, uid: u32, gid: u32, max_read: usize) -> String {
    let mut s = format!("rootmode=40000,user_id={uid},group_id={gid},max_read={max_read}");
    if o.allow_other {
        s.push_str(",allow_other");
    }
    if o.default_permissions {
        s.push_str(",default_permissions");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_point_is_an_empty_directory_unless_nonempty() {
        let d = tempfile::tempdir().unwrap();
        check(d.path(), false).unwrap();
        std::fs::write(d.path().join("f"), "x").unwrap();
        let e = check(d.path(), false).unwrap_err().to_string();
        assert!(e.contains("not empty"), "{e}");
        check(d.path(), true).unwrap();
        let e = check(&d.path().join("f"), true).unwrap_err().to_string();
        assert!(e.ends_with("not a directory"), "{e}");
        let e = check(&d.path().join("none"), true).unwrap_err().to_string();
        assert!(e.contains("No such file"), "{e}");
    }

    #[test]
    fn the_options_say_what_was_asked() {
        let mut o = MountOptions {
            allow_other: true,
            default_permissions: true,
            nonempty: false,
            fsname: "u".into(),
            subtype: "u".into(),
            readonly: false,
            noexec: false,
            noatime: false,
            suid: false,
            dev: false,
        };
        assert_eq!(
            kernel_options(&o, 0, 0, 1 << 20),
            "rootmode=40000,user_id=0,group_id=0,max_read=1048576,allow_other,default_permissions"
        );
        o.allow_other = false;
        o.default_permissions = false;
        assert_eq!(
            kernel_options(&o, 1, 2, 4096),
            "rootmode=40000,user_id=1,group_id=2,max_read=4096"
        );
    }
}
