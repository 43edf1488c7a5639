//! The daemon as an ordinary user's host mount: `union-virtiofsd mount` run as uvfs-test
//! (`setpriv`), which mounts through fusermount3. fusermount3 opens /dev/fuse as the user,
//! and this host's /dev/fuse may be root's only (no udev makes it 0666 in a container), so
//! each mount runs in a private mount namespace of its own (`unshare --mount`) whose
//! /dev/fuse is a 0666 node of the same device and whose /etc/fuse.conf is the test's: the
//! host's /dev, /etc and mount table are left alone. The mount is seen and used from inside
//! that namespace (`nsenter --mount`). Needs root.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::users;

/// What runs in the new namespace before the daemon: a tmpfs on `$1`, a /dev/fuse of mode
/// `$UVFS_FUSE_MODE` (default 0666) and `$UVFS_FUSE_CONF` as /etc/fuse.conf from it, then the
/// rest of the arguments as the user.
const SETUP: &str = r#"set -e
dev=$1; shift
mount -t tmpfs -o mode=0755 tmpfs "$dev"
mknod -m "${UVFS_FUSE_MODE:-0666}" "$dev/fuse" c 10 229
mount --bind "$dev/fuse" /dev/fuse
printf '%s\n' "$UVFS_FUSE_CONF" > "$dev/fuse.conf"
mount --bind "$dev/fuse.conf" /etc/fuse.conf
exec setpriv --reuid=uvfs-test --regid=uvfs-test --clear-groups "$@""#;

/// A directory owned by uvfs-test (a mount point or a branch of its own).
pub fn user_dir() -> tempfile::TempDir {
    let u = users::uvfs_test();
    let d = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(d.path(), Some(u.uid), Some(u.gid)).unwrap();
    d
}

/// `union-virtiofsd ARGS…` as uvfs-test in a namespace of its own, /etc/fuse.conf holding
/// `fuse_conf`; `dev` is an empty directory for the namespace's device node.
pub fn daemon<S: AsRef<OsStr>>(dev: &Path, fuse_conf: &str, args: &[S]) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "sh", "-c", SETUP, "sh"])
        .arg(dev)
        .arg(crate::bin::daemon_path())
        .args(args)
        .env("UVFS_FUSE_CONF", fuse_conf)
        .stdin(Stdio::null());
    cmd
}

/// `union-virtiofsd mount AT ARGS…` as [`daemon`] runs it.
pub fn command(at: &Path, dev: &Path, fuse_conf: &str, args: &[&str]) -> Command {
    let mut all = vec![OsStr::new("mount"), at.as_os_str()];
    all.extend(args.iter().map(OsStr::new));
    daemon(dev, fuse_conf, &all)
}

/// A running user's mount.
pub struct UserMount {
    dir: tempfile::TempDir,
    child: Option<Child>,
    log: PathBuf,
    _dev: tempfile::TempDir,
    _logdir: tempfile::TempDir,
}

impl UserMount {
    /// Mounts with `args` (after `mount MOUNTPOINT`) and /etc/fuse.conf holding `fuse_conf`,
    /// and waits (bounded) until the daemon's namespace lists the mount and the daemon says it
    /// serves it (`mounted on`, logged once it is confined and its readers run).
    pub fn new(fuse_conf: &str, args: &[&str]) -> UserMount {
        let dir = user_dir();
        let dev = tempfile::tempdir().unwrap();
        let logdir = tempfile::tempdir().unwrap();
        let log = logdir.path().join("daemon.log");
        let child = command(dir.path(), dev.path(), fuse_conf, args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn unshare");
        let mut m = UserMount {
            dir,
            child: Some(child),
            log,
            _dev: dev,
            _logdir: logdir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while m.mount_options(m.pid()).is_none() || !m.log().contains("mounted on ") {
            if let Some(st) = m.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("the daemon exited ({st}) before mounting:\n{}", m.log());
            }
            assert!(Instant::now() < deadline, "not mounted after 20 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        m
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The daemon's pid (unshare, sh and setpriv exec it in turn).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// What the daemon logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The mount's options as process `pid` (one in the daemon's namespace) sees them, if it
    /// sees the mount.
    pub fn mount_options(&self, pid: u32) -> Option<String> {
        let mounts = std::fs::read_to_string(format!("/proc/{pid}/mounts")).ok()?;
        let at = self.path().to_string_lossy();
        mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.get(1) == Some(&at.as_ref()) && f.get(2) == Some(&crate::hostmount::FSTYPE))
                .then(|| f[3].to_owned())
        })
    }

    /// `program` run as root in the daemon's mount namespace.
    pub fn in_ns(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["--target", &self.pid().to_string(), "--mount", program]);
        cmd
    }

    /// `program` run as uvfs-test in the daemon's mount namespace.
    pub fn as_user(&self, program: &str) -> Command {
        let mut cmd = self.in_ns("setpriv");
        cmd.args([
            "--reuid=uvfs-test",
            "--regid=uvfs-test",
            "--clear-groups",
            program,
        ]);
        cmd
    }

    /// Waits (bounded) for the daemon to exit; its exit code (-1 if a signal ended it).
    pub fn wait(&mut self, limit: Duration) -> i32 {
        let mut child = self.child.take().expect("running");
        crate::proc::wait_exit(&mut child, limit)
    }
}

impl Drop for UserMount {
    fn drop(&mut self) {
        // The namespace, and the mount in it, go with its last process.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
