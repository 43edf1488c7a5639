//! Turns parsed `Args` into a checked `Config`: every cross-field rule lives here, and the
//! union options from --config, -o and typed flags go through the one registry. No I/O beyond
//! reading --config (and `config=` files), expanding branch globs, resolving branch paths (a
//! directory is one branch only) and validating an inherited `--fd`; branch directories are
//! opened later by `fs`.

pub mod ignored;
pub mod mount;
pub mod registry;
pub mod runtime;
pub mod shared;
mod summary;
pub mod virtiofsd;

use std::os::unix::io::RawFd;

use log::LevelFilter;

use crate::args::{
    Args, CachePolicy, CapChanges, IdMap, LogLevel, MigrationMode, NegotiationMode, SandboxMode,
    SeccompAction, Translate,
};
use crate::fs::session::FindBy;
use crate::fs::FsConfig;
use crate::union::Branch;
use crate::vhost::{DaemonConfig, Listen, MAX_PAGES_LIMIT, MAX_WRITE_LIMIT};
use registry::Settings;
use shared::Shared;

/// Largest accepted `--thread-pool-size`.
pub const MAX_THREAD_POOL_SIZE: usize = 1024;
/// Largest accepted `--num-request-queues` (vhost-user-backend maps queues to a 64-bit mask, and
/// one queue is the high-priority queue).
pub const MAX_REQUEST_QUEUES: u32 = 63;

