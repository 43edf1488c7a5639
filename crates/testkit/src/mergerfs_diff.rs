//! Differential harness: runs one scenario on a real mergerfs FUSE mount, through our
//! `UnionFs`, and on our host mount (`mount_ops`), each over fresh tmpfs branches, and records
//! what can be compared (per-operation results with errno names, and what each branch holds
//! afterwards). It never mounts anything outside its own temporary directories and never
//! skips: a missing mergerfs is a failure.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::calls::Calls;
use fuse_backend_rs::abi::fuse_abi::SetattrValid;
use tempfile::TempDir;
use union_virtiofsd::fs::{UnionFs, ROOT_ID};

// `io(r)`: a host or union result as the scenario records it.
use crate::errno::{self, result as io};
use crate::fsharness::{c, create_with, ctx, list, read_file, union_with, walk, SliceReader};
use crate::tmpfs::Tmpfs;
use crate::tree;

/// Options both sides get before the scenario's own: no kernel caching on the mergerfs side,
/// so every operation reaches the daemon and sees the branches as they are now.
pub const DETERMINISTIC: &str =
    "cache.files=off,cache.attr=0,cache.entry=0,cache.negative_entry=0,cache.statfs=0";

/// How long a mergerfs mount may take to appear in /proc/self/mounts.
const MOUNT_DEADLINE: Duration = Duration::from_secs(10);

/// A result as the scenario records it: the value or the errno.
pub type R<T> = Result<T, i32>;

/// A filesystem size summary in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Statfs {
    /// `f_blocks * f_frsize`.
    pub total: u64,
    /// `f_bavail * f_frsize`.
    pub avail: u64,
}

/// What a scenario can do to a union, by slash-separated path relative to its root.
pub trait Ops {
    /// Creates a new regular file (O_CREAT|O_EXCL, mode 0644) holding `data`.
    fn create(&self, path: &str, data: &[u8]) -> R<()>;
    /// Creates a directory with `mode`.
    fn mkdir(&self, path: &str, mode: u32) -> R<()>;
    /// Creates a symlink at `path` pointing at `target`.
    fn symlink(&self, target: &str, path: &str) -> R<()>;
    /// Removes a non-directory.
    fn unlink(&self, path: &str) -> R<()>;
    /// Removes an empty directory.
    fn rmdir(&self, path: &str) -> R<()>;
    /// Sets permission bits.
    fn chmod(&self, path: &str, mode: u32) -> R<()>;
    /// Truncates by path.
    fn truncate(&self, path: &str, len: u64) -> R<()>;
    /// Sets an extended attribute.
    fn setxattr(&self, path: &str, name: &str, value: &[u8]) -> R<()>;
    /// rename(2) without flags.
    fn rename(&self, from: &str, to: &str) -> R<()>;
    /// link(2).
    fn link(&self, from: &str, to: &str) -> R<()>;
    /// Opens an existing file for writing and writes `data` from offset 0 in `chunk`-byte
    /// writes (as a guest's page cache would send them).
    fn write_chunks(&self, path: &str, data: &[u8], chunk: usize) -> R<()>;
    /// Reads a whole file (as text, lossily, so traces read well).
    fn read(&self, path: &str) -> R<String>;
    /// Directory names in the order readdir returns them, without `.` and `..`.
    fn read_dir(&self, path: &str) -> R<Vec<String>>;
    /// Permission bits, in octal.
    fn mode(&self, path: &str) -> R<String>;
    /// statfs of the root.
    fn statfs(&self) -> R<Statfs>;
    /// Sets runtime option `key` (mergerfs's name, with or without `user.mergerfs.`) to
    /// `value`: on mergerfs by setxattr on `<mount>/.mergerfs`, on ours by `ctl_set`. `{i}` in
    /// `value` stands for branch `i`'s root on this side (see [`place`]).
    fn set_option(&self, key: &str, value: &str) -> R<()>;
    /// Reads runtime option `key`: on mergerfs by getxattr on `<mount>/.mergerfs`, on ours by
    /// `ctl_get`. This side's branch roots in the value are shown as `{i}` (see [`unplace`]).
    fn get_option(&self, key: &str) -> R<String>;
}

/// mergerfs's runtime control file, relative to the mount point.
pub const CONTROL_FILE: &str = ".mergerfs";

/// The prefix mergerfs's runtime keys carry as xattr names.
pub const KEY_PREFIX: &str = "user.mergerfs.";

