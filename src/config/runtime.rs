//! mergerfs's runtime interface over a running union: every `user.mergerfs.<option>` read,
//! the ones that may change while the guest runs set (through the same registry that reads
//! `-o` and `--config`), read-only ones EROFS, unknown ones ENOATTR, bad values EINVAL, plus
//! branch edits, `cmd.invalidate-all-nodes` and the per-file queries. Changes are not
//! persisted, as in mergerfs. Reached from the host only (the control socket, SIGHUP).

use std::os::fd::OwnedFd;
use std::time::Duration;

use super::ignored::{IgnoredSpec, Origin, IGNORED};
use super::registry::{OptionError, Settings};
use crate::fs::control::CtlError;
use crate::fs::options::{Func, UnionOptions};
use crate::fs::UnionFs;
use crate::union::edit::{self, BranchEdit};
use crate::union::policy::Category;

/// The prefix mergerfs's keys carry as xattr names.
pub const PREFIX: &str = "user.mergerfs.";

type Show = fn(&UnionOptions) -> String;

/// A key, whether it may change while the guest runs, and how its value is shown.
struct Key {
    name: &'static str,
    settable: bool,
    show: Show,
}

/// `Debug` names as mergerfs writes values: `DevinoHash` is `devino-hash`.
fn kebab(v: impl std::fmt::Debug) -> String {
    let mut out = String::new();
    for (i, c) in format!("{v:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", d.as_secs())
    } else {
        format!("{s}")
    }
}

fn category(o: &UnionOptions, cat: Category) -> String {
    // As mergerfs: each policy once, sorted by name.
    let names: std::collections::BTreeSet<&str> = Func::ALL
        .iter()
        .filter(|f| f.category() == cat)
        .map(|f| o.policies.get(*f).name())
        .collect();
    names.into_iter().collect::<Vec<_>>().join(",")
}

macro_rules! keys {
    ($($name:literal, $settable:literal, |$o:ident| $show:expr;)*) => {
        static KEYS: &[Key] = &[$(Key { name: $name, settable: $settable, show: |$o: &UnionOptions| $show },)*];
    };
}

keys! {
    "cache.attr", true, |o| secs(o.cache_attr);
    "cache.auto_inval_data", false, |o| o.auto_inval_data.to_string();
    "cache.entry", true, |o| secs(o.cache_entry);
    "cache.files", true, |o| kebab(o.cache_files);
    "cache.negative_entry", true, |o| secs(o.cache_negative_entry);
    "cache.readdir", true, |o| o.cache_readdir.to_string();
    "cache.writeback", false, |o| o.writeback.to_string();
    "category.action", true, |o| category(o, Category::Action);
    "category.create", true, |o| category(o, Category::Create);
    "category.search", true, |o| category(o, Category::Search);
    "cow", false, |o| o.cow.to_string();
    "direct_io", true, |o| o.direct_io.to_string();
    "dropcacheonclose", true, |o| o.dropcacheonclose.to_string();
    "follow-symlinks", false, |o| kebab(o.follow_symlinks);
    "inode-file-handles", false, |o| kebab(o.file_handles);
    "inodecalc", false, |o| kebab(o.inodecalc);
    "link-exdev", true, |o| kebab(o.link_exdev);
    "link_cow", true, |o| o.link_cow.to_string();
    "lock-timeout", true, |o| secs(o.lock_timeout);
    "lock-wait-external", true, |o| secs(o.lock_wait_external);
    "minfreespace", true, |o| o.minfreespace.to_string();
    "mountpoint", true, |o| o.mountpoint.clone();
    "moveonenospc", true, |o| o.moveonenospc.map_or("false".into(), |p| p.name().into());
    "node-fds", false, |o| o.node_fds.to_string();
    "nullrw", false, |o| o.nullrw.to_string();
    "passthrough.io", false, |o| kebab(o.passthrough_io);
    "path-queries", true, |o| o.path_queries.to_string();
    "posix_acl", false, |o| kebab(o.posix_acl);
    "readdirplus", false, |o| o.readdirplus.to_string();
    "rename-exdev", true, |o| kebab(o.rename_exdev);
    "security_label", false, |o| kebab(o.security_label);
    "allow-idmap", false, |o| o.allow_idmap.to_string();
    "statfs", true, |o| kebab(o.statfs);
    "statfs_ignore", true, |o| kebab(o.statfs_ignore);
    "symlinkify", true, |o| o.symlinkify.to_string();
    "symlinkify_timeout", true, |o| secs(o.symlinkify_timeout);
    "xattr", true, |o| kebab(o.xattr);
}

