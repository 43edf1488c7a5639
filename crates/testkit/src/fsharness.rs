//! Test support for driving `UnionFs` directly through the `FileSystem` trait over real
//! directories: zero-copy adapters backed by plain buffers, and small helpers.

use std::ffi::{CStr, CString};
use std::io::{self, Read, Write};
use std::path::Path;

use crate::calls::Calls;
use fuse_backend_rs::abi::fuse_abi::CreateIn;
use fuse_backend_rs::api::filesystem::{Context, DirEntry, Entry, ZeroCopyReader, ZeroCopyWriter};
use fuse_backend_rs::file_traits::FileReadWriteVolatile;
use union_virtiofsd::config::registry::Settings;
use union_virtiofsd::fs::{FsConfig, UnionFs, ROOT_ID};
use union_virtiofsd::sys::file::volatile_slice;
use union_virtiofsd::union::Branch;

/// Collects what the filesystem writes into a reply.
#[derive(Default)]
pub struct VecWriter(pub Vec<u8>);

impl Write for VecWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl ZeroCopyWriter for VecWriter {
    fn write_from(
        &mut self,
        f: &mut dyn FileReadWriteVolatile,
        count: usize,
        off: u64,
    ) -> io::Result<usize> {
        let mut buf = vec![0u8; count];
        let n = f.read_at_volatile(volatile_slice(&mut buf), off)?;
        self.0.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn available_bytes(&self) -> usize {
        usize::MAX
    }
}

/// Feeds a request payload to the filesystem.
pub struct SliceReader(pub Vec<u8>, pub usize);

impl Read for SliceReader {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        let n = (&self.0[self.1..]).read(b)?;
        self.1 += n;
        Ok(n)
    }
}

impl ZeroCopyReader for SliceReader {
    fn read_to(
        &mut self,
        f: &mut dyn FileReadWriteVolatile,
        count: usize,
        off: u64,
    ) -> io::Result<usize> {
        let end = (self.1 + count).min(self.0.len());
        let mut chunk = self.0[self.1..end].to_vec();
        let n = f.write_at_volatile(volatile_slice(&mut chunk), off)?;
        self.1 += n;
        Ok(n)
    }
}

/// A union over `branches` (`(path, "RW")`…) configured by a mergerfs `-o` string, on top of
/// `xattr=passthrough` (mergerfs's default; the daemon's is virtiofsd's `nosys`).
pub fn union_with(branches: &[(&Path, &str)], options: &str) -> UnionFs {
    union_with_ids(branches, options, Default::default())
}

/// A union as [`union_with`] whose guest ids are translated by `ids`.
pub fn union_with_ids(
    branches: &[(&Path, &str)],
    options: &str,
    ids: union_virtiofsd::fs::Ids,
) -> UnionFs {
    // As the daemon's threads: the guest kernel has applied the caller's umask already. This
    // test thread only (its own fs_struct), so other tests keep the process's umask.
    union_virtiofsd::sys::thread::unshare_fs().unwrap();
    union_virtiofsd::sys::thread::set_umask(0);
    let branches = branches
        .iter()
        .map(|(p, m)| format!("{}={}", p.display(), m).parse::<Branch>().unwrap())
        .collect();
    let mut s = Settings::default();
    s.apply("xattr", "passthrough").unwrap();
    s.apply_list(options).unwrap();
    UnionFs::new(FsConfig {
        branches,
        opts: s.opts,
        ids,
    })
    .unwrap()
}

/// The union of the issue-2 semantics: new entries go to the first RW branch that has the
/// parent (`epff`), and no free-space floor.
pub fn union(branches: &[(&Path, &str)]) -> UnionFs {
    union_with(branches, "category.create=epff,minfreespace=0")
}

/// The request context of root in the guest.
pub fn ctx() -> Context {
    Context::new()
}

/// A C string from a Rust string.
pub fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// SETATTR of the permission bits of `e` (an entry the guest holds) to `mode`, as `who`.
pub fn chmod_as(fs: &UnionFs, who: &Context, e: &Entry, mode: u32) -> io::Result<()> {
    let mut attr = e.attr;
    attr.st_mode = (attr.st_mode & libc::S_IFMT) | mode;
    fs.setattr(
        who,
        e.inode,
        attr,
        None,
        fuse_backend_rs::abi::fuse_abi::SetattrValid::MODE,
    )
    .map(drop)
}

/// Looks up a slash-separated path from the root, one component at a time as the kernel does.
pub fn walk(fs: &UnionFs, path: &str) -> io::Result<Entry> {
    let mut parent = ROOT_ID;
    let mut last = None;
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        let e = fs.lookup(&ctx(), parent, &c(comp))?;
        parent = e.inode;
        last = Some(e);
    }
    last.ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Creates `name` in `parent` with `data` and closes it; returns its entry.
pub fn create_file(fs: &UnionFs, parent: u64, name: &str, data: &[u8]) -> io::Result<Entry> {
    create_with(fs, parent, &c(name), libc::O_RDWR as u32, data)
}

/// [`create_file`] with the open `flags` of the CREATE request (mode 0644, no umask).
pub fn create_with(
    fs: &UnionFs,
    parent: u64,
    name: &CStr,
    flags: u32,
    data: &[u8],
) -> io::Result<Entry> {
    let args = CreateIn {
        flags,
        mode: 0o644,
        umask: 0,
        fuse_flags: 0,
    };
    let (e, fh, _, _) = fs.create(&ctx(), parent, name, args)?;
    let fh = fh.expect("create opens a handle");
    let n = fs.write(
        &ctx(),
        e.inode,
        fh,
        &mut SliceReader(data.to_vec(), 0),
        data.len() as u32,
        0,
        None,
        false,
        0,
        0,
    )?;
    assert_eq!(n, data.len());
    fs.release(&ctx(), e.inode, 0, fh, false, false, None)?;
    Ok(e)
}

/// Reads a whole file through open/read/release.
pub fn read_file(fs: &UnionFs, inode: u64) -> io::Result<Vec<u8>> {
    let (fh, _, _) = fs.open(&ctx(), inode, libc::O_RDONLY as u32, 0)?;
    let fh = fh.unwrap();
    let mut w = VecWriter::default();
    loop {
        let off = w.0.len() as u64;
        if fs.read(&ctx(), inode, fh, &mut w, 1 << 20, off, None, 0)? == 0 {
            break;
        }
    }
    fs.release(&ctx(), inode, 0, fh, false, false, None)?;
    Ok(w.0)
}

/// The names a full readdir of directory `inode` returns, in order.
pub fn list(fs: &UnionFs, inode: u64) -> Vec<(String, u64)> {
    let (fh, _) = fs.opendir(&ctx(), inode, 0).unwrap();
    let fh = fh.unwrap();
    let mut out = Vec::new();
    fs.readdir(&ctx(), inode, fh, 4096, 0, &mut |d: DirEntry| {
        out.push((String::from_utf8_lossy(d.name).into_owned(), d.ino));
        Ok(1)
    })
    .unwrap();
    fs.releasedir(&ctx(), inode, 0, fh).unwrap();
    out
}