/// Invalid command-line input (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Neither --shared-dir, --branches nor --branch was given.
    #[error("no branch given: use --shared-dir, --branches or --branch")]
    NoBranches,
    /// Neither --socket-path nor --fd was given.
    #[error("one of --socket-path or --fd is required")]
    NoListener,
    /// Both --socket-path and --fd were given.
    #[error("--socket-path and --fd are mutually exclusive")]
    TwoListeners,
    /// The inherited --fd is not a listening unix socket.
    #[error("--fd {fd}: not a listening unix socket: {source}")]
    BadFd {
        /// The fd number.
        fd: RawFd,
        /// Why it was rejected.
        source: std::io::Error,
    },
    /// --max-pages outside 1..=1020.
    #[error("--max-pages {0} is out of range 1..={MAX_PAGES_LIMIT}")]
    MaxPages(u32),
    /// --max-write not a multiple of 4096 in 4096..=1020 pages.
    #[error("--max-write {0} is not a multiple of 4096 in 4096..={MAX_WRITE_LIMIT}")]
    MaxWrite(u32),
    /// --num-request-queues outside 1..=63.
    #[error("--num-request-queues {0} is out of range 1..={MAX_REQUEST_QUEUES}")]
    RequestQueues(u32),
    /// --thread-pool-size too large.
    #[error("--thread-pool-size {0} is larger than {MAX_THREAD_POOL_SIZE}")]
    ThreadPoolSize(usize),
    /// --cache-timeout negative, not finite, or absurdly large.
    /// A union option (from -o, --config or a typed flag) is unknown or malformed.
    #[error(transparent)]
    Option(#[from] registry::OptionError),
    /// The --config file cannot be read.
    #[error("cannot read --config {path}: {source}")]
    ReadConfig {
        /// The file.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A branch path pattern is malformed or matches no directory.
    #[error("branch pattern '{0}' matches no directory")]
    Glob(String),
    /// --tag longer than the config space's 36 bytes, or empty.
    #[error("--tag '{0}': must be 1 to 36 bytes")]
    Tag(String),
    /// --socket-group names no group.
    #[error("--socket-group '{0}': no such group")]
    SocketGroup(String),
    /// --translate-uid/--translate-gid with POSIX ACLs (ACL entries would name untranslated ids).
    #[error("--translate-uid/--translate-gid cannot be used with --posix-acl={0:?} (translated ids would break POSIX ACLs)")]
    TranslateWithAcl(NegotiationMode),
    /// --translate-uid/--translate-gid rules that cannot be used together.
    #[error("--translate-uid/--translate-gid: {0}")]
    IdMap(#[from] crate::fs::idmap::IdMapError),
    /// An id map or chroot sandbox where virtiofsd refuses it (the check depends on the user).
    #[error("{0}")]
    Sandbox(&'static str),
    /// A --migration-* flag that only applies to the find-paths mode, with --migration-mode=file-handles.
    #[error("{0} cannot be used with --migration-mode=file-handles")]
    MigrationFlag(&'static str),
    /// `--upgrade` with `--fd`: the running daemon is found by its socket path.
    #[error("--upgrade needs --socket-path (the running daemon's), not --fd")]
    UpgradeWithFd,
    /// Two settings that cannot both hold (the later would silently undo the earlier).
    #[error("{first} contradicts {second}: {why}")]
    Contradicts {
        /// The one given first in the checks' order.
        first: &'static str,
        /// The other.
        second: &'static str,
        /// Why both cannot hold.
        why: &'static str,
    },
    /// The same directory given twice in the branch list (after symlinks are resolved).
    #[error("branch {again} is {first} again: a directory can be one branch only")]
    DuplicateBranch {
        /// The branch as given first.
        first: std::path::PathBuf,
        /// The branch as given again.
        again: std::path::PathBuf,
    },
    /// `--xattrmap` (or `-o xattrmap=`) rules that do not parse.
    #[error("invalid {option}: {source}")]
    XattrMap {
        /// How it was given: `--xattrmap` or `-o xattrmap`.
        option: &'static str,
        /// What is wrong, and in which rule.
        source: crate::fs::xattrmap::ParseError,
    },
}

/// What the confinement settings ask for (sandbox, seccomp, capabilities, id mapping).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confinement {
    /// `--sandbox` (default namespace, as virtiofsd).
    pub sandbox: SandboxMode,
    /// `--seccomp` (default kill, as virtiofsd).
    pub seccomp: SeccompAction,
    /// `--modcaps` (or `-o modcaps=`).
    pub modcaps: Option<CapChanges>,
    /// `--uid-map` ranges.
    pub uid_map: Vec<IdMap>,
    /// `--gid-map` ranges.
    pub gid_map: Vec<IdMap>,
    /// `--translate-uid` rules.
    pub translate_uid: Vec<Translate>,
    /// `--translate-gid` rules.
    pub translate_gid: Vec<Translate>,
    /// Keep CAP_SYS_ADMIN: `cow=true` writes overlayfs's `trusted.*` xattrs.
    pub keep_sys_admin: bool,
    /// Nodes may use file handles: keep CAP_DAC_READ_SEARCH (open_by_handle_at) and allow
    /// the two handle calls through seccomp.
    pub file_handles: bool,
    /// A host mount: allow umount2 through seccomp (it detaches itself on SIGTERM).
    pub unmount: bool,
}

/// The checked configuration of one daemon run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Log verbosity.
    pub log_level: LevelFilter,
    /// The vhost-user device settings.
    pub daemon: DaemonConfig,
    /// The filesystem settings.
    pub fs: FsConfig,
    /// What the confinement flags ask for.
    pub confinement: Confinement,
    /// `--rlimit-nofile` (None: min(1,000,000, fs.nr_open), see `sys::limits`; 0: leave it).
    pub rlimit_nofile: Option<u64>,
    /// One line each for settings that are accepted but not (fully) honoured, logged at start.
    pub notes: Vec<String>,
    /// `--config`, re-read on SIGHUP.
    pub config_file: Option<std::path::PathBuf>,
}

impl From<LogLevel> for LevelFilter {
    fn from(l: LogLevel) -> Self {
        match l {
            LogLevel::Error => LevelFilter::Error,
            LogLevel::Warn => LevelFilter::Warn,
            LogLevel::Info => LevelFilter::Info,
            LogLevel::Debug => LevelFilter::Debug,
            LogLevel::Trace => LevelFilter::Trace,
            LogLevel::Off => LevelFilter::Off,
        }
    }
}

/// Why the vhost-user device ignores `passthrough.io`.
pub const PASSTHROUGH_NOTE: &str = "passthrough.io: FUSE passthrough hands the kernel a host file, \
     which only a host mount (`union-virtiofsd mount`) can use; a guest reads through the device; ignored";

impl TryFrom<Args> for Config {
    type Error = ConfigError;

    fn try_from(args: Args) -> Result<Self, ConfigError> {
        let mut shared = Shared::new(&args, &[])?;
        if shared.fs.opts.passthrough_io != crate::fs::options::PassthroughIo::Off {
            // The guest's kernel has no descriptor of a host file to read through.
            shared.fs.opts.passthrough_io = crate::fs::options::PassthroughIo::Off;
            shared.notes.push(PASSTHROUGH_NOTE.into());
        }
        let listen = listen_of(&args)?;
        if let Some(tag) = &args.tag {
            if tag.is_empty() || tag.len() > 36 {
                return Err(ConfigError::Tag(tag.clone()));
            }
        }
        let socket_group = match &args.socket_group {
            Some(g) => Some(
                crate::sys::files::group_id(g)
                    .ok_or_else(|| ConfigError::SocketGroup(g.clone()))?,
            ),
            None => None,
        };
        let num_request_queues = u16::try_from(args.num_request_queues)
            .ok()
            .filter(|q| (1..=MAX_REQUEST_QUEUES as u16).contains(q))
            .ok_or(ConfigError::RequestQueues(args.num_request_queues))?;
        let upgrade = match (&args.upgrade, &listen) {
            (None, _) => None,
            (Some(p), Listen::Path(_)) => Some(p.clone()),
            (Some(_), Listen::Fd(_)) => return Err(ConfigError::UpgradeWithFd),
        };
        Ok(Config {
            log_level: shared.log_level,
            daemon: DaemonConfig {
                listen,
                thread_pool_size: shared.thread_pool_size,
                max_pages: shared.max_pages,
                max_write: shared.max_write,
                num_request_queues,
                tag: args.tag.clone(),
                socket_group,
                ctl_socket: shared.ctl_socket,
                allow_mmap: args.allow_mmap,
                migration: shared.migration,
                release_guest_memory: args.release_guest_memory,
                upgrade,
            },
            fs: shared.fs,
            confinement: shared.confinement,
            rlimit_nofile: args.rlimit_nofile,
            notes: shared.notes,
            config_file: args.config.clone(),
        })
    }
}

/// Where the vhost-user daemon listens: `--socket-path` (or virtiofsd's `--socket`) or `--fd`.
fn listen_of(args: &Args) -> Result<Listen, ConfigError> {
    let socket_path = args.socket_path.clone().or(args.socket.clone());
    match (socket_path, args.fd) {
        (Some(_), Some(_)) => Err(ConfigError::TwoListeners),
        (None, None) => Err(ConfigError::NoListener),
        (Some(p), None) => Ok(Listen::Path(p)),
        (None, Some(fd)) => {
            crate::sys::fd::check_listening_socket(fd)
                .map_err(|source| ConfigError::BadFd { fd, source })?;
            Ok(Listen::Fd(fd))
        }
    }
}

/// A directory is one branch only: the same path twice (after symlinks) would be searched,
/// listed and changed twice (an `epall` unlink fails on the second). A path that does not
/// resolve is left for `fs` to report (it names the missing branch).
fn check_branches_differ(branches: &[Branch]) -> Result<(), ConfigError> {
    let mut seen: Vec<(std::path::PathBuf, &Branch)> = Vec::with_capacity(branches.len());
    for b in branches {
        let Ok(real) = std::fs::canonicalize(&b.path) else {
            continue;
        };
        if let Some((_, first)) = seen.iter().find(|(p, _)| *p == real) {
            return Err(ConfigError::DuplicateBranch {
                first: first.path.clone(),
                again: b.path.clone(),
            });
        }
        seen.push((real, b));
    }
    Ok(())
}

/// Switches that contradict each other on one command line, refused rather than letting one
/// silently win. (virtiofsd's own pairs, `--killpriv-v2`/`--no-killpriv-v2` and
/// `--announce-submounts`/`--no-announce-submounts`, keep its rule: the last one wins; and
/// virtiofsd's legacy `-o no_xattr,xattrmap=` keeps its meaning, the map implying xattrs.)
fn check_contradictions(args: &Args, settings: &Settings) -> Result<(), ConfigError> {
    let on = |m: Option<NegotiationMode>| m.is_some_and(|m| m != NegotiationMode::Never);
    if args.no_xattr {
        let needs = [
            (on(args.posix_acl), "--posix-acl"),
            (on(args.security_label), "--security-label"),
            (args.xattrmap.is_some(), "--xattrmap"),
        ];
        if let Some((_, flag)) = needs.into_iter().find(|(given, _)| *given) {
            return Err(ConfigError::Contradicts {
                first: "--no-xattr",
                second: flag,
                why: "it needs extended attributes",
            });
        }
    }
    let readonly = if args.readonly { "--readonly" } else { "-o ro" };
    if (args.readonly || settings.readonly == Some(true)) && settings.opts.cow {
        return Err(ConfigError::Contradicts {
            first: readonly,
            second: "cow=true",
            why: "copy-on-write copies changed files up to an RW branch, and a read-only share has none",
        });
    }
    Ok(())
}

/// The `--translate-uid` or `--translate-gid` rules as one map.
fn id_map(rules: &[crate::args::Translate]) -> Result<crate::fs::idmap::IdMap, ConfigError> {
    use crate::args::TranslateKind as T;
    use crate::fs::idmap::Kind;
    let rules: Vec<_> = rules
        .iter()
        .map(|r| {
            let kind = match r.kind {
                T::Guest => Kind::Guest,
                T::Host => Kind::Host,
                T::SquashGuest => Kind::SquashGuest,
                T::SquashHost => Kind::SquashHost,
                T::ForbidGuest => Kind::ForbidGuest,
                T::Map => Kind::Map,
            };
            (kind, r.from, r.to, r.count)
        })
        .collect();
    Ok(crate::fs::idmap::IdMap::new(&rules)?)
}

/// virtiofsd's rules: chroot needs root; id maps are for an unprivileged daemon in the
/// namespace sandbox (root needs no user namespace).
fn check_sandbox(c: &Confinement, root: bool) -> Result<(), ConfigError> {
    if c.sandbox == SandboxMode::Chroot && !root {
        return Err(ConfigError::Sandbox(
            "--sandbox chroot can only be used by root (use --sandbox namespace or none)",
        ));
    }
    if (!c.uid_map.is_empty() || !c.gid_map.is_empty())
        && (root || c.sandbox != SandboxMode::Namespace)
    {
        return Err(ConfigError::Sandbox(
            "--uid-map/--gid-map can only be used by an unprivileged user with --sandbox namespace",
        ));
    }
    Ok(())
}

/// The log level in force from the first line on: `-d`, `-o loglevel=`, then `--log-level`
/// (the last given wins only among equals: an explicit --log-level other than the default beats
/// the legacy spellings).
pub fn early_log_level(args: &Args) -> LevelFilter {
    if args.log_level != LogLevel::Info {
        return args.log_level.into();
    }
    if args.debug {
        return LevelFilter::Debug;
    }
    let mut s = Settings::default();
    for list in &args.options {
        // Errors are reported later, by Config::try_from.
        let _ = s.apply_list(list);
    }
    s.virtiofsd.log_level.unwrap_or(LevelFilter::Info)
}

/// Maps virtiofsd's typed flags and legacy keys onto the union options, and records a note for
/// each setting that is accepted but cannot be honoured by this daemon.
fn apply_virtiofsd(
    args: &Args,
    legacy: &virtiofsd::Legacy,
    s: &mut Settings,
    notes: &mut Vec<String>,
) -> Result<(), ConfigError> {
    const DAY: &str = "86400";
    match args.cache.or(legacy.cache) {
        None | Some(CachePolicy::Auto) => {}
        Some(CachePolicy::Always) => {
            s.apply("cache.files", "full")?;
            s.apply("cache.readdir", "true")?;
            s.apply("cache.attr", DAY)?;
            s.apply("cache.entry", DAY)?;
        }
        Some(CachePolicy::Metadata) => {
            s.apply("cache.files", "off")?;
            s.apply("cache.readdir", "true")?;
            s.apply("cache.attr", DAY)?;
            s.apply("cache.entry", DAY)?;
        }
        Some(CachePolicy::Never) => {
            s.apply("cache.files", "off")?;
            s.apply("cache.attr", "0")?;
            s.apply("cache.entry", "0")?;
            // As virtiofsd: READDIRPLUS would fill the guest's caches it must not keep.
            s.opts.readdirplus = false;
        }
    }
    if let Some(t) = legacy.timeout {
        s.opts.cache_attr = t;
        s.opts.cache_entry = t;
    }
    if args.no_killpriv_v2 || legacy.killpriv_v2 == Some(false) {
        s.opts.killpriv_v2 = false;
    }
    if args.no_readdirplus || legacy.readdirplus == Some(false) {
        s.opts.readdirplus = false;
    }
    let on = |m: Option<NegotiationMode>| m.is_some_and(|m| m != NegotiationMode::Never);
    let negotiate = |m: NegotiationMode| match m {
        NegotiationMode::Never => crate::fs::options::Negotiate::Never,
        NegotiationMode::Auto => crate::fs::options::Negotiate::Auto,
        NegotiationMode::Always => crate::fs::options::Negotiate::Always,
    };
    if let Some(m) = args.posix_acl.or(legacy.posix_acl) {
        s.opts.posix_acl = negotiate(m);
    }
    if let Some(m) = args.security_label.or(legacy.security_label) {
        s.opts.security_label = negotiate(m);
    }
    // As virtiofsd: either implies --xattr.
    if on(args.posix_acl.or(legacy.posix_acl)) || on(args.security_label.or(legacy.security_label))
    {
        s.opts.xattr = crate::fs::options::XattrMode::Passthrough;
    }
    if let Some(map) = xattrmap(args, legacy)? {
        if !map.catches_all() {
            notes.push("--xattrmap: no rule matches every name: names no rule matches are refused (EPERM) and left out of lists (virtiofsd 1.14 panics on them)".into());
        }
        // As virtiofsd: a map implies --xattr.
        s.opts.xattr = crate::fs::options::XattrMode::Passthrough;
        s.opts.xattrmap = Some(map);
    }
    if args.no_announce_submounts || legacy.announce_submounts == Some(false) {
        s.opts.announce_submounts = false;
    } else if args.announce_submounts || legacy.announce_submounts == Some(true) {
        s.opts.announce_submounts = true;
    }
    if args.writeback || legacy.writeback.is_some() {
        s.opts.writeback = args.writeback || legacy.writeback == Some(true);
    }
    if let Some(on) = legacy.locks {
        s.opts.host_locks = on;
    }
    s.opts.preserve_noatime = args.preserve_noatime;
    s.opts.allow_idmap |= args.allow_idmap;
    s.opts.test_panic_on_lookup = args
        .test_panic_on_lookup
        .as_ref()
        .and_then(|n| std::ffi::CString::new(n.as_str()).ok());
    if let Some(m) = args.inode_file_handles {
        use crate::args::InodeFileHandles as A;
        use crate::fs::options::FileHandles as F;
        s.opts.file_handles = match m {
            A::Never => F::Never,
            A::Prefer => F::Prefer,
            A::Mandatory => F::Mandatory,
        };
    }
    Ok(())
}

/// `--xattrmap`, else `-o xattrmap=` (both must parse), as rules.
fn xattrmap(
    args: &Args,
    legacy: &virtiofsd::Legacy,
) -> Result<Option<crate::fs::xattrmap::XattrMap>, ConfigError> {
    let parse = |option, text: &Option<String>| {
        text.as_deref()
            .map(crate::fs::xattrmap::XattrMap::parse)
            .transpose()
            .map_err(|source| ConfigError::XattrMap { option, source })
    };
    let legacy = parse("-o xattrmap", &legacy.xattrmap)?;
    Ok(parse("--xattrmap", &args.xattrmap)?.or(legacy))
}

/// Applies, in order, the --config file, every -o list and the typed flags to the defaults.
fn union_settings(args: &Args, defaults: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    let mut s = Settings::default();
    for (key, value) in defaults {
        s.apply(key, value)?;
    }
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadConfig {
            path: path.clone(),
            source,
        })?;
        s.apply_file(&path.display().to_string(), &text)?;
    }
    for list in &args.options {
        s.apply_list(list)?;
    }
    let typed = [
        ("category.create", &args.category_create),
        ("category.search", &args.category_search),
        ("category.action", &args.category_action),
        ("minfreespace", &args.minfreespace),
        ("cache.attr", &args.cache_timeout),
        ("cache.entry", &args.cache_timeout),
    ];
    for (key, value) in typed {
        if let Some(v) = value {
            s.apply(key, v)?;
        }
    }
    if args.no_xattr {
        s.apply("xattr", "nosys")?;
    } else if args.xattr {
        s.apply("xattr", "passthrough")?;
    }
    Ok(s)
}

