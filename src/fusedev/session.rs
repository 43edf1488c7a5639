//! The mount itself: /dev/fuse opened, the FUSE filesystem mounted on the mount point with
//! that descriptor, one more descriptor of the connection per extra reader thread, and the
//! lazy unmount SIGTERM asks for. Serves no request.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::{mountpoint, Error};
use crate::config::mount::MountOptions;
use crate::sys::fusedev::{self, MountFlags};

/// An open /dev/fuse, before it is mounted.
pub struct Device(OwnedFd);

impl Device {
    /// Opens /dev/fuse (bad input when the daemon may not: no device, no access).
    pub fn open() -> Result<Self, Error> {
        fusedev::open_device()
            .map(Device)
            .map_err(|source| Error::DeviceAccess { source })
    }

    /// Mounts the union served through this device on `at`, with `o`, READs of at most
    /// `max_read` bytes.
    pub fn mount(self, at: &Path, o: &MountOptions, max_read: usize) -> Result<Mounted, Error> {
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        let options = mountpoint::kernel_options(o, uid, gid, max_read);
        fusedev::mount(
            self.0.as_fd(),
            at,
            &o.fsname,
            &o.subtype,
            flags(o),
            &options,
        )
        .map_err(|source| Error::Mount {
            path: at.to_owned(),
            source,
        })?;
        Ok(Mounted {
            fd: self.0,
            at: at.to_owned(),
        })
    }
}

/// The mount flags `o` asks for: `nosuid,nodev` unless `suid`/`dev`, as libfuse's defaults.
fn flags(o: &MountOptions) -> MountFlags {
    let mut f = MountFlags::empty();
    let mut set = |on: bool, flag: MountFlags| {
        if on {
            f |= flag;
        }
    };
    set(!o.suid, MountFlags::NOSUID);
    set(!o.dev, MountFlags::NODEV);
    set(o.readonly, MountFlags::RDONLY);
    set(o.noexec, MountFlags::NOEXEC);
    set(o.noatime, MountFlags::NOATIME);
    f
}

/// A mounted union: the connection's first descriptor and where it is mounted.
pub struct Mounted {
    fd: OwnedFd,
    at: PathBuf,
}

impl Mounted {
    /// `n` more descriptors of the connection, one per extra reader thread.
    pub fn clones(&self, n: usize) -> Result<Vec<OwnedFd>, Error> {
        (0..n)
            .map(|_| {
                fusedev::clone_device(self.fd.as_fd()).map_err(|source| Error::Clone { source })
            })
            .collect()
    }

    /// Another descriptor of the connection's first open (for its backing-file ioctls).
    pub fn dup(&self) -> std::io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// The connection's first descriptor, for the first reader thread.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// Unmounts it (a start that failed after the mount).
    pub fn unmount(&self) {
        if let Err(e) = fusedev::unmount(&self.at, true) {
            log::warn!("cannot unmount {}: {e}", self.at.display());
        }
    }
}
