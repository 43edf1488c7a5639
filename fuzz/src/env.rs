//! The host side of a fuzzed session: three branch directories and a sentinel directory next to
//! them on one tmpfs, a fixed starting tree in the branches, and the checks that nothing
//! outside the branches changed and that no descriptor was left behind. Knows nothing of FUSE.
//!
//! The tmpfs is mounted `nodev,nosuid` once per process and detached at once (an `O_PATH`
//! descriptor keeps it alive, reached as `/proc/self/fd/N`), so it goes away with the process
//! however libFuzzer ends it. Without the right to mount, a temporary directory stands in.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rustix::fs::{FileType, Mode, OFlags};
use rustix::mount::{MountFlags, UnmountFlags};

/// Branch directory names and modes, in priority order.
pub const BRANCHES: [(&str, &str); 3] = [("b0", "RW"), ("b1", "RW"), ("b2", "RO")];

/// The fuzzing process's branches and sentinel.
pub struct Env {
    base: PathBuf,
    /// Whether `base` is the detached `nodev` tmpfs (else a plain temporary directory, where
    /// the session target must not let the guest create device nodes).
    pub nodev: bool,
    /// The branch roots, in the order of [`BRANCHES`].
    roots: Vec<PathBuf>,
    /// What keeps them alive: the detached tmpfs's descriptors, or the temporary directory.
    _keep: (Vec<OwnedFd>, Option<tempfile::TempDir>),
}

static ENV: OnceLock<Env> = OnceLock::new();

