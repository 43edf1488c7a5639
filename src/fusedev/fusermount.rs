//! Mounting without CAP_SYS_ADMIN, as libfuse does: fusermount3 (set-user-ID root, from the
//! fuse3 package) mounts on the daemon's behalf and hands it the descriptor of the new
//! connection over a socket pair named in `_FUSE_COMMFD`. fusermount3 decides what an
//! ordinary user may mount: a mount point the user may write to, `allow_other` only with
//! `user_allow_other` in /etc/fuse.conf, `suid` and `dev` ignored, at most `mount_max`
//! mounts. Its refusal is the daemon's error; its notes are logged. Unmounting is
//! `unmount.rs`'s. Serves no request.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

use super::Error;
use crate::config::mount::MountOptions;
use crate::sys::fusedev::{comm_pair, receive_device};

/// The program that mounts and unmounts FUSE filesystems for ordinary users.
pub const PROGRAM: &str = "fusermount3";

/// The environment variable that tells fusermount3 which descriptor to send the mount's on.
const COMMFD_ENV: &str = "_FUSE_COMMFD";

/// fusermount3's `-o` for `o` and READs of at most `max_read` bytes: the options it knows
/// (it refuses others), without the `fd=`, `rootmode=`, `user_id=` and `group_id=` it sets
/// itself. `nosuid,nodev` are its defaults, as for a mount(2) made here.
pub fn options(o: &MountOptions, max_read: usize) -> String {
    let mut v = vec![
        format!("fsname={}", o.fsname),
        format!("subtype={}", o.subtype),
        format!("max_read={max_read}"),
    ];
    let mut flag = |on: bool, name: &str| {
        if on {
            v.push(name.to_owned());
        }
    };
    flag(o.readonly, "ro");
    flag(o.noexec, "noexec");
    flag(o.noatime, "noatime");
    // Refused to ordinary users: fusermount3 says so and mounts without them.
    flag(o.suid, "suid");
    flag(o.dev, "dev");
    flag(o.allow_other, "allow_other");
    flag(o.default_permissions, "default_permissions");
    v.join(",")
}

/// Has fusermount3 mount the FUSE filesystem `o` describes on `at` and returns the
/// connection's descriptor. Nothing is mounted when it fails.
pub fn mount(at: &Path, o: &MountOptions, max_read: usize) -> Result<OwnedFd, Error> {
    let refused = |why: String| Error::Fusermount {
        path: at.to_owned(),
        why,
    };
    let (ours, theirs) = comm_pair().map_err(super::start("make fusermount3's socket pair"))?;
    let spawned = Command::new(PROGRAM)
        .arg("-o")
        .arg(options(o, max_read))
        .arg("--")
        .arg(at)
        .env(COMMFD_ENV, theirs.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    // Its end is fusermount3's alone: once it exits, the socket reads end of file.
    drop(theirs);
    let child = spawned.map_err(|e| {
        refused(format!(
            "cannot run {PROGRAM} ({e}); an ordinary user mounts through it (Debian: the fuse3 package)"
        ))
    })?;
    let out = child
        .wait_with_output()
        .map_err(super::start("wait for fusermount3"))?;
    let said: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(|l| l.trim().trim_start_matches("fusermount3: ").to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    if !out.status.success() {
        return Err(match said.is_empty() {
            true => refused(format!("{PROGRAM} {}", out.status)),
            false => refused(said.join("; ")),
        });
    }
    for line in &said {
        log::warn!("{PROGRAM}: {line}");
    }
    match receive_device(&ours) {
        Ok(Some(fd)) => Ok(fd),
        Ok(None) => Err(refused(format!("{PROGRAM} sent no descriptor"))),
        Err(e) => Err(refused(format!(
            "cannot receive {PROGRAM}'s descriptor: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusermount_gets_only_options_it_knows() {
        let mut o = MountOptions {
            allow_other: false,
            default_permissions: true,
            nonempty: false,
            fsname: "pool".into(),
            subtype: "union-virtiofsd".into(),
            readonly: false,
            noexec: false,
            noatime: false,
            suid: false,
            dev: false,
        };
        assert_eq!(
            options(&o, 4096),
            "fsname=pool,subtype=union-virtiofsd,max_read=4096,default_permissions"
        );
        o.readonly = true;
        o.allow_other = true;
        o.suid = true;
        assert_eq!(
            options(&o, 8192),
            "fsname=pool,subtype=union-virtiofsd,max_read=8192,ro,suid,allow_other,default_permissions"
        );
    }
}
