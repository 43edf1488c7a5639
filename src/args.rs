//! Command-line surface (clap derive only). Values are typed here; every cross-field check
//! belongs to `config`, never to this file.

use std::os::unix::io::RawFd;
use std::path::PathBuf;

use clap::{ArgAction, Parser, ValueEnum};

use crate::union::Branch;

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

/// The command line of union-virtiofsd.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "union-virtiofsd",
    version,
    about = "vhost-user virtio-fs backend serving a mergerfs-style union of host directories"
)]
pub struct Args {
    /// Path of the vhost-user unix socket to create and listen on.
    #[arg(long, value_name = "PATH", conflicts_with = "fd")]
    pub socket_path: Option<PathBuf>,

    /// An inherited, already listening unix socket file descriptor (as passed by libvirt).
    #[arg(long, value_name = "N")]
    pub fd: Option<RawFd>,

    /// A branch `PATH[=RW|RO|NC]` (default RW); repeatable, appended after --branches.
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
    /// thread.
    #[arg(long, value_name = "N")]
    pub thread_pool_size: Option<usize>,

    /// Largest FUSE request in pages (1..=1020); the effective value is also capped by the
    /// request queue size minus 4.
    #[arg(long, value_name = "N", default_value_t = 1020)]
    pub max_pages: u32,

    /// Number of request queues offered to the guest (besides the high-priority queue).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub num_request_queues: u32,

    /// Print the vhost-user backend capabilities as JSON and exit.
    #[arg(long)]
    pub print_capabilities: bool,

    /// Log verbosity.
    #[arg(long, value_enum, value_name = "LEVEL", default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,

    /// How long, in seconds, the guest may cache names and attributes (sets cache.attr and
    /// cache.entry; default 1).
    #[arg(long, value_name = "SECS")]
    pub cache_timeout: Option<String>,

    /// mergerfs-style union options `KEY=VALUE,...` (repeatable; see the list below).
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

    /// Pass extended attributes through (default).
    #[arg(long, overrides_with = "no_xattr", action = ArgAction::SetTrue)]
    pub xattr: bool,

    /// Do not support extended attributes.
    #[arg(long, overrides_with = "xattr", action = ArgAction::SetTrue)]
    pub no_xattr: bool,
}
