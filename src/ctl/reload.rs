//! SIGHUP re-reads `--config` into the running union (through [`crate::config::runtime::reload`]:
//! all or nothing, logged). The file's directory is opened before the sandbox, so a sandboxed
//! daemon can still read the file, even after an editor replaced it; branch paths the file adds
//! must be visible to the daemon (in the namespace sandbox, add them with `ctl`, which passes
//! descriptors).

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use log::{info, warn};
use rustix::fs::{Mode, OFlags};
use signal_hook::consts::SIGHUP;
use signal_hook::iterator::Signals;

use crate::fs::UnionFs;

/// SIGHUP caught, and where the configuration file is.
pub struct Reload {
    signals: Option<Signals>,
    file: Option<ConfigFile>,
}

struct ConfigFile {
    dir: OwnedFd,
    name: OsString,
    path: PathBuf,
}

impl Reload {
    /// Opens `config`'s directory: call before the sandbox.
    pub fn open(config: Option<&Path>) -> std::io::Result<Self> {
        let file = match config {
            None => None,
            Some(path) => {
                let name = path
                    .file_name()
                    .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EISDIR))?
                    .to_owned();
                let parent = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                let dir = rustix::fs::open(
                    parent,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                Some(ConfigFile {
                    dir,
                    name,
                    path: path.to_path_buf(),
                })
            }
        };
        Ok(Reload {
            signals: None,
            file,
        })
    }

    /// Catches SIGHUP from now on (it would end the daemon otherwise): call in the serving
    /// process (the sandbox's supervisor forwards SIGHUP to it), before any thread.
    pub fn catch(&mut self) -> std::io::Result<()> {
        self.signals = Some(Signals::new([SIGHUP])?);
        Ok(())
    }

    /// Re-reads the file on every SIGHUP, on a thread of its own, for as long as the daemon runs.
    pub fn spawn(self, fs: Arc<UnionFs>) {
        let Some(mut signals) = self.signals else {
            return;
        };
        let file = self.file;
        let r = std::thread::Builder::new()
            .name("sighup".into())
            .spawn(move || {
                for _ in signals.forever() {
                    match &file {
                        None => info!("SIGHUP: no --config to re-read"),
                        Some(f) => f.apply(&fs),
                    }
                }
            });
        if let Err(e) = r {
            warn!("SIGHUP: cannot start its thread ({e}); --config is not re-read");
        }
    }
}

impl ConfigFile {
    fn apply(&self, fs: &UnionFs) {
        let shown = self.path.display().to_string();
        let text = rustix::fs::openat(
            &self.dir,
            &self.name,
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(std::io::Error::from)
        .and_then(|fd| {
            let mut s = String::new();
            std::fs::File::from(fd).read_to_string(&mut s)?;
            Ok(s)
        });
        let text = match text {
            Ok(t) => t,
            Err(e) => {
                warn!("SIGHUP: cannot read {shown}: {e}; nothing changed");
                return;
            }
        };
        match crate::config::runtime::reload(fs, &shown, &text) {
            Ok(change) => info!("SIGHUP: re-read {shown}: {change}"),
            Err(e) => warn!("SIGHUP: {e}; nothing changed"),
        }
    }
}
