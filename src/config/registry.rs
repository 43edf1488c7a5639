//! The one option registry: every mergerfs-style `key=value` option, whether it comes from
//! `-o a=b,c=d`, a config file or a typed flag, is applied to [`UnionOptions`] here. Names are
//! mergerfs's; `_` and `-` are interchangeable. Options that only make sense for a kernel FUSE
//! mount (allow_other, fsname…) are accepted and ignored, so an existing mergerfs configuration
//! works unchanged: each with its reason, one note per name per start (`ignored.rs`). A
//! config file is the same `key[=value]` items, one per line; `config=FILE` reads one.

use std::time::Duration;

use crate::fs::options::{
    CacheFiles, FileHandles, FollowSymlinks, Func, InodeCalc, LinkExdev, PassthroughIo,
    RenameExdev, StatfsIgnore, StatfsMode, UnionOptions, XattrMode,
};
use crate::union::policy::{Category, Policy};
use crate::union::size::parse_size;
use crate::union::Branch;

/// Errors applying an option.
#[derive(Debug, thiserror::Error)]
pub enum OptionError {
    /// No option of that name exists.
    #[error("unknown option '{0}'")]
    Unknown(String),
    /// The value does not fit the option.
    #[error("option '{name}': invalid value '{value}' (expected {expected})")]
    BadValue {
        /// The option.
        name: String,
        /// What was given.
        value: String,
        /// What is accepted.
        expected: &'static str,
    },
    /// A config file line cannot be applied.
    #[error("{file}:{line}: {source}")]
    InFile {
        /// The file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        source: Box<OptionError>,
    },
    /// A `config=FILE` cannot be read.
    #[error("cannot read config file {path}: {source}")]
    ReadConfig {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// `config=` files include each other more than [`MAX_CONFIG_DEPTH`] deep.
    #[error("config={0}: too many levels of config files (at most {MAX_CONFIG_DEPTH})")]
    ConfigDepth(String),
}

/// How deep `config=` files may include each other (mergerfs's limit).
pub const MAX_CONFIG_DEPTH: usize = 5;

/// What an option setter reports when the value does not fit: what it expected.
struct Expected(&'static str);

type Setter = fn(&mut Settings, &str) -> Result<(), Expected>;

/// Everything the registry can set: the union's behaviour plus branches named in a config file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    /// Behaviour options.
    pub opts: UnionOptions,
    /// Branches given with `branches=` (config files, as mergerfs allows).
    pub branches: Vec<Branch>,
    /// virtiofsd's legacy `-o` keys.
    pub virtiofsd: super::virtiofsd::Legacy,
    /// `ro` / `rw`, the generic mount flags: the whole share read-only (as `--readonly`).
    pub readonly: Option<bool>,
    /// `ctl-socket=PATH`: the control socket's path (as `--ctl-socket`, which wins), so that
    /// a launcher that passes only its own arguments (libvirt) can still ask for one.
    pub ctl_socket: Option<std::path::PathBuf>,
    /// One line per ignored option named (`NAME: why`), each once, for the start's log.
    pub notes: Vec<String>,
    /// The generic mount options named (normalized name, value), in order: ignored by the
    /// vhost-user daemon, honoured (some of them) by a host mount (`union-virtiofsd mount`).
    pub mount: Vec<(String, String)>,
    /// How many `config=` files are being read (inside one another).
    depth: usize,
}

/// One registered option.
pub struct OptionSpec {
    /// The mergerfs name.
    pub name: &'static str,
    /// The accepted values and meaning, for `--help` and the book's option reference.
    pub help: &'static str,
    set: Setter,
}

fn boolean(v: &str) -> Result<bool, Expected> {
    match v {
        "" | "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(Expected("true or false")),
    }
}

fn policy(v: &str) -> Result<Policy, Expected> {
    v.parse()
        .map_err(|_| Expected("a mergerfs policy name (ff, epmfs, pfrd, …)"))
}

fn seconds(v: &str) -> Result<Duration, Expected> {
    v.parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .filter(|d| d.as_secs() <= u64::from(u32::MAX))
        .ok_or(Expected("a number of seconds"))
}

macro_rules! choice {
    ($field:ident, $expected:literal, { $($text:literal => $val:expr),* $(,)? }) => {
        |s: &mut Settings, v: &str| {
            s.opts.$field = match v {
                $($text => $val,)*
                _ => return Err(Expected($expected)),
            };
            Ok(())
        }
    };
}

/// Every option, in the option reference's order.
pub static OPTIONS: &[OptionSpec] = &[
    OptionSpec { name: "branches", help: "colon-separated PATH[=RW|RO|NC[,MINFREE][,static]] list (config files)", set: |s, v| {
        s.branches = Branch::parse_list(v).map_err(|_| Expected("PATH[=RW|RO|NC[,SIZE]]:…"))?;
        Ok(())
    } },
    OptionSpec { name: "srcmounts", help: "mergerfs's older name for branches", set: |s, v| {
        s.branches = Branch::parse_list(v).map_err(|_| Expected("PATH[=RW|RO|NC[,SIZE]]:…"))?;
        Ok(())
    } },
    OptionSpec { name: "category.create", help: "policy for create, mkdir, mknod, symlink (default pfrd)", set: |s, v| {
        s.opts.policies.set_category(Category::Create, policy(v)?);
        Ok(())
    } },
    OptionSpec { name: "category.search", help: "policy for open, getattr, access, readlink, getxattr, listxattr (default ff)", set: |s, v| {
        s.opts.policies.set_category(Category::Search, policy(v)?);
        Ok(())
    } },
    OptionSpec { name: "category.action", help: "policy for chmod, chown, link, rename, rmdir, unlink, truncate, utimens, setxattr, removexattr (default epall)", set: |s, v| {
        s.opts.policies.set_category(Category::Action, policy(v)?);
        Ok(())
    } },
    OptionSpec { name: "minfreespace", help: "SIZE (K/M/G/T): creates skip branches with less available (default 4G)", set: |s, v| {
        s.opts.minfreespace = parse_size(v).map_err(|_| Expected("a size such as 4G"))?;
        Ok(())
    } },
    OptionSpec { name: "moveonenospc", help: "true|false|POLICY: on ENOSPC/EDQUOT during a write, move the file and retry (true = mfs)", set: |s, v| {
        s.opts.moveonenospc = match boolean(v) {
            Ok(true) => Some(Policy::Mfs),
            Ok(false) => None,
            Err(_) => Some(policy(v).map_err(|_| Expected("true, false or a policy name"))?),
        };
        Ok(())
    } },
    OptionSpec { name: "inodecalc", help: "passthrough|path-hash|path-hash32|devino-hash|devino-hash32|hybrid-hash|hybrid-hash32 (default devino-hash: stable across renames, shared by hard links)", set: choice!(inodecalc, "passthrough, path-hash[32], devino-hash[32] or hybrid-hash[32]", {
        "passthrough" => InodeCalc::Passthrough,
        "path-hash" => InodeCalc::PathHash,
        "path-hash32" => InodeCalc::PathHash32,
        "devino-hash" => InodeCalc::DevinoHash,
        "devino-hash32" => InodeCalc::DevinoHash32,
        "hybrid-hash" => InodeCalc::HybridHash,
        "hybrid-hash32" => InodeCalc::HybridHash32,
    }) },
    OptionSpec { name: "statfs", help: "base|full: sum every branch, or only those holding the path (default base)", set: choice!(statfs, "base or full", {
        "base" => StatfsMode::Base,
        "full" => StatfsMode::Full,
    }) },
    OptionSpec { name: "statfs-ignore", help: "none|ro|nc: branches statfs leaves out (default none)", set: choice!(statfs_ignore, "none, ro or nc", {
        "none" => StatfsIgnore::None,
        "ro" => StatfsIgnore::Ro,
        "nc" => StatfsIgnore::Nc,
    }) },
    OptionSpec { name: "xattr", help: "passthrough|noattr|nosys (default nosys, as virtiofsd; mergerfs: passthrough); a bare `xattr` (virtiofsd) is passthrough", set: choice!(xattr, "passthrough, noattr or nosys", {
        "" => XattrMode::Passthrough,
        "passthrough" => XattrMode::Passthrough,
        "noattr" => XattrMode::Noattr,
        "nosys" => XattrMode::Nosys,
    }) },
    OptionSpec { name: "no-xattr", help: "virtiofsd: no extended attributes (xattr=nosys)", set: |s, v| {
        if !v.is_empty() {
            return Err(Expected("no value"));
        }
        s.opts.xattr = XattrMode::Nosys;
        Ok(())
    } },
    OptionSpec { name: "nullrw", help: "true|false: reads and writes succeed without touching data (transport benchmark)", set: |s, v| {
        s.opts.nullrw = boolean(v)?;
        Ok(())
    } },
    OptionSpec { name: "passthrough.io", help: "off|ro|wo|rw: on a host mount, the kernel reads and writes the branch file itself for read-only, write-only or all opens (FUSE passthrough, Linux 6.9; root only; turns off cache.writeback; ignored by the vhost-user device; `passthrough` is mergerfs's older name; default off)", set: choice!(passthrough_io, "off, ro, wo or rw", {
        "off" => PassthroughIo::Off,
        "ro" => PassthroughIo::Ro,
        "wo" => PassthroughIo::Wo,
        "rw" => PassthroughIo::Rw,
    }) },
    OptionSpec { name: "cache.files", help: "libfuse|off|partial|full|auto-full: guest page cache for file data (default libfuse)", set: choice!(cache_files, "libfuse, off, partial, full or auto-full", {
        "libfuse" => CacheFiles::Libfuse,
        "off" => CacheFiles::Off,
        "partial" => CacheFiles::Partial,
        "full" => CacheFiles::Full,
        "auto-full" => CacheFiles::AutoFull,
    }) },
    OptionSpec { name: "cache.readdir", help: "true|false: the guest caches directory listings across opens (FOPEN_CACHE_DIR; default false, true with --cache always|metadata); it then opens directories without OPENDIR/RELEASEDIR", set: |s, v| {
        s.opts.cache_readdir = boolean(v)?;
        Ok(())
    } },
    OptionSpec { name: "cache.auto-inval-data", help: "true|false: the guest drops a file's cached pages when it sees the file's mtime change (FUSE_AUTO_INVAL_DATA; default true for a guest, for a share the host edits; false on a host mount, as mergerfs, where a file rewritten in place through the mount keeps its pages)", set: |s, v| {
        s.opts.auto_inval_data = boolean(v)?;
        Ok(())
    } },
    OptionSpec { name: "direct-io", help: "true|false: bypass the guest page cache (FOPEN_DIRECT_IO)", set: |s, v| {
        s.opts.direct_io = boolean(v)?;
        Ok(())
    } },
    OptionSpec { name: "cache.attr", help: "SECS the guest may cache attributes (default 1)", set: |s, v| {
        s.opts.cache_attr = seconds(v)?;
        Ok(())
    } },
    OptionSpec { name: "cache.entry", help: "SECS the guest may cache names, and the daemon which branch holds each name it looked up or listed (its lookup memo; 0 turns the memo off) (default 1)", set: |s, v| {
        s.opts.cache_entry = seconds(v)?;
        Ok(())
    } },
    OptionSpec { name: "cache.negative-entry", help: "SECS the guest may cache failed lookups, and the daemon that no branch has the name (default 0)", set: |s, v| {
        s.opts.cache_negative_entry = seconds(v)?;
        Ok(())
    } },
    OptionSpec { name: "inode-file-handles", help: "never|prefer|mandatory: how nodes the guest holds are reopened once the daemon closed their descriptors: by file handle (needs CAP_DAC_READ_SEARCH; prefer falls back to the path where a branch has none, mandatory refuses to start) or by path (virtiofsd's option; default prefer)", set: choice!(file_handles, "never, prefer or mandatory", {
        "never" => FileHandles::Never,
        "prefer" => FileHandles::Prefer,
        "mandatory" => FileHandles::Mandatory,
    }) },
    OptionSpec { name: "node-fds", help: "N node descriptors kept open before the least recently used are closed (ours, default 512; at most a quarter of the open file limit)", set: |s, v| {
        s.opts.node_fds = v.parse().ok().filter(|n| *n > 0).ok_or(Expected("a positive number"))?;
        Ok(())
    } },
    OptionSpec { name: "allow-idmap", help: "true|false: offer FUSE_ALLOW_IDMAP, so that the guest may make idmapped mounts of the share; requests that create nothing then carry no caller and are served as the guest's root (ours, default false; = --allow-idmap)", set: |s, v| {
        s.opts.allow_idmap = boolean(v)?;
        Ok(())
    } },
    OptionSpec { name: "path-queries", help: "true|false: the guest may read mergerfs's per-file queries as xattrs (user.mergerfs.basepath, relpath, fullpath, allpaths), which show host paths; true implies xattr=passthrough (ours, default false)", set: |s, v| {
        s.opts.path_queries = boolean(v)?;
        if s.opts.path_queries {
            s.opts.xattr = XattrMode::Passthrough;
        }
        Ok(())
    } },
    OptionSpec { name: "lock-timeout", help: "SECS the same holders may block a waiting POSIX lock request (fcntl F_SETLKW, lockf F_LOCK) before it answers EDEADLK, a deadlock the daemon cannot see (ours, default 10; 0: no bound)", set: |s, v| {
        s.opts.lock_timeout = seconds(v)?;
        Ok(())
    } },
    OptionSpec { name: "lock-wait-external", help: "SECS a waiting flock waits while only locks held outside the guest (a host process, another guest) block it before it answers ENOLCK (ours, default 60; 0: no bound)", set: |s, v| {
        s.opts.lock_wait_external = seconds(v)?;
        Ok(())
    } },
    OptionSpec { name: "dropcacheonclose", help: "true|false: drop the host page cache of a file on close", set: |s, v| {
        s.opts.dropcacheonclose = boolean(v)?;
        Ok(())
    } },
    OptionSpec { name: "cow", help: "true|false: copy-on-write layers (ours, default false): a change to an entry on an RO branch copies it up to an RW branch first, and deletions leave overlayfs whiteouts", set: |s, v| {
        s.opts.cow = boolean(v)?;
        Ok(())
    } },
    OptionSpec { name: "rename-exdev", help: "passthrough|rel-symlink|abs-symlink: what a rename that cannot stay on its branches does (default passthrough: EXDEV)", set: choice!(rename_exdev, "passthrough, rel-symlink or abs-symlink", {
        "passthrough" => RenameExdev::Passthrough,
        "rel-symlink" => RenameExdev::RelSymlink,
        "abs-symlink" => RenameExdev::AbsSymlink,
    }) },
    OptionSpec { name: "link-exdev", help: "passthrough|rel-symlink|abs-base-symlink|abs-pool-symlink: what a link across branches does (default passthrough: EXDEV)", set: choice!(link_exdev, "passthrough, rel-symlink, abs-base-symlink or abs-pool-symlink", {
        "passthrough" => LinkExdev::Passthrough,
        "rel-symlink" => LinkExdev::RelSymlink,
        "abs-base-symlink" => LinkExdev::AbsBaseSymlink,
        "abs-pool-symlink" => LinkExdev::AbsPoolSymlink,
    }) },
    OptionSpec { name: "mountpoint", help: "PATH where the guest mounts the share, for the abs-*symlink modes (default /mnt)", set: |s, v| {
        if !v.starts_with('/') {
            return Err(Expected("an absolute path"));
        }
        s.opts.mountpoint = v.to_string();
        Ok(())
    } },
    OptionSpec { name: "follow-symlinks", help: "never|directory|regular|all: show host symlinks as their targets, resolved inside the branch (default never)", set: choice!(follow_symlinks, "never, directory, regular or all", {
        "never" => FollowSymlinks::Never,
        "directory" => FollowSymlinks::Directory,
        "regular" => FollowSymlinks::Regular,
        "all" => FollowSymlinks::All,
    }) },
    OptionSpec { name: "cache.writeback", help: "true|false: the guest's page cache holds writes and sends them later, in large requests (FUSE_WRITEBACK_CACHE; virtiofsd's --writeback)", set: |s, v| {
        s.opts.writeback = boolean(v)?;
        Ok(())
    } },
    OptionSpec { name: "link-cow", help: "true|false: opening a hard-linked file for writing first gives it its own copy", set: |s, v| {
        s.opts.link_cow = boolean(v)?;
        Ok(())
    } },
    OptionSpec { name: "symlinkify", help: "true|false: show unwritable files older than symlinkify_timeout as symlinks to their host path", set: |s, v| {
        s.opts.symlinkify = boolean(v)?;
        Ok(())
    } },
    OptionSpec { name: "symlinkify-timeout", help: "SECS a file must be unchanged for symlinkify (default 3600)", set: |s, v| {
        s.opts.symlinkify_timeout = seconds(v)?;
        Ok(())
    } },
];

fn normalize(name: &str) -> String {
    let n = name.trim().replace('_', "-");
    match n.as_str() {
        "direct-io" | "direct_io" => "direct-io".to_string(),
        // mergerfs before 2.42.
        "passthrough" => "passthrough.io".to_string(),
        _ => n,
    }
}

impl Settings {
    /// Settings that start from `opts` (a running union's) instead of the defaults.
    pub fn over(opts: UnionOptions) -> Self {
        Self {
            opts,
            ..Self::default()
        }
    }

