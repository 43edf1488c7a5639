//! Command-line surface (clap derive only). Values are typed here; every cross-field check
//! belongs to `config`, never to this file.

use std::os::unix::io::RawFd;
use std::path::PathBuf;

use clap::{ArgAction, Parser, ValueEnum};

use crate::union::Branch;

mod commands;
pub use commands::{Command, CtlArgs, CtlCommand, CtlQuery, MountArgs};

/// Log verbosity, as accepted by `--log-level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Only errors.
    Error,
    /// Errors and warnings.
    Warn,
    /// Normal operational messages.
    Info,
    /// One line per FUSE request.
    Debug,
    /// Everything, including library internals.
    Trace,
    /// Nothing at all.
    Off,
}

/// virtiofsd's `--cache` policies, mapped onto the union's cache options by `config`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CachePolicy {
    /// Names and attributes cached briefly, file data cached while unchanged (the default).
    Auto,
    /// Names, attributes and data cached for a day (the share is not changed from the host).
    Always,
    /// Names and attributes cached for a day, file data never.
    Metadata,
    /// Nothing cached in the guest (`none` in virtiofsd's legacy `-o cache=`).
    #[value(alias = "none")]
    Never,
}

/// virtiofsd's `--sandbox` modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SandboxMode {
    /// New mount, PID and network namespaces with the shared directories as the only content.
    Namespace,
    /// chroot into the shared directory (hosts without namespaces).
    Chroot,
    /// No sandbox.
    None,
}

/// virtiofsd's `--seccomp` actions for a system call outside the allowlist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SeccompAction {
    /// No filter.
    None,
    /// Kill the daemon.
    Kill,
    /// Log the call and allow it.
    Log,
    /// Send SIGSYS.
    Trap,
}

/// virtiofsd's `--inode-file-handles` modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum InodeFileHandles {
    /// No file handles: a node the daemon closed is reopened by its path.
    Never,
    /// File handles where the filesystem makes them and the daemon may open them (the
    /// default).
    #[value(alias = "fallback")]
    Prefer,
    /// File handles on every branch, or refuse to start.
    Mandatory,
}

/// virtiofsd's negotiation modes for `--posix-acl` and `--security-label`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NegotiationMode {
    /// Do not enable the feature.
    Never,
    /// Enable it if the guest supports it.
    Auto,
    /// Require it.
    Always,
}

/// virtiofsd's `--migration-mode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MigrationMode {
    /// Send the paths of the inodes the guest holds.
    FindPaths,
    /// Send file handles.
    FileHandles,
}

/// virtiofsd's `--migration-on-error` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MigrationOnError {
    /// Fail the migration.
    Abort,
    /// Finish it; the guest gets errors for the inodes that could not be migrated.
    GuestError,
}

/// A command-line value that does not have the expected shape.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{value}': expected {expected}")]
pub struct BadValue {
    /// What was given.
    pub value: String,
    /// What is accepted.
    pub expected: &'static str,
}

impl BadValue {
    fn new(value: &str, expected: &'static str) -> Self {
        BadValue {
            value: value.to_string(),
            expected,
        }
    }
}

/// One `--modcaps` item: a capability added to or removed from the set the daemon keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapChange {
    /// `+` (keep it) or `-` (drop it).
    pub add: bool,
    /// The capability.
    pub cap: caps::Capability,
}

/// A `--modcaps` (or legacy `-o modcaps=`) list: `+sys_admin:-chown` (names with or without
/// `cap_`, any case, as virtiofsd accepts them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapChanges(pub Vec<CapChange>);

impl std::str::FromStr for CapChanges {
    type Err = BadValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadValue::new(s, "(+|-)CAPABILITY:… such as +sys_admin:-chown");
        let one = |item: &str| -> Result<CapChange, BadValue> {
            let add = match item.chars().next() {
                Some('+') => true,
                Some('-') => false,
                _ => return Err(bad()),
            };
            let name = item[1..].to_ascii_uppercase();
            let name = name.strip_prefix("CAP_").unwrap_or(&name);
            let cap = format!("CAP_{name}").parse().map_err(|_| bad())?;
            Ok(CapChange { add, cap })
        };
        s.split(':')
            .map(one)
            .collect::<Result<_, _>>()
            .map(CapChanges)
    }
}