/// `value` with every `{i}` replaced by branch `i`'s root in `roots`, so that one scenario
/// names the same branch on both sides (each has its own tmpfs directories).
pub fn place(value: &str, roots: &[PathBuf]) -> String {
    let mut out = value.to_string();
    for (i, r) in roots.iter().enumerate() {
        out = out.replace(&format!("{{{i}}}"), r.to_str().unwrap());
    }
    out
}

/// The inverse of [`place`]: every branch root of `roots` in `value` written as `{i}`.
pub fn unplace(value: &str, roots: &[PathBuf]) -> String {
    let mut order: Vec<usize> = (0..roots.len()).collect();
    // Longest first, so that a root that is a prefix of another does not take its place.
    order.sort_by_key(|&i| std::cmp::Reverse(roots[i].as_os_str().len()));
    let mut out = value.to_string();
    for i in order {
        out = out.replace(roots[i].to_str().unwrap(), &format!("{{{i}}}"));
    }
    out
}

/// Whether `mnt` is currently a mount point whose type starts with `fstype`.
fn mounted_as(mnt: &Path, fstype: &str) -> bool {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    let want = mnt.to_str().unwrap();
    mounts.lines().any(|l| {
        let mut f = l.split(' ');
        let (_, point, ty) = (f.next(), f.next(), f.next());
        point == Some(want) && ty.is_some_and(|t| t.starts_with(fstype))
    })
}

/// A mergerfs process run in the foreground (`-f`) as our child over a fresh mount point:
/// on drop the mount is unmounted and the child reaped, so the branches are no longer busy.
pub struct Mergerfs {
    mnt: TempDir,
    child: Child,
    log: tempfile::NamedTempFile,
}

impl Mergerfs {
    /// Mounts mergerfs with `-o options` over `branches` (`path=MODE` strings).
    pub fn mount(options: &str, branches: &[String]) -> Mergerfs {
        let mnt = tempfile::tempdir().unwrap();
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut cmd = Command::new("mergerfs");
        // SAFETY: setrlimit is async-signal-safe and touches no memory of ours. A scenario
        // that crashes mergerfs (2.33 dies on some runtime settings) leaves no core file.
        unsafe {
            cmd.pre_exec(|| {
                let none = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::setrlimit(libc::RLIMIT_CORE, &none) == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            });
        }
        let child = cmd
            .arg("-f")
            .arg("-o")
            .arg(options)
            .arg(branches.join(":"))
            .arg(mnt.path())
            .stdin(Stdio::null())
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run mergerfs ({e}): these tests compare against a real mergerfs; \
                     install it with `apt-get install -y mergerfs fuse3`"
                )
            });
        let mut m = Mergerfs { mnt, child, log };
        let deadline = Instant::now() + MOUNT_DEADLINE;
        while !mounted_as(m.mnt.path(), "fuse.mergerfs") {
            if let Some(st) = m.child.try_wait().unwrap() {
                panic!(
                    "mergerfs -o {options} exited with {st} before mounting: {}",
                    m.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "mergerfs did not mount {} within {MOUNT_DEADLINE:?}",
                m.mnt.path().display()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        m
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.mnt.path()
    }

    /// What mergerfs printed.
    pub fn log_text(&self) -> String {
        fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for Mergerfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.mnt.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.mnt.path())
                .status();
        }
        // mergerfs exits once its mount is gone; a bounded wait, then our own child is killed.
        let deadline = Instant::now() + MOUNT_DEADLINE;
        while self.child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// `Ops` through a mounted mergerfs with std::fs and libc.
pub struct HostOps<'a> {
    /// The mount point.
    pub mnt: &'a Path,
    /// Every branch root of the scenario (in the union or not), for `{i}`.
    pub roots: &'a [PathBuf],
}

impl HostOps<'_> {
    fn p(&self, path: &str) -> PathBuf {
        self.mnt.join(path)
    }

    fn key(key: &str) -> CString {
        if key.starts_with(KEY_PREFIX) {
            c(key)
        } else {
            c(&format!("{KEY_PREFIX}{key}"))
        }
    }

    fn cp(&self, path: &str) -> CString {
        CString::new(self.p(path).as_os_str().as_bytes()).unwrap()
    }
}

fn libc_result(ret: libc::c_int) -> R<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(errno::last())
    }
}