/// Commands (`cmd.*`): set-only keys that act once.
const COMMANDS: &[&str] = &["cmd.invalidate-all-nodes"];

/// `key` without the xattr prefix, with `-` for `_` (mergerfs accepts both spellings).
fn normal(key: &str) -> String {
    key.trim()
        .strip_prefix(PREFIX)
        .unwrap_or(key.trim())
        .replace('_', "-")
}

/// `key`'s value in `opts`, as `ctl get` prints it (for the start line).
pub fn show(opts: &UnionOptions, key: &str) -> Option<String> {
    find(key).map(|k| (k.show)(opts))
}

fn find(key: &str) -> Option<&'static Key> {
    let n = normal(key);
    KEYS.iter().find(|k| k.name.replace('_', "-") == n)
}

/// Whether `key` (an applied option, in either spelling) may be changed with `ctl set` while
/// the guest runs; `None` when it is no `ctl` key of that table (the option reference says so).
pub fn settable(key: &str) -> Option<bool> {
    find(key).map(|k| k.settable)
}

/// mergerfs's keys that are accepted and ignored (`ignored.rs`): listed, shown, and set
/// (to no effect) where mergerfs lets them change at run time.
fn find_ignored(key: &str) -> Option<&'static IgnoredSpec> {
    let n = normal(key);
    IGNORED
        .iter()
        .find(|s| s.origin == Origin::Mergerfs && s.name == n)
}

fn unknown(key: &str) -> CtlError {
    CtlError::new(libc::ENODATA, format!("unknown option '{key}'"))
}

/// Every key `ctl keys` lists: the applied options, the ignored mergerfs ones, `func.*` and the
/// branch list, sorted.
fn keys() -> Vec<String> {
    let mut v: Vec<String> = KEYS.iter().map(|k| k.name.to_string()).collect();
    v.extend(Func::ALL.iter().map(|f| format!("func.{}", f.name())));
    v.extend(["branches", "srcmounts"].map(String::from));
    v.extend(
        IGNORED
            .iter()
            .filter(|s| s.origin == Origin::Mergerfs)
            .map(|s| s.name.to_string()),
    );
    v.sort();
    v
}

impl UnionFs {
    /// Every key, as mergerfs names them (without the `user.mergerfs.` prefix), sorted.
    pub fn ctl_keys(&self) -> Vec<String> {
        keys()
    }

    /// The value of `key` (with or without the `user.mergerfs.` prefix).
    pub fn ctl_get(&self, key: &str) -> Result<String, CtlError> {
        let n = normal(key);
        let o = self.options();
        match n.as_str() {
            "branches" => return Ok(edit::show(&self.branch_list())),
            "srcmounts" => {
                let paths: Vec<String> = self
                    .branch_list()
                    .iter()
                    .map(|b| b.path.display().to_string())
                    .collect();
                return Ok(paths.join(":"));
            }
            "version" => return Ok(env!("CARGO_PKG_VERSION").to_string()),
            "pid" => return Ok(std::process::id().to_string()),
            _ => {}
        }
        if let Some(s) = find_ignored(key) {
            return Ok(s.shown.to_string());
        }
        if let Some(f) = n.strip_prefix("func.") {
            let f = Func::ALL
                .iter()
                .find(|x| x.name() == f)
                .ok_or_else(|| unknown(key))?;
            return Ok(o.policies.get(*f).name().to_string());
        }
        find(key).map(|k| (k.show)(&o)).ok_or_else(|| unknown(key))
    }