impl std::fmt::Display for CapChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, c) in self.0.iter().enumerate() {
            let name = c.cap.to_string().to_ascii_lowercase();
            let name = name.strip_prefix("cap_").unwrap_or(&name).to_owned();
            let sep = if i == 0 { "" } else { ":" };
            write!(f, "{sep}{}{name}", if c.add { '+' } else { '-' })?;
        }
        Ok(())
    }
}

/// A mergerfs branch list as given to `--branches` (`/a=RW:/b=RO`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchList(pub Vec<Branch>);

impl std::str::FromStr for BranchList {
    type Err = crate::union::branch::ParseBranchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Branch::parse_list(s).map(BranchList)
    }
}

/// Why the fstab form's first positional argument is not a branch list.
#[derive(Debug, thiserror::Error)]
pub enum NotBranches {
    /// An entry without a `/`: a mistyped command rather than a path.
    #[error("neither a command nor a branch list (BRANCHES are paths with a '/': /mnt/a:/mnt/b)")]
    NoSlash,
    /// An entry that is not a branch.
    #[error(transparent)]
    Branch(#[from] crate::union::branch::ParseBranchError),
}

/// The fstab form's BRANCHES: a `--branches` list whose every entry is a path with a `/`, so
/// that it is never a command's name (a branch in the current directory is `./NAME`).
fn fstab_branches(v: &str) -> Result<BranchList, NotBranches> {
    let list = Branch::parse_list(v)?;
    match list.iter().all(|b| b.path.to_string_lossy().contains('/')) && !list.is_empty() {
        true => Ok(BranchList(list)),
        false => Err(NotBranches::NoSlash),
    }
}

/// The fstab form's arguments, as `mergerfs -o OPTIONS BRANCHES MOUNTPOINT`: the top-level
/// command's positionals (`cli` adds them beside [`Args`], whose options `mount` shares).
#[derive(Clone, Debug, clap::Args)]
pub struct FstabArgs {
    /// The fstab form: mount the union of BRANCHES (a `--branches` list; each entry a path
    /// with a `/`) on MOUNTPOINT, as `union-virtiofsd mount`, and go to the background once
    /// it is mounted (unless -f). mount(8) runs it through mount.fuse3 for an fstab line of
    /// type fuse.union-virtiofsd.
    #[arg(
        value_name = "BRANCHES",
        value_parser = fstab_branches,
        requires = "fstab_mountpoint",
        conflicts_with = "branches"
    )]
    pub fstab_branches: Option<BranchList>,

    /// The fstab form's mount point.
    #[arg(value_name = "MOUNTPOINT")]
    pub fstab_mountpoint: Option<PathBuf>,
}

/// The command line of union-virtiofsd.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "union-virtiofsd",
    version,
    propagate_version = true,
    about = "vhost-user virtio-fs backend serving a mergerfs-style union of host directories",
    long_about = "vhost-user virtio-fs backend serving a mergerfs-style union of host \
directories.\n\nWithout a command it serves: QEMU, libvirt or cloud-hypervisor start it with \
--socket-path (or --fd) and the branches; the guest mounts the share with \
`mount -t virtiofs TAG /mnt`. The commands below are the host's tools around a daemon.",
    args_conflicts_with_subcommands = true,
    disable_help_subcommand = true,
    subcommand_value_name = "COMMAND",
    subcommand_help_heading = "Commands"
)]
pub struct Args {
    /// A tool instead of the daemon (ctl, man, completions); options then follow it.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Path of the vhost-user unix socket to create and listen on.
    #[arg(long, value_name = "PATH", conflicts_with = "fd")]
    pub socket_path: Option<PathBuf>,

    /// An inherited, already listening unix socket file descriptor (as passed by libvirt).
    #[arg(long, value_name = "N")]
    pub fd: Option<RawFd>,

    /// The control socket `union-virtiofsd ctl` reaches (default `<socket-path>.ctl`; with
    /// `--fd`, none unless given here or as `ctl-socket=PATH` in `-o` or `--config`).
    #[arg(long, value_name = "PATH")]
    pub ctl_socket: Option<PathBuf>,