/// The process's environment, made on first use: branches, sentinel, the daemon's umask
/// (none) and capabilities (its serving set, so no CAP_SYS_ADMIN or CAP_LINUX_IMMUTABLE).
pub fn env() -> &'static Env {
    ENV.get_or_init(Env::new)
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::Builder::new()
            .prefix("uvfs-fuzz-")
            .tempdir()
            .expect("temporary directory");
        let flags = MountFlags::NODEV | MountFlags::NOSUID | MountFlags::STRICTATIME;
        let mut roots = Vec::new();
        let mounted = rustix::mount::mount(
            "tmpfs",
            dir.path(),
            "tmpfs",
            flags,
            c"size=32m,nr_inodes=8192,mode=0755",
        );
        let (base, keep, nodev) = match mounted {
            Ok(()) => {
                for (name, _) in BRANCHES {
                    std::fs::create_dir(dir.path().join(name)).expect("branch directory");
                }
                // The second branch on a filesystem of its own, so that moves between branches
                // take the cross-device paths (EXDEV) a real union meets.
                // (Detaching the tree cuts the submount off its parent: the branch is reached
                // through a descriptor of its own.)
                let b1 = dir.path().join(BRANCHES[1].0);
                let second = rustix::mount::mount("tmpfs", &b1, "tmpfs", flags, c"size=8m");
                if let Err(e) = &second {
                    eprintln!("uvfs-fuzz: cannot mount a second tmpfs ({e}): one filesystem");
                }
                let open = |p: &Path| {
                    rustix::fs::open(
                        p,
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .expect("open the tmpfs")
                };
                let fds = vec![open(dir.path()), open(&b1)];
                // Lazily: the trees live on, reachable through `fds` only.
                rustix::mount::unmount(dir.path(), UnmountFlags::DETACH).expect("detach tmpfs");
                let at = |fd: &OwnedFd| PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
                let base = at(&fds[0]);
                for (i, (name, _)) in BRANCHES.iter().enumerate() {
                    roots.push(if i == 1 && second.is_ok() {
                        at(&fds[1])
                    } else {
                        base.join(name)
                    });
                }
                (base, (fds, None), true)
            }
            Err(e) => {
                eprintln!(
                    "uvfs-fuzz: cannot mount a tmpfs ({e}); branches in a temporary directory"
                );
                for (name, _) in BRANCHES {
                    std::fs::create_dir(dir.path().join(name)).expect("branch directory");
                    roots.push(dir.path().join(name));
                }
                (dir.path().to_path_buf(), (Vec::new(), Some(dir)), false)
            }
        };
        let sentinel = base.join("sentinel");
        std::fs::create_dir(&sentinel).expect("sentinel");
        std::fs::write(sentinel.join("keep"), b"must not change").expect("sentinel file");
        std::fs::create_dir(sentinel.join("sub")).expect("sentinel subdirectory");
        // As the daemon's threads: the guest applied the caller's umask already.
        union_virtiofsd::sys::thread::unshare_fs().expect("unshare CLONE_FS");
        union_virtiofsd::sys::thread::set_umask(0);
        if let Err(e) = union_virtiofsd::sys::caps::limit_to(&union_virtiofsd::sys::caps::SERVING) {
            eprintln!("uvfs-fuzz: cannot limit capabilities: {e}");
        }
        Env {
            base,
            nodev,
            roots,
            _keep: keep,
        }
    }

    /// The branch roots, with their modes.
    pub fn branches(&self) -> Vec<(PathBuf, &'static str)> {
        self.roots
            .iter()
            .zip(BRANCHES)
            .map(|(p, (_, m))| (p.clone(), m))
            .collect()
    }

    /// Empties the branches and puts the starting tree back: files, a directory on every
    /// branch, a hard link, a fifo, and symlinks that lead out of the branch.
    pub fn reset(&self) {
        for (root, _) in self.branches() {
            empty(&root);
        }
        let b = |i: usize, rel: &str| self.roots[i].join(rel);
        let sentinel = self.base.join("sentinel");
        for i in 0..3 {
            mkdir(&b(i, "d"), 0o755);
        }
        write(&b(0, "f0"), b"hello, union\n", 0o644);
        write(&b(0, "d/f"), b"data0", 0o600);
        write(&b(0, "x"), b"#!/bin/sh\n", 0o4755);
        link(&b(0, "f0"), &b(0, "hl"));
        symlink("f0", b(0, "link")).expect("symlink");
        symlink("../sentinel", b(0, "esc")).expect("symlink");
        symlink("..", b(0, "up")).expect("symlink");
        symlink(sentinel.join("keep"), b(0, "abs")).expect("symlink");
        symlink("/", b(0, "root")).expect("symlink");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            b(0, "fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .expect("fifo");
        write(&b(1, "d/g"), b"data1", 0o644);
        write(&b(1, "f1"), &[b'x'; 5000], 0o644);
        write(&b(1, "empty"), b"", 0o666);
        mkdir(&b(1, "d/e"), 0o700);
        write(&b(2, "d/h"), b"ro data", 0o644);
        write(&b(2, "ro"), b"read only", 0o444);
        write(&b(2, "f0"), b"shadowed", 0o644);
        mkdir(&b(2, "rodir"), 0o755);
        write(&b(2, "rodir/x"), b"x", 0o644);
    }

    /// What must not change during a session: the directory holding the branches (its entries
    /// and times) and everything in the sentinel directory, access times included (the tmpfs
    /// keeps them strictly, and the harness reads with `O_NOATIME`), so that a read that
    /// escapes a branch shows too.
    pub fn snapshot(&self) -> Snapshot {
        let mut s = BTreeMap::new();
        s.insert(OsString::from("."), meta(&self.base));
        for name in list(&self.base) {
            // The branch roots' own times change with their contents; their names may not.
            let m = if BRANCHES.iter().any(|(n, _)| name == *n) {
                None
            } else {
                meta(&self.base.join(&name))
            };
            s.insert(name, m);
        }
        walk(&self.base.join("sentinel"), "sentinel", &mut s);
        let mut keep = Vec::new();
        if let Ok(fd) = open_noatime(&self.base.join("sentinel/keep"), OFlags::empty()) {
            let _ = std::fs::File::from(fd).read_to_end(&mut keep);
        }
        Snapshot(s, keep)
    }
}