impl Ops for HostOps<'_> {
    fn write_chunks(&self, path: &str, data: &[u8], chunk: usize) -> R<()> {
        let f = io(fs::OpenOptions::new().write(true).open(self.p(path)))?;
        let mut off = 0u64;
        for c in data.chunks(chunk) {
            io(std::os::unix::fs::FileExt::write_all_at(&f, c, off))?;
            off += c.len() as u64;
        }
        Ok(())
    }
    fn create(&self, path: &str, data: &[u8]) -> R<()> {
        let mut f = io(fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(self.p(path)))?;
        io(f.write_all(data))
    }
    fn mkdir(&self, path: &str, mode: u32) -> R<()> {
        io(fs::DirBuilder::new().mode(mode).create(self.p(path)))
    }
    fn symlink(&self, target: &str, path: &str) -> R<()> {
        io(std::os::unix::fs::symlink(target, self.p(path)))
    }
    fn unlink(&self, path: &str) -> R<()> {
        io(fs::remove_file(self.p(path)))
    }
    fn rmdir(&self, path: &str) -> R<()> {
        io(fs::remove_dir(self.p(path)))
    }
    fn chmod(&self, path: &str, mode: u32) -> R<()> {
        io(fs::set_permissions(
            self.p(path),
            fs::Permissions::from_mode(mode),
        ))
    }
    fn truncate(&self, path: &str, len: u64) -> R<()> {
        // SAFETY: a valid NUL-terminated path.
        libc_result(unsafe { libc::truncate(self.cp(path).as_ptr(), len as libc::off_t) })
    }
    fn setxattr(&self, path: &str, name: &str, value: &[u8]) -> R<()> {
        let n = c(name);
        // SAFETY: valid NUL-terminated strings and a buffer of the given length.
        libc_result(unsafe {
            libc::lsetxattr(
                self.cp(path).as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        })
    }
    fn rename(&self, from: &str, to: &str) -> R<()> {
        io(fs::rename(self.p(from), self.p(to)))
    }
    fn link(&self, from: &str, to: &str) -> R<()> {
        io(fs::hard_link(self.p(from), self.p(to)))
    }
    fn read(&self, path: &str) -> R<String> {
        io(fs::read(self.p(path))).map(|v| String::from_utf8_lossy(&v).into_owned())
    }
    fn read_dir(&self, path: &str) -> R<Vec<String>> {
        let mut out = Vec::new();
        for e in io(fs::read_dir(self.p(path)))? {
            out.push(io(e)?.file_name().to_string_lossy().into_owned());
        }
        Ok(out)
    }
    fn mode(&self, path: &str) -> R<String> {
        Ok(format!(
            "{:o}",
            io(fs::symlink_metadata(self.p(path)))?.mode() & 0o7777
        ))
    }
    fn statfs(&self) -> R<Statfs> {
        statvfs(self.mnt)
    }
    fn set_option(&self, key: &str, value: &str) -> R<()> {
        let v = place(value, self.roots);
        let (file, name) = (self.cp(CONTROL_FILE), Self::key(key));
        // SAFETY: valid NUL-terminated strings and a buffer of the given length.
        libc_result(unsafe {
            libc::setxattr(file.as_ptr(), name.as_ptr(), v.as_ptr().cast(), v.len(), 0)
        })
    }
    fn get_option(&self, key: &str) -> R<String> {
        let (file, name) = (self.cp(CONTROL_FILE), Self::key(key));
        let mut buf = vec![0u8; 4096];
        loop {
            // SAFETY: valid NUL-terminated strings and a buffer we own of the given length.
            let n = unsafe {
                libc::getxattr(
                    file.as_ptr(),
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n >= 0 {
                buf.truncate(n as usize);
                let v = String::from_utf8_lossy(&buf).into_owned();
                return Ok(unplace(&v, self.roots));
            }
            match errno::last() {
                libc::ERANGE => buf.resize(buf.len() * 4, 0),
                e => return Err(e),
            }
        }
    }
}

/// statvfs(3) of a host path, in bytes.
pub fn statvfs(path: &Path) -> R<Statfs> {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs is plain data; zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and a pointer to a statvfs we own.
    libc_result(unsafe { libc::statvfs(p.as_ptr(), &mut st) })?;
    Ok(Statfs {
        total: st.f_blocks * st.f_frsize,
        avail: st.f_bavail * st.f_frsize,
    })
}

/// `Ops` through our `UnionFs`, looking paths up one component at a time as a guest kernel does.
pub struct UnionOps<'a> {
    /// The union.
    pub fs: UnionFs,
    /// Every branch root of the scenario (in the union or not), for `{i}`.
    pub roots: &'a [PathBuf],
}

fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

impl UnionOps<'_> {
    fn ino(&self, path: &str) -> R<u64> {
        if path.is_empty() || path == "." {
            return Ok(ROOT_ID);
        }
        Ok(io(walk(&self.fs, path))?.inode)
    }

    fn parent(&self, path: &str) -> R<(u64, CString)> {
        let (dir, name) = split(path);
        Ok((self.ino(dir)?, c(name)))
    }

    fn setattr(&self, path: &str, f: impl FnOnce(&mut libc::stat64), valid: SetattrValid) -> R<()> {
        let e = io(walk(&self.fs, path))?;
        let mut st = e.attr;
        f(&mut st);
        io(self.fs.setattr(&ctx(), e.inode, st, None, valid)).map(|_| ())
    }
}