    /// A branch `PATH[=RW|RO|NC[,MINFREE][,static]]` (default RW); repeatable, appended after
    /// --branches. `static`: the host never changes it, so the guest caches it long.
    #[arg(long = "branch", value_name = "PATH[=MODE]")]
    pub branch: Vec<Branch>,

    /// A mergerfs branch list such as `/a=RW:/b=RO`; placed after --shared-dir.
    #[arg(long, value_name = "LIST")]
    pub branches: Option<BranchList>,

    /// virtiofsd compatibility: share DIR as a single read-write branch (comes first).
    #[arg(long, value_name = "DIR")]
    pub shared_dir: Option<PathBuf>,

    /// Worker threads for costly requests (large reads, namespace changes…; cheap ones are
    /// served on the queue thread) (default: number of CPUs); 0 serves everything on the queue
    /// thread. `mount`: the threads reading /dev/fuse (default: 4 per CPU; at least 2).
    #[arg(hide_short_help = true, long, value_name = "N")]
    pub thread_pool_size: Option<usize>,

    /// Largest FUSE request in pages (1..=1020); the effective value is also capped by the
    /// request queue size minus 4.
    #[arg(hide_short_help = true, long, value_name = "N", default_value_t = 1020)]
    pub max_pages: u32,

    /// Largest WRITE payload in bytes (a multiple of 4096, 4096..=4177920); also capped by
    /// --max-pages. READs still grow to --max-pages: a guest sends a larger O_DIRECT write
    /// as pieces of this size at once, which it prepares while the daemon copies the first.
    #[arg(hide_short_help = true, long, value_name = "BYTES", default_value_t = crate::vhost::DEFAULT_MAX_WRITE)]
    pub max_write: u32,

    /// How often, in seconds, while requests flow, the daemon drops its mappings of the guest
    /// memory it has touched (0.01..=3600): the pages stay the guest's, but no longer count in
    /// the daemon's RSS nor fill its page tables; 0 keeps them mapped, as virtiofsd does.
    #[arg(hide_short_help = true, long, value_name = "SECS", default_value = "1", value_parser = release_interval)]
    pub release_guest_memory: std::time::Duration,

    /// Number of request queues offered to the guest (besides the high-priority queue).
    #[arg(hide_short_help = true, long, value_name = "N", default_value_t = 1)]
    pub num_request_queues: u32,

    /// Print the vhost-user backend capabilities as JSON and exit.
    #[arg(long)]
    pub print_capabilities: bool,

    /// Self-test of the confinement: once confined, make one system call outside the seccomp
    /// allowlist (personality(2) query), so that `--seccomp` can be seen to act. Not in --help.
    #[arg(long, hide = true)]
    pub test_forbidden_syscall: bool,

    /// Self-test of the lock-poisoning policy: a LOOKUP of NAME panics while it holds the node
    /// table's lock. Not in --help.
    #[arg(long, hide = true, value_name = "NAME")]
    pub test_panic_on_lookup: Option<String>,

    /// Log verbosity.
    #[arg(long, value_enum, ignore_case = true, value_name = "LEVEL", default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,

    /// How long, in seconds, the guest may cache names and attributes (sets cache.attr and
    /// cache.entry; default 1).
    #[arg(hide_short_help = true, long, value_name = "SECS")]
    pub cache_timeout: Option<String>,

    /// mergerfs-style union options and virtiofsd's legacy keys, `KEY=VALUE,...` (repeatable;
    /// see the lists below).
    #[arg(short = 'o', long = "option", value_name = "KEY=VALUE,...")]
    pub options: Vec<String>,

    /// A file of `key=value` lines with the same names as -o (may also hold `branches=`);
    /// applied before -o and the typed flags.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Policy for creating entries (same as -o category.create=POLICY).
    #[arg(long, value_name = "POLICY")]
    pub category_create: Option<String>,

    /// Policy for finding entries (same as -o category.search=POLICY).
    #[arg(long, value_name = "POLICY")]
    pub category_search: Option<String>,

    /// Policy for changing entries (same as -o category.action=POLICY).
    #[arg(long, value_name = "POLICY")]
    pub category_action: Option<String>,