    /// Applies one `key[=value]`.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<(), OptionError> {
        let name = normalize(key);
        if let Some((_, why)) = super::ignored::find(&name) {
            self.note(format!("{}: {why}", key.trim()));
            self.mount.push((name, value.trim().to_owned()));
            return Ok(());
        }
        if let Some(f) = name.strip_prefix("func.") {
            let func = Func::ALL.iter().find(|x| x.name() == f);
            let func = *func.ok_or_else(|| OptionError::Unknown(key.to_string()))?;
            let p = policy(value).map_err(|e| bad(key, value, e))?;
            self.opts.policies.set_func(func, p);
            return Ok(());
        }
        match name.as_str() {
            "config" => return self.load(value.trim()),
            "ro" | "rw" if !value.trim().is_empty() => {
                return Err(bad(key, value, Expected("no value")))
            }
            "ro" | "rw" => {
                self.readonly = Some(name == "ro");
                return Ok(());
            }
            "ctl-socket" if value.trim().is_empty() => {
                return Err(bad(key, value, Expected("a socket path")))
            }
            "ctl-socket" => {
                self.ctl_socket = Some(value.trim().into());
                return Ok(());
            }
            _ => {}
        }
        let Some(spec) = OPTIONS.iter().find(|o| normalize(o.name) == name) else {
            return match super::virtiofsd::apply(&mut self.virtiofsd, &name, value.trim()) {
                Some(r) => r.map_err(|e| bad(key, value, Expected(e))),
                None => Err(OptionError::Unknown(key.to_string())),
            };
        };
        (spec.set)(self, value.trim()).map_err(|e| bad(key, value, e))
    }