/// Expands glob patterns in branch paths (sorted, directories only), as mergerfs does at start.
pub fn expand_globs(branches: Vec<Branch>) -> Result<Vec<Branch>, ConfigError> {
    let mut out = Vec::with_capacity(branches.len());
    for b in branches {
        let text = b.path.to_string_lossy();
        if !is_glob(&text) {
            out.push(b);
            continue;
        }
        let paths = glob_directories(&text).ok_or_else(|| ConfigError::Glob(text.to_string()))?;
        out.extend(paths.into_iter().map(|path| Branch { path, ..b.clone() }));
    }
    Ok(out)
}

/// Whether branch path `text` is a glob pattern (expanded by [`glob_directories`]).
pub fn is_glob(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

/// The directories glob `pattern` matches, sorted; what is not a directory (a regular file
/// beside the disks) is skipped, as mergerfs does. `None` for a bad pattern or no directory.
/// The one expansion for branches at start, in a `--config` re-read and in `ctl`.
pub fn glob_directories(pattern: &str) -> Option<Vec<std::path::PathBuf>> {
    let mut paths: Vec<_> = glob::glob(pattern)
        .ok()?
        .filter_map(Result::ok)
        .filter(|p| p.is_dir())
        .collect();
    paths.sort();
    (!paths.is_empty()).then_some(paths)
}

/// `--migration-*`, with virtiofsd's meaning (`handles_allowed` is left for the caller, who
/// knows whether nodes use file handles).
fn migration(args: &Args) -> crate::vhost::Migration {
    use crate::fs::session::{ExportOptions, OnError};
    let find_by = match args.migration_mode {
        Some(MigrationMode::FileHandles) => FindBy::FileHandles,
        _ => FindBy::Paths,
    };
    crate::vhost::Migration {
        export: ExportOptions {
            handles_allowed: false,
            find_by,
            verify_handles: args.migration_verify_handles,
            confirm_paths: args.migration_confirm_paths,
        },
        on_error: match args.migration_on_error {
            Some(crate::args::MigrationOnError::GuestError) => OnError::GuestError,
            _ => OnError::Abort,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::options::XattrMode;
    use crate::union::BranchMode;
    use clap::Parser;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    fn parse(argv: &[&str]) -> Result<Config, ConfigError> {
        let mut full = vec!["union-virtiofsd"];
        full.extend_from_slice(argv);
        Config::try_from(Args::try_parse_from(full).expect("clap accepts"))
    }

    #[test]
    fn defaults() {
        let c = parse(&["--socket-path", "/tmp/s", "--shared-dir", "/srv"]).unwrap();
        assert_eq!(c.daemon.listen, Listen::Path("/tmp/s".into()));
        assert_eq!(c.daemon.max_pages, 1020);
        assert_eq!(c.daemon.num_request_queues, 1);
        assert!(c.daemon.thread_pool_size >= 1);
        assert_eq!(c.log_level, LevelFilter::Info);
        assert_eq!(c.fs.opts.cache_entry, Duration::from_secs(1));
        // Off, as in virtiofsd: a guest asks no xattr question after the first ENOSYS.
        assert_eq!(c.fs.opts.xattr, XattrMode::Nosys);
        assert_eq!(c.fs.branches.len(), 1);
        assert_eq!(c.fs.branches[0].mode, BranchMode::RW);
        let c = parse(&[
            "--socket-path=/s",
            "--shared-dir=/a",
            "-o",
            "path-queries=true",
        ])
        .unwrap();
        assert_eq!(
            c.fs.opts.xattr,
            XattrMode::Passthrough,
            "path-queries implies xattrs"
        );
    }

    #[test]
    fn the_control_socket_is_beside_the_socket_unless_named() {
        let base = ["--socket-path=/run/s", "--shared-dir=/srv"];
        let c = parse(&base).unwrap();
        assert_eq!(c.daemon.ctl_path(), Some("/run/s.ctl".into()));
        assert_eq!(c.daemon.explicit_ctl_socket(), None);
        let c = parse(&[&base[..], &["-o", "ctl-socket=/run/c"]].concat()).unwrap();
        assert_eq!(c.daemon.ctl_path(), Some("/run/c".into()));
        assert_eq!(c.daemon.explicit_ctl_socket(), Some(Path::new("/run/c")));
        let both = [
            &base[..],
            &["-o", "ctl-socket=/run/c", "--ctl-socket=/run/d"],
        ]
        .concat();
        assert_eq!(
            parse(&both).unwrap().daemon.ctl_path(),
            Some("/run/d".into())
        );
        // Naming the default is no file of its own.
        let c = parse(&[&base[..], &["--ctl-socket=/run/s.ctl"]].concat()).unwrap();
        assert_eq!(c.daemon.explicit_ctl_socket(), None);
        assert!(parse(&[&base[..], &["-o", "ctl-socket="]].concat()).is_err());
        // Its own vhost socket is refused before anything is made.
        let c = parse(&[&base[..], &["--ctl-socket=/run/s"]].concat()).unwrap();
        let e = crate::vhost::check_listen(&c.daemon).unwrap_err();
        assert!(e.is_bad_input());
        assert_eq!(
            e.to_string(),
            "--ctl-socket /run/s: the daemon's own vhost-user socket is there"
        );
    }

    #[test]
    fn a_glob_skips_files_and_sorts() {
        let d = tempfile::tempdir().unwrap();
        for n in ["d2", "d1"] {
            std::fs::create_dir(d.path().join(n)).unwrap();
        }
        std::fs::write(d.path().join("d3"), "").unwrap();
        let pattern = format!("{}/d*", d.path().display());
        assert_eq!(
            glob_directories(&pattern).unwrap(),
            [d.path().join("d1"), d.path().join("d2")]
        );
        assert_eq!(
            glob_directories(&format!("{}/d3*", d.path().display())),
            None
        );
        assert_eq!(glob_directories("/no/such/[dir"), None);
    }

    #[test]
    fn branches_are_ordered_shared_dir_list_then_single() {
        let c = parse(&[
            "--socket-path=/s",
            "--branch",
            "/c=NC",
            "--branches",
            "/a=RO:/b",
            "--shared-dir",
            "/z",
            "--branch=/d=ro",
        ])
        .unwrap();
        let paths: Vec<PathBuf> = c.fs.branches.iter().map(|b| b.path.clone()).collect();
        assert_eq!(paths, ["/z", "/a", "/b", "/c", "/d"].map(PathBuf::from));
        assert_eq!(c.fs.branches[1].mode, BranchMode::RO);
        assert_eq!(c.fs.branches[3].mode, BranchMode::NC);
    }

    #[test]
    fn bad_inputs_name_the_problem() {
        assert!(matches!(
            parse(&["--socket-path=/s"]),
            Err(ConfigError::NoBranches)
        ));
        assert!(matches!(
            parse(&["--shared-dir=/a"]),
            Err(ConfigError::NoListener)
        ));
        let base = ["--socket-path=/s", "--shared-dir=/a"];
        let with = |extra: &[&str]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            parse(&v)
        };
        assert!(matches!(
            with(&["--max-pages=0"]),
            Err(ConfigError::MaxPages(0))
        ));
        assert!(matches!(
            with(&["--max-pages=1021"]),
            Err(ConfigError::MaxPages(1021))
        ));
        assert!(matches!(
            with(&["--max-pages=99999"]),
            Err(ConfigError::MaxPages(99999))
        ));
        assert!(with(&["--max-pages=1"]).is_ok());
        for bad in [0, 4095, 4097, 1021 * 4096, u32::MAX] {
            assert!(
                matches!(with(&[&format!("--max-write={bad}")]), Err(ConfigError::MaxWrite(b)) if b == bad),
                "--max-write={bad}"
            );
        }
        for good in [4096, 1 << 20, 1020 * 4096] {
            let c = with(&[&format!("--max-write={good}")]).unwrap();
            assert_eq!(c.daemon.max_write, good);
        }
        assert_eq!(with(&[]).unwrap().daemon.max_write, 512 << 10, "default");
        assert!(matches!(
            with(&["--num-request-queues=0"]),
            Err(ConfigError::RequestQueues(0))
        ));
        assert!(matches!(
            with(&["--num-request-queues=64"]),
            Err(ConfigError::RequestQueues(64))
        ));
        assert!(matches!(
            with(&["--thread-pool-size=100000"]),
            Err(ConfigError::ThreadPoolSize(_))
        ));
        for bad in [
            "--cache-timeout=-1",
            "--cache-timeout=NaN",
            "-ocategory.create=nope",
        ] {
            let e = with(&[bad]).unwrap_err();
            assert!(matches!(e, ConfigError::Option(_)), "{bad}: {e}");
        }
        assert!(matches!(
            with(&["--branch=/no/such/dir*"]),
            Err(ConfigError::Glob(_))
        ));
        assert!(matches!(
            parse(&["--fd=987654", "--shared-dir=/a"]),
            Err(ConfigError::BadFd { fd: 987654, .. })
        ));
    }

    #[test]
    fn clap_rejects_malformed_values() {
        let bad: [&[&str]; 5] = [
            &["x", "--socket-path=/s", "--fd=3"],
            &["x", "--branch=/a=XX"],
            &["x", "--branches=/a=RW:=RO"],
            &["x", "--max-pages=abc"],
            &["x", "--log-level=loud"],
        ];
        for argv in bad {
            assert!(Args::try_parse_from(argv).is_err(), "{argv:?}");
        }
    }

    #[test]
    fn the_vhost_device_ignores_passthrough_and_says_why() {
        use crate::fs::options::PassthroughIo;
        for o in ["passthrough.io=rw", "passthrough=ro"] {
            let c = parse(&["--socket-path=/s", "--shared-dir=/a", "-o", o]).unwrap();
            assert_eq!(c.fs.opts.passthrough_io, PassthroughIo::Off);
            assert_eq!(c.notes, [PASSTHROUGH_NOTE], "{o}");
        }
        let c = parse(&[
            "--socket-path=/s",
            "--shared-dir=/a",
            "-o",
            "passthrough.io=off",
        ]);
        assert!(c.unwrap().notes.is_empty());
        assert!(parse(&[
            "--socket-path=/s",
            "--shared-dir=/a",
            "-o",
            "passthrough.io=yes"
        ])
        .is_err());
    }

    #[test]
    fn virtiofsd_flags_keep_its_syntax() {
        let base = ["--socket-path=/s", "--shared-dir=/a"];
        let with = |extra: &[&str]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            parse(&v)
        };
        // A bare --posix-acl is `always` and does not swallow the next flag; no notes.
        use crate::fs::options::Negotiate;
        let c = parse(&["--posix-acl", "--socket-path=/s", "--shared-dir=/a"]).unwrap();
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        assert_eq!(c.fs.opts.posix_acl, Negotiate::Always);
        assert_eq!(c.fs.opts.security_label, Negotiate::Never);
        let c = with(&["--posix-acl=never"]).unwrap();
        assert_eq!(c.fs.opts.posix_acl, Negotiate::Never);
        let c = with(&["--posix-acl=auto", "--security-label"]).unwrap();
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        assert_eq!(c.fs.opts.posix_acl, Negotiate::Auto);
        assert_eq!(c.fs.opts.security_label, Negotiate::Always);
        let c = with(&["-o", "security_label"]).unwrap();
        assert_eq!(c.fs.opts.security_label, Negotiate::Always);
        assert_eq!(c.fs.opts.xattr, crate::fs::options::XattrMode::Passthrough);
        assert!(matches!(
            with(&["--posix-acl=auto", "--translate-uid=guest:0:1000:1"]),
            Err(ConfigError::TranslateWithAcl(NegotiationMode::Auto))
        ));
        assert!(matches!(
            with(&["-o", "posix_acl", "--translate-gid=map:0:1000:1"]),
            Err(ConfigError::TranslateWithAcl(NegotiationMode::Always))
        ));
        assert!(with(&["--translate-uid=squash-guest:0:1000:65536"]).is_ok());
        assert!(matches!(
            with(&["--migration-mode=file-handles", "--migration-confirm-paths"]),
            Err(ConfigError::MigrationFlag("--migration-confirm-paths"))
        ));
        let c = with(&[
            "--migration-mode=find-paths",
            "--migration-verify-handles",
            "--migration-on-error=guest-error",
            "--inode-file-handles=never",
        ])
        .unwrap();
        assert!(c.notes.is_empty());
        let m = c.daemon.migration;
        assert_eq!(m.export.find_by, FindBy::Paths);
        assert!(m.export.verify_handles && !m.export.confirm_paths);
        // Verifying handles makes them, so the sandbox allows it even without handle nodes.
        assert!(m.export.handles_allowed && c.confinement.file_handles);
        assert_eq!(m.on_error, crate::fs::session::OnError::GuestError);
        let c = with(&["--inode-file-handles=never"]).unwrap();
        assert!(!c.daemon.migration.export.handles_allowed && !c.confinement.file_handles);
        let c = with(&["--migration-mode=file-handles"]).unwrap();
        assert_eq!(c.daemon.migration.export.find_by, FindBy::FileHandles);
        assert_eq!(
            c.daemon.migration.on_error,
            crate::fs::session::OnError::Abort
        );
        // virtiofsd lowercases --cache, --sandbox and --log-level; cache=never drops READDIRPLUS.
        let c = with(&["--cache=NEVER", "--sandbox=None", "--log-level=DEBUG"]).unwrap();
        assert!(!c.fs.opts.readdirplus);
        assert_eq!(c.fs.opts.cache_entry, Duration::ZERO);
        assert_eq!(c.confinement.sandbox, SandboxMode::None);
        assert_eq!(c.log_level, LevelFilter::Debug);
        assert!(with(&[]).unwrap().fs.opts.readdirplus);
        // Directory listings stay cached with always and metadata, as virtiofsd's; mergerfs's
        // key sets the same.
        assert!(!c.fs.opts.cache_readdir && !with(&[]).unwrap().fs.opts.cache_readdir);
        for cache in ["--cache=always", "--cache=metadata"] {
            assert!(with(&[cache]).unwrap().fs.opts.cache_readdir, "{cache}");
        }
        assert!(
            with(&["-o", "cache.readdir=true"])
                .unwrap()
                .fs
                .opts
                .cache_readdir
        );
        // --modcaps is typed, from the flag or the legacy key.
        let c = with(&["--modcaps=+sys_admin:-CHOWN"]).unwrap();
        let m = c.confinement.modcaps.unwrap();
        assert_eq!(m.0[0].cap, caps::Capability::CAP_SYS_ADMIN);
        assert!(m.0[0].add && !m.0[1].add);
        let c = parse(&["--socket-path=/s", "-o", "source=/a,modcaps=-fsetid"]).unwrap();
        assert_eq!(c.confinement.modcaps.unwrap().to_string(), "-fsetid");
        assert_eq!(c.fs.branches[0].path, PathBuf::from("/a"));
    }

    #[test]
    fn xattrmap_rules_are_parsed_or_refused() {
        let base = ["--socket-path=/s", "--shared-dir=/a"];
        let with = |extra: &[&str]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            parse(&v)
        };
        let c = with(&["--xattrmap=:map::user.virtiofs.:"]).unwrap();
        let expected = crate::fs::xattrmap::XattrMap::parse(":map::user.virtiofs.:").unwrap();
        assert_eq!(c.fs.opts.xattrmap.as_ref(), Some(&expected));
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        assert!(with(&[]).unwrap().fs.opts.xattrmap.is_none());
        // The legacy key, and a map implying --xattr as in virtiofsd.
        let c = with(&[
            "-o",
            "no_xattr,xattrmap=/prefix/all/trusted./user.vm.//ok/all///",
        ])
        .unwrap();
        assert_eq!(c.fs.opts.xattr, XattrMode::Passthrough);
        assert!(c.fs.opts.xattrmap.is_some());
        // --xattrmap wins over the legacy key, but both must parse.
        let c = with(&["-o", "xattrmap=:bad:all:::", "--xattrmap=:map::u.:"]).unwrap();
        assert_eq!(
            c.fs.opts.xattrmap,
            Some(crate::fs::xattrmap::XattrMap::parse(":map::u.:").unwrap())
        );
        let e = with(&["-o", "xattrmap=:bad:al:::", "--xattrmap=:map::u.:"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid -o xattrmap: rule 1: unknown scope 'al' (expected all, client or server)"
        );
        let e = with(&["--xattrmap=:ok:all::: :prefix:all:trusted.:user.vm."]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid --xattrmap: rule 2: no ':' closing its prepend field (a rule's first \
             character is its separator, as ':' in :type:scope:key:prepend: or \
             :map:key:prepend:)"
        );
        assert!(matches!(
            with(&["--xattrmap= "]),
            Err(ConfigError::XattrMap {
                option: "--xattrmap",
                source: crate::fs::xattrmap::ParseError::NoRules
            })
        ));
        // Without a catch-all rule: accepted (as virtiofsd), with a note.
        let c = with(&["--xattrmap=:prefix:client:trusted.:user.vm.:"]).unwrap();
        assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
        assert!(c.notes[0].starts_with("--xattrmap: no rule matches every name"));
    }

    #[test]
    fn legacy_and_mergerfs_keys_mix_in_one_string() {
        let c = parse(&[
            "--socket-path=/s",
            "-o",
            "source=/a,category.create=mfs,no_flock,cache=none,minfreespace=1G,xattr=nosys",
            "-o",
            "loglevel=warn,statfs_ignore=ro",
            "--branch=/b=RO",
        ])
        .unwrap();
        let paths: Vec<_> = c.fs.branches.iter().map(|b| b.path.clone()).collect();
        assert_eq!(paths, [PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(c.fs.branches[0].mode, BranchMode::RW);
        use crate::fs::options::Func;
        use crate::union::policy::Policy;
        assert_eq!(c.fs.opts.policies.get(Func::Create), Policy::Mfs);
        assert_eq!(c.fs.opts.minfreespace, 1 << 30);
        assert_eq!(c.fs.opts.xattr, XattrMode::Nosys);
        assert_eq!(c.fs.opts.cache_attr, Duration::ZERO);
        assert_eq!(c.log_level, LevelFilter::Warn);
        // no_flock: the guest keeps its locks to itself, as it asks.
        assert!(!c.fs.opts.host_locks);
        assert!(c.notes.is_empty(), "{:?}", c.notes);
    }

    #[test]
    fn malformed_virtiofsd_values_are_refused_by_clap() {
        let bad: [&[&str]; 7] = [
            &["x", "--modcaps=sys_admin"],
            &["x", "--modcaps=+no_such_cap"],
            &["x", "--modcaps=+chown::-fsetid"],
            &["x", "--migration-mode=teleport"],
            &["x", "--migration-on-error=ignore"],
            &["x", "--posix-acl=sometimes"],
            &["x", "--uid-map=0:1000:1"],
        ];
        for argv in bad {
            assert!(Args::try_parse_from(argv).is_err(), "{argv:?}");
        }
        let ok = Args::try_parse_from(["x", "--migration-on-error=guest-error"]).unwrap();
        assert_eq!(
            ok.migration_on_error,
            Some(crate::args::MigrationOnError::GuestError)
        );
    }

    #[test]
    fn contradictions_are_refused_and_timeouts_apply() {
        let flags = ["x", "--socket-path=/s", "--shared-dir=/a"];
        for pair in [["--xattr", "--no-xattr"], ["--no-xattr", "--xattr"]] {
            let argv = [&flags[..], &pair[..]].concat();
            assert!(Args::try_parse_from(argv).is_err(), "{pair:?}");
        }
        let base = ["--socket-path=/s", "--shared-dir=/a"];
        let with = |extra: &[&str]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            parse(&v)
        };
        for (extra, second) in [
            (&["--no-xattr", "--posix-acl"][..], "--posix-acl"),
            (&["--security-label=auto", "--no-xattr"], "--security-label"),
            (&["--no-xattr", "--xattrmap=:map::u.:"], "--xattrmap"),
        ] {
            assert!(
                matches!(with(extra), Err(ConfigError::Contradicts { first: "--no-xattr", second: s, .. }) if s == second),
                "{extra:?}"
            );
        }
        assert!(with(&["--no-xattr", "--posix-acl=never"]).is_ok());
        assert!(matches!(
            with(&["-o", "source=/b"]),
            Err(ConfigError::Contradicts {
                first: "--shared-dir",
                ..
            })
        ));
        assert!(with(&["-o", "source=/a"]).is_ok());
        for extra in [
            &["--readonly", "-o", "cow=true"][..],
            &["-o", "ro,cow=true"],
        ] {
            assert!(
                matches!(
                    with(extra),
                    Err(ConfigError::Contradicts {
                        second: "cow=true",
                        ..
                    })
                ),
                "{extra:?}"
            );
        }
        // virtiofsd's own pairs: the last one wins, as there.
        assert!(
            !with(&["--killpriv-v2", "--no-killpriv-v2"])
                .unwrap()
                .fs
                .opts
                .killpriv_v2
        );
        let c = parse(&["--socket-path=/s", "--shared-dir=/a", "--no-xattr"]).unwrap();
        assert_eq!(c.fs.opts.xattr, XattrMode::Nosys);
        let c = parse(&["--socket-path=/s", "--shared-dir=/a", "--xattr"]).unwrap();
        assert_eq!(c.fs.opts.xattr, XattrMode::Passthrough);
        let c = parse(&["--socket-path=/s", "--shared-dir=/a", "--cache-timeout=0.5"]).unwrap();
        assert_eq!(c.fs.opts.cache_attr, Duration::from_millis(500));
    }
}