    /// Sets `key` to `value`, for every request that begins from now on. `dirs` are the
    /// directories a branch edit adds, opened by the client (see
    /// [`UnionFs::edit_branches`]). Returns what changed, for the log.
    pub fn ctl_set(&self, key: &str, value: &str, dirs: Vec<OwnedFd>) -> Result<String, CtlError> {
        let n = normal(key);
        let value = value.trim();
        match n.as_str() {
            "branches" | "srcmounts" => {
                let e = BranchEdit::parse(value).map_err(|e| {
                    CtlError::new(
                        libc::EINVAL,
                        format!("invalid value '{value}' for 'branches': {e}"),
                    )
                })?;
                return self.edit_branches(&e, dirs);
            }
            "version" | "pid" => {
                return Err(CtlError::new(
                    libc::EROFS,
                    format!("read-only option '{key}'"),
                ))
            }
            _ => {}
        }
        if COMMANDS.contains(&n.as_str()) {
            let closed = self.invalidate_nodes();
            return Ok(format!("{closed} node descriptors closed"));
        }
        if let Some(s) = find_ignored(key) {
            if !s.runtime {
                return Err(CtlError::new(
                    libc::EROFS,
                    format!("read-only option '{key}' (fixed when the daemon starts)"),
                ));
            }
            return Ok(format!("ignored: {}", s.why));
        }
        if !n.starts_with("func.") {
            let k = find(key).ok_or_else(|| unknown(key))?;
            if !k.settable {
                return Err(CtlError::new(
                    libc::EROFS,
                    format!("read-only option '{key}' (fixed when the daemon starts)"),
                ));
            }
        }
        self.update_options(|opts| {
            let mut s = Settings::over(opts.clone());
            s.apply(&n, value).map_err(|e| match e {
                OptionError::Unknown(_) => unknown(key),
                e => CtlError::new(libc::EINVAL, format!("invalid value: {e}")),
            })?;
            *opts = s.opts;
            Ok(())
        })?;
        Ok(format!("now {}", self.ctl_get(&n)?))
    }

    /// A per-file query (`basepath`, `relpath`, `fullpath`, `allpaths`, with or without the
    /// `user.mergerfs.` prefix) on union path `path`.
    pub fn ctl_query(&self, path: &str, what: &str) -> Result<Vec<Vec<u8>>, CtlError> {
        let what = what.trim().strip_prefix(PREFIX).unwrap_or(what.trim());
        self.query_path(path, what)
    }
}

/// Applies a config file's text (`--config`, re-read on SIGHUP) to the running union: its
/// options over the current ones and its `branches=`, if any, as the new branch list. All
/// or nothing: a malformed line, an unknown key or a change to an option fixed at start
/// changes nothing. Returns what changed.
pub fn reload(fs: &UnionFs, file: &str, text: &str) -> Result<String, CtlError> {
    reload_with(fs, file, text, None)
}

/// The branches of a config file as a process that sees the host's paths found them: globs
/// expanded ([`super::expand_globs`]) and each directory opened, in order (the namespace
/// sandbox's supervisor does this for the serving child, which sees no host path).
#[derive(Debug)]
pub struct HostBranches {
    /// The file's branches, expanded.
    pub branches: Vec<crate::union::Branch>,
    /// Each branch's directory, opened on the host, in the same order.
    pub dirs: Vec<OwnedFd>,
}

/// The branches config file `file` with `text` names, as [`HostBranches`]: expanded and
/// opened here. An error names the file and the branch.
pub fn host_branches(file: &str, text: &str) -> Result<HostBranches, CtlError> {
    let mut s = Settings::default();
    s.apply_file(file, text)
        .map_err(|e| CtlError::new(libc::EINVAL, e.to_string()))?;
    let branches = super::expand_globs(s.branches)
        .map_err(|e| CtlError::new(libc::ENOENT, format!("{file}: {e}")))?;
    let mut dirs = Vec::with_capacity(branches.len());
    for b in &branches {
        let fd = rustix::fs::open(
            &b.path,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| {
            CtlError::new(
                e.raw_os_error(),
                format!(
                    "{file}: branch {}: {}",
                    b.path.display(),
                    std::io::Error::from(e)
                ),
            )
        })?;
        dirs.push(fd);
    }
    Ok(HostBranches { branches, dirs })
}