    /// Applies a mergerfs `-o` string: `a=b,c,d=e`. A comma inside a value is written `,,`
    /// (libvirt escapes `-o source=` paths so) or `\,` (libfuse's escape, as mergerfs reads it).
    pub fn apply_list(&mut self, list: &str) -> Result<(), OptionError> {
        for item in split_list(list).iter().map(|i| i.trim()) {
            if item.is_empty() {
                continue;
            }
            let (k, v) = item.split_once('=').unwrap_or((item, ""));
            self.apply(k, v)?;
        }
        Ok(())
    }

    /// Applies a config file's text: one `key=value` or bare `key` per line (as mergerfs: a
    /// bare key is the key with an empty value, which for a switch means on, as in `-o`), `#`
    /// comments, blank lines. An error names the file and line.
    pub fn apply_file(&mut self, file: &str, text: &str) -> Result<(), OptionError> {
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (k, v) = line.split_once('=').unwrap_or((line, ""));
            self.apply(k, v).map_err(|e| OptionError::InFile {
                file: file.to_string(),
                line: i + 1,
                source: Box::new(e),
            })?;
        }
        Ok(())
    }

    /// `config=FILE`: reads and applies a config file there and then, as mergerfs does (so
    /// later options override it), at most [`MAX_CONFIG_DEPTH`] files deep.
    fn load(&mut self, path: &str) -> Result<(), OptionError> {
        if self.depth >= MAX_CONFIG_DEPTH {
            return Err(OptionError::ConfigDepth(path.to_string()));
        }
        if path.is_empty() {
            return Err(bad("config", path, Expected("a file")));
        }
        let text = std::fs::read_to_string(path).map_err(|source| OptionError::ReadConfig {
            path: path.to_string(),
            source,
        })?;
        self.depth += 1;
        let r = self.apply_file(path, &text);
        self.depth -= 1;
        r
    }

    /// Records `note` unless an equal one already is.
    fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }
}