    /// Minimum free space for a branch to receive new files (same as -o minfreespace=SIZE).
    #[arg(long, value_name = "SIZE")]
    pub minfreespace: Option<String>,

    /// Pass extended attributes through (off by default, as in virtiofsd: the guest's first
    /// xattr request gets ENOSYS and it asks no more).
    #[arg(long, conflicts_with = "no_xattr", action = ArgAction::SetTrue)]
    pub xattr: bool,

    /// Do not support extended attributes (the default; refused with --xattr, --posix-acl,
    /// --security-label and --xattrmap, which need them).
    #[arg(long, action = ArgAction::SetTrue)]
    pub no_xattr: bool,

    // ---- virtiofsd 1.14's command line (launchers pass it unchanged) ----
    /// vhost-user socket path [deprecated alias of --socket-path].
    #[arg(hide_short_help = true, long = "socket", value_name = "PATH", conflicts_with_all = ["fd", "socket_path"])]
    pub socket: Option<PathBuf>,

    /// Group that owns the vhost-user socket (the socket becomes group read/writable).
    #[arg(
        hide_short_help = true,
        long,
        value_name = "GROUP",
        conflicts_with = "fd"
    )]
    pub socket_group: Option<String>,

    /// The tag the device advertises in its config space (VHOST_USER_PROTOCOL_F_CONFIG; at
    /// most 36 bytes). QEMU supplies its own tag and ignores this one.
    #[arg(hide_short_help = true, long, value_name = "TAG")]
    pub tag: Option<String>,

    /// POSIX ACL support (implies --xattr); a bare --posix-acl is `always`: the guest
    /// enforces ACLs, default ACLs are inherited, set-group-ID is cleared as the kernel does.
    #[arg(hide_short_help = true, long, value_enum, value_name = "MODE", require_equals = true, num_args = 0..=1,
          default_missing_value = "always")]
    pub posix_acl: Option<NegotiationMode>,

    /// Rules renaming, refusing or hiding xattr names between guest and host, in virtiofsd's
    /// syntax (implies --xattr), e.g. `:map::user.virtiofs.:` or
    /// `:prefix:all:trusted.:user.vm.::ok:all:::`.
    #[arg(hide_short_help = true, long, value_name = "RULES")]
    pub xattrmap: Option<String>,

    /// Security label support (implies --xattr); a bare --security-label is `always`: the
    /// security context the guest sends is set on each new file before it gets its name.
    #[arg(hide_short_help = true, long, value_enum, value_name = "MODE", require_equals = true, num_args = 0..=1,
          default_missing_value = "always")]
    pub security_label: Option<NegotiationMode>,

    /// Sandbox mechanism isolating the daemon.
    #[arg(long, value_enum, ignore_case = true, value_name = "MODE")]
    pub sandbox: Option<SandboxMode>,

    /// Action on a system call outside the allowlist.
    #[arg(hide_short_help = true, long, value_enum, value_name = "ACTION")]
    pub seccomp: Option<SeccompAction>,

    /// Change the capability set kept by the daemon, e.g. +sys_admin:-chown.
    #[arg(hide_short_help = true, long, value_name = "(+|-)CAP:…")]
    pub modcaps: Option<CapChanges>,

    /// The whole share is read-only, whatever the branch modes: every change is EROFS.
    #[arg(long)]
    pub readonly: bool,

    /// Tell the guest which directories are mount points, so that each host filesystem gets
    /// its own st_dev there (the default).
    #[arg(hide_short_help = true, long, overrides_with = "no_announce_submounts")]
    pub announce_submounts: bool,

    /// Do not tell the guest which directories are mount points.
    #[arg(hide_short_help = true, long, overrides_with = "announce_submounts")]
    pub no_announce_submounts: bool,

    /// How nodes the guest holds are kept: file handles (reopened with open_by_handle_at, needs
    /// CAP_DAC_READ_SEARCH) or reopened by path; never more than a few hundred descriptors
    /// (default prefer).
    #[arg(hide_short_help = true, long, value_enum, value_name = "MODE")]
    pub inode_file_handles: Option<InodeFileHandles>,

    /// virtiofsd's caching policy (auto, always, metadata, never): sets cache.files,
    /// cache.attr and cache.entry.
    #[arg(long, value_enum, ignore_case = true, value_name = "POLICY")]
    pub cache: Option<CachePolicy>,

    /// Allow shared mmap of files the guest does not cache (--cache=never|metadata, -o
    /// direct_io): negotiates FUSE_DIRECT_IO_ALLOW_MMAP. Only safe when nothing else changes
    /// the shared files.
    #[arg(hide_short_help = true, long)]
    pub allow_mmap: bool,

    /// Do not offer READDIRPLUS.
    #[arg(hide_short_help = true, long)]
    pub no_readdirplus: bool,

    /// Writeback caching in the guest (FUSE_WRITEBACK_CACHE): its page cache holds writes and
    /// sends them later in large requests. For a share no one else writes to meanwhile.
    #[arg(hide_short_help = true, long)]
    pub writeback: bool,

    /// Honour O_DIRECT from the guest (always done here).
    #[arg(hide_short_help = true, long)]
    pub allow_direct_io: bool,

    /// Negotiate FUSE_HANDLE_KILLPRIV_V2 (the default here, unlike virtiofsd).
    #[arg(hide_short_help = true, long, overrides_with = "no_killpriv_v2")]
    pub killpriv_v2: bool,

    /// Do not negotiate FUSE_HANDLE_KILLPRIV_V2 (the guest kernel clears privileges).
    #[arg(hide_short_help = true, long, overrides_with = "killpriv_v2")]
    pub no_killpriv_v2: bool,

    /// Pass O_NOATIME from guest opens to the host (by default it is dropped: the host
    /// refuses it for files the opener does not own).
    #[arg(hide_short_help = true, long)]
    pub preserve_noatime: bool,

    /// Offer FUSE_ALLOW_IDMAP, so that the guest may make idmapped mounts of the share.
    /// Requests that create nothing then carry no caller: the daemon acts for them as the
    /// guest's root (through --translate-uid/gid), after the guest's kernel checked them.
    #[arg(hide_short_help = true, long)]
    pub allow_idmap: bool,

    /// Log to syslog (/dev/log) instead of stderr (errors are also printed on stderr); falls
    /// back to stderr with a warning when there is no syslog socket.
    #[arg(hide_short_help = true, long)]
    pub syslog: bool,

    /// Set the open-file limit (soft and hard) to N (0 leaves it unchanged; default:
    /// min(1,000,000, fs.nr_open), or the hard limit where it may not be raised).
    #[arg(hide_short_help = true, long, value_name = "N")]
    pub rlimit_nofile: Option<u64>,

    /// A uid range for the daemon's user namespace, `:ns_uid:host_uid:count:` (repeatable).
    #[arg(hide_short_help = true, long, value_name = ":NS:HOST:COUNT:")]
    pub uid_map: Vec<IdMap>,

    /// A gid range for the daemon's user namespace, `:ns_gid:host_gid:count:` (repeatable).
    #[arg(hide_short_help = true, long, value_name = ":NS:HOST:COUNT:")]
    pub gid_map: Vec<IdMap>,

    /// Guest/host uid translation, `TYPE:SOURCE:TARGET:COUNT` (repeatable).
    #[arg(hide_short_help = true, long, value_name = "TYPE:SRC:DST:COUNT")]
    pub translate_uid: Vec<Translate>,

    /// Guest/host gid translation, `TYPE:SOURCE:TARGET:COUNT` (repeatable).
    #[arg(hide_short_help = true, long, value_name = "TYPE:SRC:DST:COUNT")]
    pub translate_gid: Vec<Translate>,

    /// How the source of a migration describes the guest's files to the destination:
    /// `find-paths` (default; by their paths) or `file-handles` (by file handle, which
    /// needs CAP_DAC_READ_SEARCH on the destination).
    #[arg(hide_short_help = true, long, value_enum, value_name = "MODE")]
    pub migration_mode: Option<MigrationMode>,

    /// What the migration destination does with a file it cannot find again: `abort`
    /// (default; the migration fails and the source goes on) or `guest-error` (that file
    /// answers EIO in the guest).
    #[arg(hide_short_help = true, long, value_enum, value_name = "MODE")]
    pub migration_on_error: Option<MigrationOnError>,

    /// The migration source also sends each file's handle, and the destination checks that
    /// what it found by path is that file.
    #[arg(hide_short_help = true, long)]
    pub migration_verify_handles: bool,

    /// The migration source checks each file's path still leads to it before it sends it.
    #[arg(hide_short_help = true, long)]
    pub migration_confirm_paths: bool,

    /// Upgrade in place: take over the session of the daemon running on the same
    /// `--socket-path` (PIDFILE is its `<socket>.pid`): its front-end connection, guest
    /// memory, rings and the guest's files and locks. Start it with the running daemon's
    /// options; the old daemon exits once this one has answered its first request.
    #[arg(hide_short_help = true, long, value_name = "PIDFILE")]
    pub upgrade: Option<std::path::PathBuf>,

    /// Log level debug [deprecated virtiofsd flag].
    #[arg(hide_short_help = true, short = 'd')]
    pub debug: bool,

    /// Stay in the foreground: the fstab form (BRANCHES MOUNTPOINT) otherwise goes to the
    /// background once mounted, as mergerfs does; the daemon and `mount` always stay (also
    /// virtiofsd's flag).
    #[arg(hide_short_help = true, short = 'f')]
    pub foreground: bool,
}

