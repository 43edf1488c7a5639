//! FUSE passthrough on a host mount (`passthrough.io`): which opens of a file may let the
//! kernel read and write the branch file itself, and the backing ids the kernel lent for
//! them, one per node while any handle of it is open. The kernel's rules (fs/fuse/iomode.c)
//! shape the table: every open of a node with a backing must use that same backing, and a
//! node open through the daemon (its page cache) can get no passthrough open beside it.
//! Registering a file is the transport's business (a [`BackingRegistrar`]); a vhost-user
//! device never sets one, and nothing here talks to a device itself.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::fs::options::{PassthroughIo, UnionOptions};
use crate::sync::recover;
use crate::sys::abi::fuse::PASSTHROUGH;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    recover(m.lock())
}

/// Lends branch files to the kernel of a FUSE connection (`FUSE_DEV_IOC_BACKING_OPEN` and
/// `_CLOSE` on a /dev/fuse descriptor).
pub trait BackingRegistrar: Send + Sync {
    /// Registers `file` (an open regular file), returning its backing id.
    fn open(&self, file: BorrowedFd<'_>) -> io::Result<u32>;
    /// Gives back backing id `id` (files opened with it keep it until they close).
    fn close(&self, id: u32) -> io::Result<()>;
}

/// Whether an open may use passthrough.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// Yes.
    Yes,
    /// `passthrough.io` does not cover its access mode: served by the daemon, nothing said.
    NotCovered,
    /// No, for this reason (logged once).
    No(&'static str),
}

/// Whether an open with guest flags `flags` (`O_ACCMODE` bits and the rest) may use
/// passthrough under `opts`, for a file that `ro_cow` (on an RO branch with `cow` on: its
/// first write would move it to another branch).
pub fn wanted(opts: &UnionOptions, flags: i32, ro_cow: bool) -> Want {
    let accmode = flags & libc::O_ACCMODE;
    if !opts.passthrough_io.covers(accmode) {
        return Want::NotCovered;
    }
    if opts.nullrw {
        return Want::No("nullrw=true: reads and writes must reach the daemon to be dropped");
    }
    if opts.direct_io || opts.cache_files == crate::fs::options::CacheFiles::Off {
        return Want::No("direct I/O (direct-io=true or cache.files=off) overrides passthrough");
    }
    if opts.moveonenospc.is_some() && accmode != libc::O_RDONLY {
        return Want::No(
            "moveonenospc needs to see a write's ENOSPC, which passthrough keeps from the daemon",
        );
    }
    if ro_cow {
        return Want::No("a copy-on-write file not yet copied up moves on its first write");
    }
    Want::Yes
}

/// The open handles of one node.
#[derive(Debug, Default)]
struct NodeOpens {
    /// How many handles.
    handles: u32,
    /// The backing id they use (all or none).
    backing: Option<u32>,
}

/// The handles and backing ids of the session.
#[derive(Debug, Default)]
struct Table {
    nodes: HashMap<u64, NodeOpens>,
    /// Each open handle's node.
    handles: HashMap<u64, u64>,
}

/// Passthrough for one union: the registrar, what INIT settled, the table.
#[derive(Default)]
pub struct Passthrough {
    registrar: OnceLock<Arc<dyn BackingRegistrar>>,
    /// FUSE_PASSTHROUGH was enabled at the last INIT.
    on: AtomicBool,
    table: Mutex<Table>,
    /// Reasons already logged.
    said: Mutex<HashSet<String>>,
}

impl Passthrough {
    /// Gives the union the connection's registrar (a host mount, before it serves).
    pub fn set_registrar(&self, r: Arc<dyn BackingRegistrar>) {
        let _ = self.registrar.set(r);
    }

    /// INIT: the flag to enable for a kernel offering `offered` under `mode`; records
    /// whether passthrough is on.
    pub fn init(&self, mode: PassthroughIo, offered: u64) -> u64 {
        let on = mode != PassthroughIo::Off
            && self.registrar.get().is_some()
            && if offered & PASSTHROUGH == 0 {
                log::warn!("passthrough.io: the kernel does not offer FUSE passthrough (Linux 6.9, CONFIG_FUSE_PASSTHROUGH); files are served by the daemon");
                false
            } else {
                true
            };
        self.on.store(on, Ordering::Relaxed);
        if on {
            log::info!("FUSE passthrough on for {mode:?} opens");
            PASSTHROUGH
        } else {
            0
        }
    }

    /// The INIT flag in force.
    pub fn bits(&self) -> u64 {
        if self.on.load(Ordering::Relaxed) {
            PASSTHROUGH
        } else {
            0
        }
    }

    /// Records handle `fh` of node `node`, open on `file`, and returns the backing id it
    /// is to use, if any: `want`'s answer, except that a node already open with a backing
    /// keeps using it (the kernel refuses any other open of it) and a node already open
    /// through the daemon gets none.
    pub fn opened(&self, fh: u64, node: u64, file: BorrowedFd<'_>, want: Want) -> Option<u32> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        let mut t = lock(&self.table);
        let opens = t.nodes.entry(node).or_default();
        let id = match (opens.backing, want) {
            (Some(id), Want::Yes | Want::NotCovered) => Some(id),
            (Some(id), Want::No(why)) => {
                self.say(format!("{why}, but the file is open with passthrough already, which its every open must then use"));
                Some(id)
            }
            (None, Want::NotCovered) => None,
            (None, Want::No(why)) => {
                self.say(format!("{why}: such files are served by the daemon"));
                None
            }
            (None, Want::Yes) if opens.handles > 0 => {
                log::debug!(
                    "passthrough: node {node} is open through the daemon: none for this open"
                );
                None
            }
            (None, Want::Yes) => match self.registrar.get().map(|r| r.open(file)) {
                Some(Ok(id)) => {
                    opens.backing = Some(id);
                    Some(id)
                }
                Some(Err(e)) => {
                    self.say(refusal(&e));
                    None
                }
                None => None,
            },
        };
        opens.handles += 1;
        t.handles.insert(fh, node);
        id
    }