/// Mode, owner, size and the three times of a path (not followed).
type Meta = Option<(u32, u32, u32, u64, [i64; 6])>;

fn meta(p: &Path) -> Meta {
    std::fs::symlink_metadata(p).ok().map(|m| {
        let times = [
            m.atime(),
            m.atime_nsec(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        ];
        (m.mode(), m.uid(), m.gid(), m.size(), times)
    })
}

/// See [`Env::snapshot`].
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot(BTreeMap<OsString, Meta>, Vec<u8>);

fn open_noatime(p: &Path, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    let flags = flags | OFlags::RDONLY | OFlags::NOATIME | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    rustix::fs::open(p, flags, Mode::empty())
}

/// The names in directory `dir`, read without touching its access time.
fn list(dir: &Path) -> Vec<OsString> {
    let Ok(fd) = open_noatime(dir, OFlags::DIRECTORY) else {
        return Vec::new();
    };
    let Ok(entries) = rustix::fs::Dir::read_from(&fd) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| OsString::from_vec(e.file_name().to_bytes().to_vec()))
        .filter(|n| n != "." && n != "..")
        .collect()
}

fn walk(dir: &Path, rel: &str, s: &mut BTreeMap<OsString, Meta>) {
    s.insert(OsString::from(rel), meta(dir));
    for name in list(dir) {
        let path = dir.join(&name);
        let rel = format!("{rel}/{}", name.to_string_lossy());
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            walk(&path, &rel, s);
        } else {
            s.insert(OsString::from(rel), meta(&path));
        }
    }
}

/// The descriptors this process holds.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

fn empty(dir: &Path) {
    // A session may leave a directory without search permission; root's DAC_OVERRIDE reads
    // it anyway, but make the root itself sane again (the guest may chmod it).
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    let _ = rustix::fs::chown(
        dir,
        Some(rustix::fs::Uid::ROOT),
        Some(rustix::fs::Gid::ROOT),
    );
    let mut names = vec![0u8; 65536];
    if let Ok(n) = rustix::fs::listxattr(dir, &mut names[..]) {
        for name in names[..n].split(|&c| c == 0).filter(|n| !n.is_empty()) {
            let _ = rustix::fs::removexattr(dir, name);
        }
    }
    for e in std::fs::read_dir(dir).expect("list branch").flatten() {
        let p = e.path();
        let r = if e.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        r.unwrap_or_else(|err| panic!("harness: cannot remove {}: {err}", p.display()));
    }
}

// The umask is 0 (see `Env::new`): modes are given at creation, without a chmod.
fn mkdir(p: &Path, mode: u32) {
    rustix::fs::mkdir(p, Mode::from_raw_mode(mode)).expect("mkdir");
}

fn write(p: &Path, data: &[u8], mode: u32) {
    let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(p, flags, Mode::from_raw_mode(mode)).expect("create");
    if !data.is_empty() {
        rustix::io::write(&fd, data).expect("write");
    }
}

fn link(from: &Path, to: &Path) {
    std::fs::hard_link(from, to).expect("hard link");
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    /// The second branch is a filesystem of its own, reachable through the detached tree.
    #[test]
    fn second_branch_is_another_filesystem() {
        let e = super::env();
        e.reset();
        let b = e.branches();
        let dev = |p: &std::path::Path| std::fs::metadata(p).unwrap().dev();
        assert_ne!(dev(&b[0].0), dev(&b[1].0));
        assert_eq!(dev(&b[0].0), dev(&b[2].0));
        assert!(b[1].0.join("d/g").exists());
    }

    /// A read of the sentinel shows in the snapshot; taking one does not.
    #[test]
    fn snapshot_sees_reads_but_not_itself() {
        let e = super::env();
        let before = e.snapshot();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(e.snapshot(), before);
        std::fs::read(e.base.join("sentinel/keep")).unwrap();
        assert_ne!(e.snapshot(), before);
    }
}