impl UnionOps<'_> {
    /// Resolves `path` as the guest kernel's path walk does through the share: symlinks met on
    /// the way (as FUSE symlink nodes) are read and followed, relative ones from their
    /// directory, up to 40 hops (then ELOOP).
    fn follow(&self, path: &str) -> R<u64> {
        let mut todo: std::collections::VecDeque<String> = path
            .split('/')
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect();
        let mut done: Vec<String> = Vec::new();
        let mut hops = 0;
        while let Some(part) = todo.pop_front() {
            match part.as_str() {
                "." => continue,
                ".." => {
                    done.pop();
                    continue;
                }
                _ => {}
            }
            let here = if done.is_empty() {
                part.clone()
            } else {
                format!("{}/{part}", done.join("/"))
            };
            let e = io(walk(&self.fs, &here))?;
            if e.attr.st_mode & libc::S_IFMT != libc::S_IFLNK {
                done.push(part);
                continue;
            }
            hops += 1;
            if hops > 40 {
                return Err(libc::ELOOP);
            }
            let target = io(self.fs.readlink(&ctx(), e.inode))?;
            let target = String::from_utf8_lossy(&target).into_owned();
            if target.starts_with('/') {
                done.clear();
            }
            for p in target.split('/').filter(|p| !p.is_empty()).rev() {
                todo.push_front(p.to_owned());
            }
        }
        self.ino(&done.join("/"))
    }
}