/// [`reload`], with the file's branches found and opened by a process that sees the host
/// (`host`), or (`None`) expanded and opened here by path.
pub fn reload_with(
    fs: &UnionFs,
    file: &str,
    text: &str,
    host: Option<HostBranches>,
) -> Result<String, CtlError> {
    let before = fs.options();
    let mut s = Settings::over(before.clone());
    s.apply_file(file, text)
        .map_err(|e| CtlError::new(libc::EINVAL, e.to_string()))?;
    let fixed: Vec<&str> = KEYS
        .iter()
        .filter(|k| !k.settable && (k.show)(&before) != (k.show)(&s.opts))
        .map(|k| k.name)
        .collect();
    if !fixed.is_empty() {
        return Err(CtlError::new(
            libc::EROFS,
            format!("{file}: {} fixed when the daemon starts", fixed.join(", ")),
        ));
    }
    let (branches, dirs) = match host {
        Some(h) => (h.branches, h.dirs),
        None => {
            let b = super::expand_globs(std::mem::take(&mut s.branches))
                .map_err(|e| CtlError::new(libc::ENOENT, format!("{file}: {e}")))?;
            (b, Vec::new())
        }
    };
    let mut changes = Vec::new();
    if !branches.is_empty() && branches != fs.branch_list() {
        changes.push(fs.edit_branches(&BranchEdit::Set(branches), dirs)?);
    }
    let mut changed: Vec<String> = KEYS
        .iter()
        .filter(|k| (k.show)(&before) != (k.show)(&s.opts))
        .map(|k| format!("{}={}", k.name, (k.show)(&s.opts)))
        .collect();
    changed.extend(
        Func::ALL
            .iter()
            .filter(|f| before.policies.get(**f) != s.opts.policies.get(**f))
            .map(|f| format!("func.{}={}", f.name(), s.opts.policies.get(*f).name())),
    );
    if s.opts != before {
        fs.update_options(|o| {
            *o = s.opts;
            Ok(())
        })?;
    }
    changes.extend(changed);
    Ok(if changes.is_empty() {
        "no change".into()
    } else {
        changes.join("; ")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_mergerfs_shows_them() {
        assert_eq!(
            kebab(crate::fs::options::InodeCalc::HybridHash32),
            "hybrid-hash32"
        );
        assert_eq!(kebab(crate::fs::options::CacheFiles::AutoFull), "auto-full");
        assert_eq!(secs(Duration::from_millis(2500)), "2.5");
        assert_eq!(secs(Duration::from_secs(1)), "1");
        assert_eq!(
            normal("user.mergerfs.cache.negative_entry"),
            "cache.negative-entry"
        );
    }

    #[test]
    fn ctl_keys_and_option_names_are_the_same() {
        let keys: Vec<String> = keys().iter().map(|k| normal(k)).collect();
        let defaults = UnionOptions::default();
        // Every key ctl lists is accepted by -o and config files (virtiofsd's switches that
        // ctl shows, posix_acl and the like, bare).
        let applied = |k: &str| {
            super::super::registry::OPTIONS
                .iter()
                .any(|o| normal(o.name) == k)
        };
        for k in &keys {
            let v = match find(k) {
                Some(key) if applied(k) => (key.show)(&defaults),
                None if k.starts_with("func.") => "ff".into(),
                None if k == "branches" || k == "srcmounts" => "/tmp".into(),
                _ => String::new(),
            };
            Settings::default()
                .apply(k, &v)
                .unwrap_or_else(|e| panic!("ctl key {k}={v} refused by -o: {e}"));
        }
        // Every mergerfs-style name the registry knows is a ctl key (virtiofsd's switches and
        // the generic mount options are not mergerfs keys).
        let registry = super::super::registry::OPTIONS
            .iter()
            .map(|o| o.name)
            .filter(|n| *n != "no-xattr")
            .chain(
                IGNORED
                    .iter()
                    .filter(|s| s.origin == Origin::Mergerfs)
                    .map(|s| s.name),
            )
            .map(normal)
            .chain(Func::ALL.iter().map(|f| format!("func.{}", f.name())));
        for n in registry {
            assert!(keys.contains(&n), "option {n} is not a ctl key");
        }
    }

    #[test]
    fn every_settable_key_is_in_the_registry() {
        // A settable key the registry does not know would answer ENOATTR to a set.
        for k in KEYS.iter().filter(|k| k.settable) {
            let mut s = Settings::default();
            let v = (k.show)(&s.opts);
            s.apply(k.name, &v)
                .unwrap_or_else(|e| panic!("{}={v}: {e}", k.name));
            assert_eq!((k.show)(&s.opts), v, "{} round trip", k.name);
        }
    }
}
