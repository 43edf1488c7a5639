//! The mount itself: made with mount(2) on an open /dev/fuse when the daemon may
//! (CAP_SYS_ADMIN), else by fusermount3; one more descriptor of the connection per extra
//! reader thread; and the lazy unmount SIGTERM asks for, by the same means. Serves no request.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use super::unmount::Unmounter;
use super::{fusermount, mountpoint, Error};
use crate::config::mount::MountOptions;
use crate::sys::fusedev::{self, MountFlags};

/// How the mount is to be made.
pub enum Mounter {
    /// mount(2) through this open /dev/fuse.
    Direct(OwnedFd),
    /// fusermount3 mounts and hands over the connection.
    Fusermount,
}

impl Mounter {
    /// The daemon's own mount(2) when `privileged` (opening /dev/fuse now: bad input when it
    /// cannot), else fusermount3's.
    pub fn new(privileged: bool) -> Result<Self, Error> {
        if !privileged {
            return Ok(Mounter::Fusermount);
        }
        fusedev::open_device()
            .map(Mounter::Direct)
            .map_err(|source| Error::DeviceAccess { source })
    }

    /// Mounts the union on `at`, with `o`, READs of at most `max_read` bytes.
    pub fn mount(self, at: &Path, o: &MountOptions, max_read: usize) -> Result<Mounted, Error> {
        let device = match self {
            Mounter::Direct(device) => device,
            Mounter::Fusermount => return by_fusermount(at, o, max_read),
        };
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        let options = mountpoint::kernel_options(o, uid, gid, max_read);
        fusedev::mount(
            device.as_fd(),
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
            fd: device,
            unmounter: Arc::new(Unmounter::Direct(at.to_owned())),
        })
    }
}

/// The mount fusermount3 makes, with the helper that will unmount it started before the
/// daemon confines itself.
fn by_fusermount(at: &Path, o: &MountOptions, max_read: usize) -> Result<Mounted, Error> {
    let fd = fusermount::mount(at, o, max_read)?;
    match Unmounter::helper(at) {
        Ok(u) => Ok(Mounted {
            fd,
            unmounter: Arc::new(u),
        }),
        Err(e) => {
            // Not confined yet: fusermount3 still works from here.
            let _ = std::process::Command::new(fusermount::PROGRAM)
                .args(["-u", "-z", "--"])
                .arg(at)
                .status();
            Err(Error::Start {
                what: "start the unmount helper",
                source: e,
            })
        }
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

/// A mounted union: the connection's first descriptor and how to detach it.
pub struct Mounted {
    fd: OwnedFd,
    unmounter: Arc<Unmounter>,
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

    /// What detaches the mount (for the signal thread).
    pub fn unmounter(&self) -> Arc<Unmounter> {
        self.unmounter.clone()
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
        if let Err(e) = self.unmounter.detach() {
            log::warn!("cannot unmount: {e}");
        }
    }
}