impl Ops for UnionOps<'_> {
    fn write_chunks(&self, path: &str, data: &[u8], chunk: usize) -> R<()> {
        let ino = self.ino(path)?;
        let (fh, _, _) = io(self.fs.open(&ctx(), ino, libc::O_WRONLY as u32, 0))?;
        let fh = fh.expect("open gives a handle");
        let mut result = Ok(());
        for (i, c) in data.chunks(chunk).enumerate() {
            let r = &mut SliceReader(c.to_vec(), 0);
            let off = (i * chunk) as u64;
            let w = self
                .fs
                .write(&ctx(), ino, fh, r, c.len() as u32, off, None, false, 0, 0);
            match io(w) {
                Ok(n) if n == c.len() => {}
                Ok(_) => {
                    result = Err(libc::EIO);
                    break;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        io(self.fs.release(&ctx(), ino, 0, fh, false, false, None))?;
        result
    }
    fn create(&self, path: &str, data: &[u8]) -> R<()> {
        let (parent, name) = self.parent(path)?;
        // The guest kernel looks the name up first; an existing one never reaches CREATE.
        if self.fs.lookup(&ctx(), parent, &name).is_ok() {
            return Err(libc::EEXIST);
        }
        let flags = (libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL) as u32;
        io(create_with(&self.fs, parent, &name, flags, data)).map(drop)
    }
    fn mkdir(&self, path: &str, mode: u32) -> R<()> {
        let (parent, name) = self.parent(path)?;
        io(self.fs.mkdir(&ctx(), parent, &name, mode, 0)).map(|_| ())
    }
    fn symlink(&self, target: &str, path: &str) -> R<()> {
        let (parent, name) = self.parent(path)?;
        io(self.fs.symlink(&ctx(), &c(target), parent, &name)).map(|_| ())
    }
    fn unlink(&self, path: &str) -> R<()> {
        let (parent, name) = self.parent(path)?;
        io(self.fs.unlink(&ctx(), parent, &name))
    }
    fn rmdir(&self, path: &str) -> R<()> {
        let (parent, name) = self.parent(path)?;
        io(self.fs.rmdir(&ctx(), parent, &name))
    }
    fn chmod(&self, path: &str, mode: u32) -> R<()> {
        self.setattr(
            path,
            |st| st.st_mode = (st.st_mode & libc::S_IFMT) | mode,
            SetattrValid::MODE,
        )
    }
    fn truncate(&self, path: &str, len: u64) -> R<()> {
        self.setattr(path, |st| st.st_size = len as i64, SetattrValid::SIZE)
    }
    fn setxattr(&self, path: &str, name: &str, value: &[u8]) -> R<()> {
        let ino = self.ino(path)?;
        io(self.fs.setxattr(&ctx(), ino, &c(name), value, 0))
    }
    fn rename(&self, from: &str, to: &str) -> R<()> {
        let (od, on) = self.parent(from)?;
        // The guest kernel resolves the source before the destination's parent.
        io(self.fs.lookup(&ctx(), od, &on))?;
        let (nd, nn) = self.parent(to)?;
        io(self.fs.rename(&ctx(), od, &on, nd, &nn, 0))
    }
    fn link(&self, from: &str, to: &str) -> R<()> {
        let src = self.ino(from)?;
        let (nd, nn) = self.parent(to)?;
        if self.fs.lookup(&ctx(), nd, &nn).is_ok() {
            return Err(libc::EEXIST);
        }
        io(self.fs.link(&ctx(), src, nd, &nn)).map(|_| ())
    }
    fn read(&self, path: &str) -> R<String> {
        let ino = self.follow(path)?;
        io(read_file(&self.fs, ino)).map(|v| String::from_utf8_lossy(&v).into_owned())
    }
    fn read_dir(&self, path: &str) -> R<Vec<String>> {
        let ino = self.ino(path)?;
        Ok(list(&self.fs, ino)
            .into_iter()
            .map(|(n, _)| n)
            .filter(|n| n != "." && n != "..")
            .collect())
    }
    fn mode(&self, path: &str) -> R<String> {
        Ok(format!(
            "{:o}",
            io(walk(&self.fs, path))?.attr.st_mode & 0o7777
        ))
    }
    fn statfs(&self) -> R<Statfs> {
        let st = io(self.fs.statfs(&ctx(), ROOT_ID))?;
        Ok(Statfs {
            total: st.f_blocks * st.f_frsize,
            avail: st.f_bavail * st.f_frsize,
        })
    }
    fn set_option(&self, key: &str, value: &str) -> R<()> {
        // No directories passed: the union opens the branches an edit adds by path.
        self.fs
            .ctl_set(key, &place(value, self.roots), Vec::new())
            .map(drop)
            .map_err(|e| e.errno)
    }
    fn get_option(&self, key: &str) -> R<String> {
        self.fs
            .ctl_get(key)
            .map(|v| unplace(&v, self.roots))
            .map_err(|e| e.errno)
    }
}

/// One branch of a scenario: tmpfs size, mergerfs mode string (`RW`, `RO`, `NC`, `RW,10M`) and
/// how many bytes to pre-fill it with (a file `fill` at its root), so space policies have a
/// unique answer. A spare branch ([`spare`]) is made and set up like the others but starts
/// outside the union, for a runtime edit to add (as `{i}`, see [`Ops::set_option`]).
#[derive(Clone, Copy, Debug)]
pub struct BranchSpec {
    /// tmpfs size.
    pub size: &'static str,
    /// Branch mode as mergerfs writes it (unused for a spare branch: its edit gives it).
    pub mode: &'static str,
    /// Bytes written to `fill` before the scenario.
    pub fill: usize,
    /// Whether it starts outside the union.
    pub spare: bool,
}

/// A branch spec.
pub const fn br(size: &'static str, mode: &'static str, fill: usize) -> BranchSpec {
    BranchSpec {
        size,
        mode,
        fill,
        spare: false,
    }
}

/// A spare branch: a tmpfs of `size` holding `fill` bytes that is not in the union when the
/// scenario starts. Branch indices count every branch, spare or not, so `{i}` and
/// [`Outcome::branches`] name it as `i` whether it is in the union or not.
pub const fn spare(size: &'static str, fill: usize) -> BranchSpec {
    BranchSpec {
        size,
        mode: "",
        fill,
        spare: true,
    }
}

/// One mebibyte.
pub const MIB: usize = 1 << 20;

/// Helpers for setting branches up before a scenario runs.
pub struct Setup<'a> {
    /// Branch roots, in order (spare branches included).
    pub roots: &'a [PathBuf],
}

impl Setup<'_> {
    /// Directory `path` on branch `b` with exactly `mode`; missing parents are made 0755.
    pub fn dir(&self, b: usize, path: &str, mode: u32) {
        let p = self.roots[b].join(path);
        if let Some(parent) = p.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .unwrap();
        }
        fs::DirBuilder::new().mode(mode).create(&p).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }
    /// A file at `path` on branch `b` (its parent must exist).
    pub fn file(&self, b: usize, path: &str, data: &str) {
        let p = self.roots[b].join(path);
        fs::write(&p, data).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    }
    /// Sets the modification time of `path` on branch `b` to `secs` after the epoch.
    pub fn mtime(&self, b: usize, path: &str, secs: u64) {
        self.mtime_nanos(b, path, secs, 0);
    }
    /// Sets `path`'s modification time on branch `b` to `secs` seconds and `nanos`.
    pub fn mtime_nanos(&self, b: usize, path: &str, secs: u64, nanos: u32) {
        let f = fs::File::open(self.roots[b].join(path)).unwrap();
        f.set_modified(SystemTime::UNIX_EPOCH + Duration::new(secs, nanos))
            .unwrap();
    }
    /// Sets `path`'s permission bits on branch `b`.
    pub fn chmod(&self, b: usize, path: &str, mode: u32) {
        fs::set_permissions(self.roots[b].join(path), fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// The observable record of one scenario run on one side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// `label: result` for each recorded operation, in order.
    pub trace: Vec<String>,
    /// Per branch (spare ones included, whether or not an edit added them), every entry
    /// below the root: path → description.
    pub branches: Vec<BTreeMap<String, String>>,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.trace {
            writeln!(f, "  {t}")?;
        }
        for (i, b) in self.branches.iter().enumerate() {
            writeln!(f, "  branch {i}:")?;
            for (p, d) in b {
                writeln!(f, "    {p} {d}")?;
            }
        }
        Ok(())
    }
}

