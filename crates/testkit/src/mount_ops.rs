//! The third side of the differential tests: our daemon mounted on the host
//! (`union-virtiofsd mount`), driven through the kernel exactly as the mergerfs mount is
//! ([`HostOps`]), with runtime options set through its control socket instead of mergerfs's
//! `.mergerfs` xattrs.

use std::path::{Path, PathBuf};

use union_virtiofsd::ctl::client::{Client, ClientError};
use union_virtiofsd::ctl::edit::EditError;

use crate::mergerfs_diff::{place, unplace, HostOps, Ops, Statfs, R};

/// [`Ops`] through our host mount.
pub struct MountOps<'a> {
    /// The mount, as the mergerfs side drives its own.
    pub host: HostOps<'a>,
    /// The mount's `--ctl-socket`.
    pub ctl: PathBuf,
}

/// The errno of a refused control request, or of a branch edit the client would not send (as
/// the daemon's own check of it answers). A transport failure is a test bug: it panics.
fn errno(e: ClientError) -> i32 {
    match e {
        ClientError::Refused { errno, .. } => errno,
        ClientError::Edit(EditError::NoSuchDirectory(_)) => libc::ENOENT,
        ClientError::Edit(EditError::Open { source, .. }) => {
            source.raw_os_error().unwrap_or(libc::EIO)
        }
        ClientError::Edit(_) => libc::EINVAL,
        other => panic!("control socket: {other}"),
    }
}

impl MountOps<'_> {
    fn client(&self) -> Client {
        Client::connect(&self.ctl).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Ops for MountOps<'_> {
    fn create(&self, path: &str, data: &[u8]) -> R<()> {
        self.host.create(path, data)
    }
    fn mkdir(&self, path: &str, mode: u32) -> R<()> {
        self.host.mkdir(path, mode)
    }
    fn symlink(&self, target: &str, path: &str) -> R<()> {
        self.host.symlink(target, path)
    }
    fn unlink(&self, path: &str) -> R<()> {
        self.host.unlink(path)
    }
    fn rmdir(&self, path: &str) -> R<()> {
        self.host.rmdir(path)
    }
    fn chmod(&self, path: &str, mode: u32) -> R<()> {
        self.host.chmod(path, mode)
    }
    fn truncate(&self, path: &str, len: u64) -> R<()> {
        self.host.truncate(path, len)
    }
    fn setxattr(&self, path: &str, name: &str, value: &[u8]) -> R<()> {
        self.host.setxattr(path, name, value)
    }
    fn rename(&self, from: &str, to: &str) -> R<()> {
        self.host.rename(from, to)
    }
    fn link(&self, from: &str, to: &str) -> R<()> {
        self.host.link(from, to)
    }
    fn write_chunks(&self, path: &str, data: &[u8], chunk: usize) -> R<()> {
        self.host.write_chunks(path, data, chunk)
    }
    fn read(&self, path: &str) -> R<String> {
        self.host.read(path)
    }
    fn read_dir(&self, path: &str) -> R<Vec<String>> {
        self.host.read_dir(path)
    }
    fn mode(&self, path: &str) -> R<String> {
        self.host.mode(path)
    }
    fn statfs(&self) -> R<Statfs> {
        self.host.statfs()
    }
    fn set_option(&self, key: &str, value: &str) -> R<()> {
        self.client()
            .set(key, &place(value, self.host.roots))
            .map_err(errno)
    }
    fn get_option(&self, key: &str) -> R<String> {
        self.client()
            .get(key)
            .map(|v| unplace(&v, self.host.roots))
            .map_err(errno)
    }
}

/// Mounts our daemon over `specs` (`path=MODE`) with `-o options` and its control socket,
/// runs `f` on it, and unmounts it.
pub fn with_mount<T>(
    options: &str,
    specs: &[String],
    roots: &[PathBuf],
    f: impl FnOnce(&dyn Ops) -> T,
) -> T {
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("ctl");
    let branches: Vec<&Path> = specs.iter().map(Path::new).collect();
    let mut m = crate::hostmount::HostMount::new(
        &branches,
        &["-o", options, "--ctl-socket", ctl.to_str().unwrap()],
    );
    let ops = MountOps {
        host: HostOps {
            mnt: m.path(),
            roots,
        },
        ctl,
    };
    let out = f(&ops);
    let log = m.log();
    // Lazily: the kernel sends a closed file's RELEASE after close(2) returns, so a plain
    // umount right after the scenario can find the mount still busy; detached, the daemon
    // ends once the last release is in.
    assert_eq!(m.unmount(true), 0, "{log}");
    out
}