/// One `--uid-map`/`--gid-map` range: `:namespace_id:host_id:count:`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdMap {
    /// First id inside the namespace.
    pub inside: u32,
    /// First id on the host.
    pub outside: u32,
    /// How many ids.
    pub count: u32,
}

impl std::str::FromStr for IdMap {
    type Err = BadValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(':').collect();
        let bad = || BadValue::new(s, ":namespace_id:host_id:count:");
        let [_, a, b, c, _] = parts[..] else {
            return Err(bad());
        };
        let n = |x: &str| x.parse::<u32>().map_err(|_| bad());
        Ok(IdMap {
            inside: n(a)?,
            outside: n(b)?,
            count: n(c)?,
        })
    }
}

/// How a `--translate-uid/gid` range maps ids (virtiofsd's types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TranslateKind {
    /// 1:1 guest range to host range.
    Guest,
    /// 1:1 host range to guest range.
    Host,
    /// A guest range to one host id.
    SquashGuest,
    /// A host range to one guest id.
    SquashHost,
    /// A guest range refused.
    ForbidGuest,
    /// Both directions 1:1.
    Map,
}

/// One `--translate-uid/gid` rule: `TYPE:SOURCE:TARGET:COUNT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Translate {
    /// The kind of mapping.
    pub kind: TranslateKind,
    /// First id of the source range.
    pub from: u32,
    /// First id of the target range (unused by forbid-guest).
    pub to: u32,
    /// How many ids.
    pub count: u32,
}

