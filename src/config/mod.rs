//! Turns parsed `Args` into a checked `Config`: every cross-field rule lives here, and the
//! union options from --config, -o and typed flags go through the one registry. No I/O beyond
//! reading --config, expanding branch globs and validating an inherited `--fd`; branch
//! directories are opened later by `fs`.

pub mod registry;

use std::os::unix::io::RawFd;

use log::LevelFilter;

use crate::args::{Args, LogLevel};
use crate::fs::FsConfig;
use crate::union::Branch;
use crate::vhost::{DaemonConfig, Listen, MAX_PAGES_LIMIT};
use registry::Settings;

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
}

impl From<LogLevel> for LevelFilter {
    fn from(l: LogLevel) -> Self {
        match l {
            LogLevel::Error => LevelFilter::Error,
            LogLevel::Warn => LevelFilter::Warn,
            LogLevel::Info => LevelFilter::Info,
            LogLevel::Debug => LevelFilter::Debug,
            LogLevel::Trace => LevelFilter::Trace,
        }
    }
}

impl TryFrom<Args> for Config {
    type Error = ConfigError;

    fn try_from(args: Args) -> Result<Self, ConfigError> {
        let settings = union_settings(&args)?;
        let listen = match (args.socket_path, args.fd) {
            (Some(_), Some(_)) => return Err(ConfigError::TwoListeners),
            (None, None) => return Err(ConfigError::NoListener),
            (Some(p), None) => Listen::Path(p),
            (None, Some(fd)) => {
                crate::sys::fd::check_listening_socket(fd)
                    .map_err(|source| ConfigError::BadFd { fd, source })?;
                Listen::Fd(fd)
            }
        };

        let mut branches = Vec::new();
        if let Some(dir) = args.shared_dir {
            branches.push(crate::union::Branch {
                path: dir,
                mode: crate::union::BranchMode::RW,
                min_free: None,
            });
        }
        branches.extend(args.branches.map(|l| l.0).unwrap_or_default());
        branches.extend(args.branch);
        if branches.is_empty() {
            branches = settings.branches.clone();
        }
        let branches = expand_globs(branches)?;
        if branches.is_empty() {
            return Err(ConfigError::NoBranches);
        }

        let max_pages = u16::try_from(args.max_pages)
            .ok()
            .filter(|p| (1..=MAX_PAGES_LIMIT).contains(p))
            .ok_or(ConfigError::MaxPages(args.max_pages))?;
        let num_request_queues = u16::try_from(args.num_request_queues)
            .ok()
            .filter(|q| (1..=MAX_REQUEST_QUEUES as u16).contains(q))
            .ok_or(ConfigError::RequestQueues(args.num_request_queues))?;
        let thread_pool_size = args.thread_pool_size.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
        if thread_pool_size > MAX_THREAD_POOL_SIZE {
            return Err(ConfigError::ThreadPoolSize(thread_pool_size));
        }

        Ok(Config {
            log_level: args.log_level.into(),
            daemon: DaemonConfig {
                listen,
                thread_pool_size,
                max_pages,
                num_request_queues,
            },
            fs: FsConfig {
                branches,
                opts: settings.opts,
            },
        })
    }
}

/// Applies, in order, the --config file, every -o list and the typed flags to the defaults.
fn union_settings(args: &Args) -> Result<Settings, ConfigError> {
    let mut s = Settings::default();
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
fn expand_globs(branches: Vec<Branch>) -> Result<Vec<Branch>, ConfigError> {
    let mut out = Vec::with_capacity(branches.len());
    for b in branches {
        let text = b.path.to_string_lossy();
        if !text.contains(['*', '?', '[']) {
            out.push(b);
            continue;
        }
        let bad = || ConfigError::Glob(text.to_string());
        let mut paths: Vec<_> = glob::glob(&text)
            .map_err(|_| bad())?
            .filter_map(Result::ok)
            .filter(|p| p.is_dir())
            .collect();
        if paths.is_empty() {
            return Err(bad());
        }
        paths.sort();
        out.extend(paths.into_iter().map(|path| Branch { path, ..b.clone() }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::options::XattrMode;
    use crate::union::BranchMode;
    use clap::Parser;
    use std::path::PathBuf;
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
        assert_eq!(c.fs.opts.xattr, XattrMode::Passthrough);
        assert_eq!(c.fs.branches.len(), 1);
        assert_eq!(c.fs.branches[0].mode, BranchMode::RW);
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
    fn xattr_last_flag_wins_and_timeouts_apply() {
        let c = parse(&[
            "--socket-path=/s",
            "--shared-dir=/a",
            "--xattr",
            "--no-xattr",
        ])
        .unwrap();
        assert_eq!(c.fs.opts.xattr, XattrMode::Nosys);
        let c = parse(&[
            "--socket-path=/s",
            "--shared-dir=/a",
            "--no-xattr",
            "--xattr",
        ])
        .unwrap();
        assert_eq!(c.fs.opts.xattr, XattrMode::Passthrough);
        let c = parse(&["--socket-path=/s", "--shared-dir=/a", "--cache-timeout=0.5"]).unwrap();
        assert_eq!(c.fs.opts.cache_attr, Duration::from_millis(500));
    }
}
