//! A snapshot of a host directory tree: every entry below a root with its kind, permission
//! bits, contents and (on request) extended attributes, keyed by relative path, to compare a
//! branch before and after a run or two trees with each other. Reads only; never follows a
//! symlink.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Relative path (`a/b`, no leading slash) → entry.
pub type Tree = BTreeMap<String, Node>;

/// What an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A character device (an overlayfs whiteout is one, 0:0).
    CharDev,
    /// A block device, FIFO or socket.
    Special,
}

/// One entry of a [`Tree`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// What it is.
    pub kind: Kind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// A file's contents, a symlink's target, a device's `st_rdev` (little-endian); empty for
    /// anything else.
    pub data: Vec<u8>,
    /// The extended attributes the walk was asked for (name, value), sorted by name.
    pub xattrs: Vec<(String, Vec<u8>)>,
}

impl Node {
    /// An entry with no extended attributes.
    pub fn new(kind: Kind, mode: u32, data: Vec<u8>) -> Node {
        Node {
            kind,
            mode: mode & 0o7777,
            data,
            xattrs: Vec::new(),
        }
    }
}

/// How to walk: what to leave out and which extended attributes to record. The default
/// records every entry and no xattr.
#[derive(Clone, Copy, Default)]
pub struct Walk<'a> {
    /// Names directly below the root to leave out (with everything beneath them).
    pub skip: &'a [&'a str],
    /// Prefixes of the xattr names to record (`"user."`; a full name for one attribute).
    pub xattrs: &'a [&'a str],
}

/// Every entry below `root`, without xattrs.
pub fn snapshot(root: &Path) -> Tree {
    Walk::default().snapshot(root)
}

impl Walk<'_> {
    /// Every entry below `root` as this walk sees it.
    pub fn snapshot(&self, root: &Path) -> Tree {
        let mut out = Tree::new();
        self.walk(root, root, &mut out);
        out
    }

    fn walk(&self, root: &Path, dir: &Path, out: &mut Tree) {
        for e in fs::read_dir(dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display())) {
            let p = e.unwrap().path();
            if dir == root && self.skip.iter().any(|s| p.file_name() == Some(s.as_ref())) {
                continue;
            }
            let m = fs::symlink_metadata(&p).unwrap();
            let ft = m.file_type();
            let (kind, data) = if ft.is_dir() {
                self.walk(root, &p, out);
                (Kind::Dir, Vec::new())
            } else if ft.is_symlink() {
                let target = fs::read_link(&p).unwrap();
                (Kind::Symlink, target.into_os_string().into_encoded_bytes())
            } else if ft.is_file() {
                (Kind::File, fs::read(&p).unwrap())
            } else if ft.is_char_device() {
                (Kind::CharDev, m.rdev().to_le_bytes().to_vec())
            } else if ft.is_block_device() {
                (Kind::Special, m.rdev().to_le_bytes().to_vec())
            } else {
                (Kind::Special, Vec::new())
            };
            let node = Node {
                xattrs: xattrs(&p, self.xattrs),
                ..Node::new(kind, m.mode(), data)
            };
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            out.insert(rel, node);
        }
    }
}

/// The extended attributes of `path` itself (not a symlink's target) whose names start with
/// one of `prefixes`, sorted by name.
pub fn xattrs(path: &Path, prefixes: &[&str]) -> Vec<(String, Vec<u8>)> {
    if prefixes.is_empty() {
        return Vec::new();
    }
    let mut names = vec![0u8; 64 << 10];
    // Filesystems without xattrs (ENOTSUP) have none to record.
    let n = rustix::fs::llistxattr(path, &mut names[..]).unwrap_or(0);
    let mut out: Vec<(String, Vec<u8>)> = names[..n]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .filter(|n| prefixes.iter().any(|p| n.starts_with(p)))
        .map(|name| {
            let mut v = vec![0u8; 64 << 10];
            let m = rustix::fs::lgetxattr(path, name.as_str(), &mut v[..])
                .unwrap_or_else(|e| panic!("lgetxattr {} {name}: {e}", path.display()));
            v.truncate(m);
            (name, v)
        })
        .collect();
    out.sort();
    out
}