impl Outcome {
    /// The branches holding `path`.
    pub fn holders(&self, path: &str) -> Vec<usize> {
        (0..self.branches.len())
            .filter(|&b| self.branches[b].contains_key(path))
            .collect()
    }
}

/// Records the results of a scenario's operations.
#[derive(Default)]
pub struct Trace(pub Vec<String>);

impl Trace {
    /// Records `label: Ok(value)` or `label: ERRNO`.
    pub fn rec<T: fmt::Debug>(&mut self, label: &str, r: R<T>) -> R<T> {
        let s = match &r {
            Ok(v) => format!("{label}: Ok({v:?})"),
            Err(e) => format!("{label}: {}", errno::name(*e)),
        };
        self.0.push(s);
        r
    }

    /// Records a free-form observation.
    pub fn note(&mut self, s: String) {
        self.0.push(s);
    }
}

/// Every entry below `root`: relative path → `kind mode [content] [user xattrs]`.
pub fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let walk = tree::Walk {
        xattrs: &["user."],
        ..tree::Walk::default()
    };
    walk.snapshot(root)
        .into_iter()
        .map(|(rel, n)| (rel, describe(&n)))
        .collect()
}

/// `dir 755`, `symlink -> target`, `file 644 "short content"` or `file 644 len=N`, then the
/// xattrs as `["name=value", ...]` if there are any.
fn describe(n: &tree::Node) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mode = n.mode;
    let body = match n.kind {
        tree::Kind::Dir => format!("dir {mode:o}"),
        tree::Kind::Symlink => format!("symlink -> {}", text(&n.data)),
        _ if n.data.len() > 64 => format!("file {mode:o} len={}", n.data.len()),
        _ => format!("file {mode:o} {:?}", text(&n.data)),
    };
    if n.xattrs.is_empty() {
        return body;
    }
    let x: Vec<String> = n
        .xattrs
        .iter()
        .map(|(k, v)| format!("{k}={}", text(v)))
        .collect();
    format!("{body} {x:?}")
}