    /// Handle `fh` is released (before its number may be reused): the node's backing id
    /// goes back with its last handle.
    pub fn released(&self, fh: u64) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let mut t = lock(&self.table);
        let Some(node) = t.handles.remove(&fh) else {
            return;
        };
        let Some(opens) = t.nodes.get_mut(&node) else {
            return;
        };
        opens.handles -= 1;
        if opens.handles == 0 {
            let backing = opens.backing;
            t.nodes.remove(&node);
            if let Some(id) = backing {
                self.close(id);
            }
        }
    }

    /// The session ended: every backing id goes back.
    pub fn clear(&self) {
        let mut t = lock(&self.table);
        t.handles.clear();
        for (_, opens) in t.nodes.drain() {
            if let Some(id) = opens.backing {
                self.close(id);
            }
        }
    }

    fn close(&self, id: u32) {
        if let Some(Err(e)) = self.registrar.get().map(|r| r.close(id)) {
            log::warn!("passthrough: cannot close backing id {id}: {e}");
        }
    }

    /// Logs `why` the first time.
    fn say(&self, why: String) {
        if lock(&self.said).insert(why.clone()) {
            log::info!("passthrough.io: {why}");
        }
    }
}

/// The reason a registration failed, as logged.
fn refusal(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EPERM) => {
            "registering a backing file needs CAP_SYS_ADMIN: files are served by the daemon".into()
        }
        Some(libc::ELOOP) => "a branch on a stacked filesystem (overlayfs, FUSE) is deeper than max_stack_depth 1: its files are served by the daemon".into(),
        _ => format!("the kernel refused a backing file ({e}): such files are served by the daemon"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[derive(Default)]
    struct Fake {
        next: AtomicU32,
        closed: Mutex<Vec<u32>>,
    }

    impl BackingRegistrar for Fake {
        fn open(&self, _: BorrowedFd<'_>) -> io::Result<u32> {
            Ok(self.next.fetch_add(1, Ordering::Relaxed) + 1)
        }
        fn close(&self, id: u32) -> io::Result<()> {
            lock(&self.closed).push(id);
            Ok(())
        }
    }

    fn rw() -> UnionOptions {
        UnionOptions {
            passthrough_io: PassthroughIo::Rw,
            ..Default::default()
        }
    }

    #[test]
    fn modes_and_the_options_that_turn_it_off() {
        let mut o = UnionOptions::default();
        assert_eq!(wanted(&o, libc::O_RDONLY, false), Want::NotCovered);
        o.passthrough_io = PassthroughIo::Ro;
        assert_eq!(wanted(&o, libc::O_RDONLY, false), Want::Yes);
        assert_eq!(wanted(&o, libc::O_RDWR, false), Want::NotCovered);
        o.passthrough_io = PassthroughIo::Wo;
        assert_eq!(wanted(&o, libc::O_WRONLY | libc::O_TRUNC, false), Want::Yes);
        assert_eq!(wanted(&o, libc::O_RDONLY, false), Want::NotCovered);
        let mut o = rw();
        assert_eq!(wanted(&o, libc::O_RDWR, false), Want::Yes);
        assert!(matches!(wanted(&o, libc::O_RDONLY, true), Want::No(_)));
        o.moveonenospc = Some(crate::union::policy::Policy::Mfs);
        assert_eq!(wanted(&o, libc::O_RDONLY, false), Want::Yes);
        assert!(matches!(wanted(&o, libc::O_WRONLY, false), Want::No(_)));
        let mut o = rw();
        o.nullrw = true;
        assert!(matches!(wanted(&o, libc::O_RDONLY, false), Want::No(_)));
        let mut o = rw();
        o.direct_io = true;
        assert!(matches!(wanted(&o, libc::O_RDONLY, false), Want::No(_)));
    }

    #[test]
    fn a_node_shares_one_backing_until_its_last_handle_goes() {
        let p = Passthrough::default();
        let fake = Arc::new(Fake::default());
        p.set_registrar(fake.clone());
        assert_eq!(p.init(PassthroughIo::Rw, 0), 0);
        let f = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsFd;
        assert_eq!(p.opened(1, 7, f.as_fd(), Want::Yes), None, "not negotiated");
        assert_eq!(p.init(PassthroughIo::Rw, PASSTHROUGH), PASSTHROUGH);
        assert_eq!(p.opened(1, 7, f.as_fd(), Want::Yes), Some(1));
        // Any later open of the node uses the same backing, even one not covered.
        assert_eq!(p.opened(2, 7, f.as_fd(), Want::NotCovered), Some(1));
        assert_eq!(p.opened(3, 7, f.as_fd(), Want::No("x")), Some(1));
        p.released(1);
        p.released(2);
        assert!(lock(&fake.closed).is_empty());
        p.released(3);
        assert_eq!(*lock(&fake.closed), [1]);
        // A node open through the daemon gets no passthrough open beside it.
        assert_eq!(p.opened(4, 8, f.as_fd(), Want::NotCovered), None);
        assert_eq!(p.opened(5, 8, f.as_fd(), Want::Yes), None);
        p.released(4);
        p.released(5);
        assert_eq!(p.opened(6, 8, f.as_fd(), Want::Yes), Some(2));
        p.clear();
        assert_eq!(*lock(&fake.closed), [1, 2]);
    }
}