impl std::str::FromStr for Translate {
    type Err = BadValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadValue::new(s, "TYPE:SOURCE:TARGET:COUNT");
        let parts: Vec<&str> = s.split(':').collect();
        let n = |x: &str| x.parse::<u32>().map_err(|_| bad());
        let kind = match parts.first().copied() {
            Some("guest") => TranslateKind::Guest,
            Some("host") => TranslateKind::Host,
            Some("squash-guest") => TranslateKind::SquashGuest,
            Some("squash-host") => TranslateKind::SquashHost,
            Some("forbid-guest") => TranslateKind::ForbidGuest,
            Some("map") => TranslateKind::Map,
            _ => return Err(bad()),
        };
        match parts[1..] {
            [a, b, c] => Ok(Translate {
                kind,
                from: n(a)?,
                to: n(b)?,
                count: n(c)?,
            }),
            [a, c] if kind == TranslateKind::ForbidGuest => Ok(Translate {
                kind,
                from: n(a)?,
                to: 0,
                count: n(c)?,
            }),
            _ => Err(bad()),
        }
    }
}

/// `--release-guest-memory`: 0, or seconds in 0.01..=3600.
fn release_interval(v: &str) -> Result<std::time::Duration, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| *s == 0.0 || (0.01..=3600.0).contains(s))
        .map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| "expected 0 or a number of seconds in 0.01..=3600".to_owned())
}