/// Splits an `-o` string at single commas; `,,` and `\,` stand for a literal comma.
fn split_list(list: &str) -> Vec<String> {
    let mut items = vec![String::new()];
    let mut chars = list.chars().peekable();
    while let Some(c) = chars.next() {
        let literal_comma = match c {
            ',' | '\\' => chars.next_if_eq(&',').is_some(),
            _ => false,
        };
        let cur = items.last_mut().expect("never empty");
        match c {
            _ if literal_comma => cur.push(','),
            ',' => items.push(String::new()),
            _ => cur.push(c),
        }
    }
    items
}

fn bad(key: &str, value: &str, e: Expected) -> OptionError {
    OptionError::BadValue {
        name: key.to_string(),
        value: value.to_string(),
        expected: e.0,
    }
}

/// The option table as text, for `--help`.
pub fn help_text(width: usize) -> String {
    const INDENT: usize = 25;
    let mut s = String::from("Union options (-o KEY=VALUE,… or --config FILE; mergerfs names):\n");
    let mut item = |name: &str, help: &str| {
        let head = format!("  {name:<22} ");
        let first = if head.chars().count() > INDENT {
            // A name longer than the column: its text starts on the next line.
            s.push_str(head.trim_end());
            s.push('\n');
            " ".repeat(INDENT)
        } else {
            head
        };
        s.push_str(&wrap(help, &first, &" ".repeat(INDENT), width));
    };
    for o in OPTIONS {
        item(o.name, o.help);
    }
    item(
        "func.<name>=POLICY",
        "per-function policy: create mkdir mknod symlink open getattr access getxattr \
         listxattr readlink chmod chown link rename rmdir unlink truncate utimens setxattr \
         removexattr",
    );
    let para = |text: &str| format!("\n{}", wrap(text, "", "", width));
    s.push_str(&para(
        "virtiofsd's legacy -o keys, accepted in the same strings: source=DIR, \
         cache=auto|always|metadata|none, sandbox=, loglevel=, timeout=, modcaps=, xattrmap=, \
         xattr, no_xattr, flock, no_flock, posix_lock, no_posix_lock, posix_acl, \
         security_label, writeback, announce_submounts, killpriv_v2, readdirplus (and their \
         no_ forms). A bare key is virtiofsd's switch, KEY=VALUE mergerfs's option (xattr = \
         xattr=passthrough). A comma inside a value is written ',,' or '\\,' (-o \
         source=/srv/a,,b).",
    ));
    s.push_str(&para(
        "config=FILE reads a config file there (key=value or bare key lines, # comments); ro \
         (= --readonly) and rw apply, and ctl-socket=PATH (= --ctl-socket). Every other mergerfs option (readahead, threads, \
         func.readdir, …) and generic mount option (allow_other, noatime, defaults, x-…) is \
         accepted and ignored, with one warning per start saying why.",
    ));
    s
}