/// A scenario: branches, the `-o` options both sides get (after [`DETERMINISTIC`]), how the
/// branches start, and what is done through the union.
pub struct Scenario<'a> {
    /// Branches in order.
    pub branches: &'a [BranchSpec],
    /// mergerfs `-o` options, also given to our registry.
    pub options: &'a str,
    /// Prepares the fresh branches (after the fill files are written).
    pub setup: &'a dyn Fn(&Setup),
    /// Runs the operations, recording what should match.
    pub run: &'a dyn Fn(&mut Trace, &dyn Ops),
}

/// Which implementation a run went through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The real mergerfs over FUSE.
    Mergerfs,
    /// Our `UnionFs` called directly.
    Ours,
    /// Our daemon mounted on the host (`union-virtiofsd mount`), through the kernel as mergerfs.
    Mount,
}

/// Sets the process umask to 0 once: in the guest the kernel applies the caller's umask and
/// the daemon runs with none, and mergerfs does the same; the scenarios give exact modes.
fn no_umask() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: umask cannot fail and touches no memory.
    ONCE.call_once(|| unsafe {
        libc::umask(0);
    });
}

/// Runs `sc` on fresh branches through `side`.
pub fn run_side(sc: &Scenario, side: Side) -> Outcome {
    no_umask();
    let tmpfs: Vec<Tmpfs> = sc
        .branches
        .iter()
        .map(|b| Tmpfs::with_options(&format!("size={},mode=0755", b.size)))
        .collect();
    let roots: Vec<PathBuf> = tmpfs.iter().map(|t| t.path().to_path_buf()).collect();
    for (b, spec) in sc.branches.iter().enumerate() {
        if spec.fill > 0 {
            fs::write(roots[b].join("fill"), vec![0xa5u8; spec.fill]).unwrap();
            fs::set_permissions(roots[b].join("fill"), fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    (sc.setup)(&Setup { roots: &roots });
    let options = format!("{DETERMINISTIC},{}", sc.options);
    let mut trace = Trace::default();
    match side {
        Side::Mergerfs => {
            let specs: Vec<String> = roots
                .iter()
                .zip(sc.branches)
                .filter(|(_, b)| !b.spare)
                .map(|(r, b)| format!("{}={}", r.display(), b.mode))
                .collect();
            let m = Mergerfs::mount(&options, &specs);
            let ops = HostOps {
                mnt: m.path(),
                roots: &roots,
            };
            (sc.run)(&mut trace, &ops);
        }
        Side::Ours => {
            let specs: Vec<(&Path, &str)> = roots
                .iter()
                .zip(sc.branches)
                .filter(|(_, b)| !b.spare)
                .map(|(r, b)| (r.as_path(), b.mode))
                .collect();
            let fs = union_with(&specs, &options);
            (sc.run)(&mut trace, &UnionOps { fs, roots: &roots });
        }
        Side::Mount => {
            let specs: Vec<String> = roots
                .iter()
                .zip(sc.branches)
                .filter(|(_, b)| !b.spare)
                .map(|(r, b)| format!("{}={}", r.display(), b.mode))
                .collect();
            crate::mount_ops::with_mount(&options, &specs, &roots, |ops| (sc.run)(&mut trace, ops));
        }
    }
    Outcome {
        trace: trace.0,
        branches: roots.iter().map(|r| snapshot(r)).collect(),
    }
}

/// Runs `sc` on both sides and returns (mergerfs, ours).
pub fn run_both(sc: &Scenario) -> (Outcome, Outcome) {
    (run_side(sc, Side::Mergerfs), run_side(sc, Side::Ours))
}

/// Runs `sc` on both sides, and on our host mount, and asserts the outcomes are identical.
pub fn assert_same(name: &str, sc: &Scenario) -> Outcome {
    let (theirs, ours) = run_both(sc);
    let mounted = run_side(sc, Side::Mount);
    assert!(
        theirs == mounted,
        "{name}: outcome on our host mount differs (options {:?})\n--- mergerfs 2.33:\n{theirs}--- our mount:\n{mounted}",
        sc.options
    );
    if std::env::var_os("MERGERFS_DIFF_SHOW").is_some() {
        eprintln!(
            "{name} ({}):\n--- mergerfs 2.33:\n{theirs}--- ours:\n{ours}",
            sc.options
        );
    }
    assert!(
        theirs == ours,
        "{name}: outcome differs (options {:?})\n--- mergerfs 2.33:\n{theirs}--- ours:\n{ours}",
        sc.options
    );
    theirs
}