/// `text` wrapped to `width` columns: its first line after `first`, the others after
/// `rest`; a word longer than a line is broken after a `|` where it has one.
fn wrap(text: &str, first: &str, rest: &str, width: usize) -> String {
    let mut words: Vec<String> = Vec::new();
    for w in text.split_whitespace() {
        let room = width.saturating_sub(rest.chars().count()).max(20);
        if w.chars().count() <= room || !w.contains('|') {
            words.push(w.to_owned());
            continue;
        }
        // passthrough|path-hash|…: pieces that fit, each ending with its `|`.
        let mut piece = String::new();
        for part in w.split_inclusive('|') {
            if !piece.is_empty() && piece.chars().count() + part.chars().count() > room {
                words.push(std::mem::take(&mut piece) + "\u{0}");
            }
            piece.push_str(part);
        }
        words.push(piece);
    }
    let mut out = String::new();
    let mut line = first.to_owned();
    let mut empty = true;
    for w in words {
        let glued = line.ends_with('\u{0}');
        if glued {
            line.pop();
        }
        let len = line.chars().count() + usize::from(!empty && !glued) + w.chars().count();
        if !empty && len > width {
            out.push_str(line.trim_end());
            out.push('\n');
            line = rest.to_owned();
            empty = true;
        }
        if !empty && !glued {
            line.push(' ');
        }
        line.push_str(&w);
        empty = false;
    }
    out.push_str(line.trim_end_matches('\u{0}').trim_end());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mergerfs_option_strings_apply() {
        let mut s = Settings::default();
        s.apply_list("category.create=mfs,minfreespace=10G,moveonenospc=true,func.getattr=newest")
            .unwrap();
        assert_eq!(s.opts.policies.get(Func::Mkdir), Policy::Mfs);
        assert_eq!(s.opts.policies.get(Func::Getattr), Policy::Newest);
        assert_eq!(s.opts.policies.get(Func::Open), Policy::Ff);
        assert_eq!(s.opts.minfreespace, 10 << 30);
        assert_eq!(s.opts.moveonenospc, Some(Policy::Mfs));
        s.apply_list("statfs_ignore=ro,cache.negative_entry=2.5,direct_io,allow_other")
            .unwrap();
        assert_eq!(s.opts.statfs_ignore, StatfsIgnore::Ro);
        assert_eq!(s.opts.cache_negative_entry, Duration::from_millis(2500));
        assert!(s.opts.direct_io);
    }

    #[test]
    fn escaped_commas_stay_in_the_value() {
        assert_eq!(split_list("a=1,b"), ["a=1", "b"]);
        assert_eq!(
            split_list("source=/x,,y,cache=none"),
            ["source=/x,y", "cache=none"]
        );
        assert_eq!(split_list(r"source=/x\,y,xattr"), ["source=/x,y", "xattr"]);
        assert_eq!(split_list(r"a=\x"), [r"a=\x"]);
        let mut s = Settings::default();
        s.apply_list("source=/srv/a,,b,,,cache=none").unwrap();
        assert_eq!(s.virtiofsd.source, Some("/srv/a,b,".into()));
    }

    #[test]
    fn errors_name_the_option() {
        let mut s = Settings::default();
        let e = s.apply_list("category.create=bogus").unwrap_err();
        assert!(e.to_string().contains("category.create"), "{e}");
        assert!(matches!(
            s.apply("frobnicate", "1"),
            Err(OptionError::Unknown(k)) if k == "frobnicate"
        ));
        assert!(matches!(
            s.apply("func.nosuch", "ff"),
            Err(OptionError::Unknown(k)) if k == "func.nosuch"
        ));
        assert!(matches!(
            s.apply("minfreespace", "lots"),
            Err(OptionError::BadValue { .. })
        ));
        assert!(matches!(
            s.apply("statfs", "half"),
            Err(OptionError::BadValue { .. })
        ));
    }

    #[test]
    fn config_files() {
        let mut s = Settings::default();
        s.apply_file(
            "f",
            "# pool\nbranches=/a=RW:/b=RO,1G\n\ncategory.search = newest # x\n",
        )
        .unwrap();
        assert_eq!(s.branches.len(), 2);
        assert_eq!(s.branches[1].min_free, Some(1 << 30));
        assert_eq!(s.opts.policies.get(Func::Readlink), Policy::Newest);
        let e = s.apply_file("f", "ok=1\njunk\n").unwrap_err();
        assert_eq!(e.to_string(), "f:1: unknown option 'ok'");
        let e = s.apply_file("f", "xattr=nosys\n\n# c\njunk\n").unwrap_err();
        assert_eq!(e.to_string(), "f:4: unknown option 'junk'");
        let e = s.apply_file("f", "statfs=half\n").unwrap_err();
        assert!(e.to_string().starts_with("f:1: option 'statfs'"), "{e}");
    }

    #[test]
    fn bare_keys_in_files_are_as_in_option_lists() {
        let mut s = Settings::default();
        s.apply_file("f", "allow_other\ndirect_io\nlink_cow\ndefaults\n")
            .unwrap();
        assert!(s.opts.direct_io && s.opts.link_cow);
        let mut l = Settings::default();
        l.apply_list("allow_other,direct_io,link_cow,defaults")
            .unwrap();
        assert_eq!(s, l);
    }

    #[test]
    fn ignored_options_leave_one_note_each() {
        let mut s = Settings::default();
        s.apply_list("allow_other,readahead=0,allow_other,x-systemd.automount")
            .unwrap();
        s.apply_file("f", "readahead=1024\nallow_other\n").unwrap();
        assert_eq!(s.notes.len(), 3, "{:?}", s.notes);
        assert!(s.notes[1].starts_with("readahead: the guest kernel's readahead"));
        assert_eq!(s.opts, UnionOptions::default());
    }

    #[test]
    fn ro_and_rw_are_the_share_mode() {
        let mut s = Settings::default();
        s.apply_list("defaults,ro").unwrap();
        assert_eq!(s.readonly, Some(true));
        s.apply_list("rw").unwrap();
        assert_eq!(s.readonly, Some(false));
        assert!(s.apply_list("ro=1").is_err());
    }

    #[test]
    fn config_option_reads_a_file_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("inner.conf");
        std::fs::write(&inner, "category.create=mfs\nallow_other\n").unwrap();
        let outer = dir.path().join("outer.conf");
        std::fs::write(
            &outer,
            format!("minfreespace=1G\nconfig={}\n", inner.display()),
        )
        .unwrap();
        let mut s = Settings::default();
        s.apply_list(&format!(
            "category.create=ff,config={},statfs=full",
            outer.display()
        ))
        .unwrap();
        assert_eq!(
            s.opts.policies.get(Func::Create),
            Policy::Mfs,
            "the file overrides earlier"
        );
        assert_eq!(s.opts.minfreespace, 1 << 30);
        assert_eq!(s.opts.statfs, StatfsMode::Full);
        assert_eq!(s.notes.len(), 1);
        // Errors name the file and line, through every level.
        std::fs::write(&inner, "\nfrob\n").unwrap();
        let e = s
            .apply_list(&format!("config={}", outer.display()))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}:2: {}:2: unknown option 'frob'",
                outer.display(),
                inner.display()
            )
        );
        let e = s.apply_list("config=/nonexistent/x.conf").unwrap_err();
        assert!(matches!(e, OptionError::ReadConfig { .. }), "{e}");
        // A file that includes itself stops at the depth limit.
        std::fs::write(&inner, format!("config={}\n", inner.display())).unwrap();
        let e = s
            .apply_list(&format!("config={}", inner.display()))
            .unwrap_err();
        assert!(e.to_string().contains("too many levels"), "{e}");
    }

    /// mergerfs 2.42's options, as its documentation lists them
    /// (`mkdocs/docs/config/options.md`, every `**name**` item, with a value of its type, and
    /// `mkdocs/docs/config/deprecated_options.md`), plus the fstab and libfuse mount options
    /// mergerfs passes on (`vendored/libfuse/lib/mount_generic.h`).
    const MERGERFS_2_42: &[&str] = &[
        // options.md, "mount options"
        "branches=/tmp",
        "mountpoint=/mnt/pool",
        "branches-mount-timeout=0",
        "branches-mount-timeout-fail=false",
        "minfreespace=4G",
        "moveonenospc=pfrd",
        "inodecalc=hybrid-hash",
        "dropcacheonclose=false",
        "direct-io-allow-mmap=true",
        "symlinkify=false",
        "symlinkify-timeout=3600",
        "nullrw=false",
        "lazy-umount-mountpoint=false",
        "ignorepponrename=false",
        "export-support=true",
        "kernel-permissions-check=true",
        "security-capability=true",
        "xattr=passthrough",
        "link-cow=false",
        "statfs=base",
        "statfs-ignore=none",
        "nfsopenhack=off",
        "follow-symlinks=never",
        "link-exdev=passthrough",
        "rename-exdev=passthrough",
        "readahead=0",
        "posix-acl=false",
        "async-read=true",
        "fuse-msg-size=1M",
        "read-thread-count=0",
        "process-thread-count=-1",
        "process-thread-queue-depth=2",
        "pin-threads=R1L",
        "flush-on-close=opened-for-write",
        "scheduling-priority=-10",
        "proxy-ioprio=false",
        "fsname=pool",
        "func.getattr=newest",
        "func.readdir=seq",
        "func.readdir=cosr:4",
        "category.action=epall",
        "category.create=pfrd",
        "category.search=ff",
        "cache.statfs=0",
        "cache.attr=1",
        "cache.entry=1",
        "cache.negative-entry=0",
        "cache.files=off",
        "cache.files.process-names=rtorrent|qbittorrent-nox",
        "cache.writeback=false",
        "cache.symlinks=false",
        "cache.readdir=false",
        "parallel-direct-writes=true",
        "passthrough.io=off",
        "passthrough.max-stack-depth=1",
        "never-forget-nodes=false",
        "allow-idmap=true",
        "debug",
        "log.file=/tmp/x.log",
        // threads.md
        "threads=0",
        // deprecated_options.md
        "allow_other",
        "async_read",
        "atomic_o_trunc",
        "attr_timeout=1",
        "auto_cache",
        "big_writes",
        "direct_io",
        "entry_timeout=1",
        "hard_remove",
        "kernel_cache",
        "negative_entry=0",
        "remember=0",
        "remember-nodes=0",
        "noforget",
        "nonempty",
        "splice_move",
        "splice_read",
        "splice_write",
        "sync_read",
        "use_ino",
        // fstab staples and libfuse's generic mount options
        "defaults",
        "default_permissions",
        "auto_unmount",
        "rw",
        "ro",
        "nofail",
        "_netdev",
        "noauto",
        "x-systemd.requires=zfs-mount.service",
        "noatime",
        "nosuid",
        "nodev",
        "max_read=131072",
        "subtype=mergerfs",
        "uid=0",
        "gid=0",
        "umask=022",
    ];

    #[test]
    fn every_mergerfs_option_is_accepted_in_lists_and_files() {
        for item in MERGERFS_2_42 {
            let mut s = Settings::default();
            s.apply_list(item)
                .unwrap_or_else(|e| panic!("-o {item}: {e}"));
            let mut f = Settings::default();
            f.apply_file("mergerfs.conf", item)
                .unwrap_or_else(|e| panic!("config file line {item}: {e}"));
        }
        let mut s = Settings::default();
        s.apply_file("mergerfs.conf", &MERGERFS_2_42.join("\n"))
            .unwrap();
    }

    #[test]
    fn ignored_names_shadow_nothing_applied() {
        for i in super::super::ignored::IGNORED {
            assert!(
                !OPTIONS.iter().any(|o| normalize(o.name) == i.name),
                "{} is both applied and ignored",
                i.name
            );
            let mut l = super::super::virtiofsd::Legacy::default();
            assert!(
                super::super::virtiofsd::apply(&mut l, i.name, "").is_none(),
                "{} is a virtiofsd key",
                i.name
            );
        }
    }
}
