//! What the vhost-user daemon and the host mount (`union-virtiofsd mount`) both take from the
//! command line: the union (branches, options, id translation), the confinement, the request
//! size limits, the worker count and the control socket. Checked once here; the vhost-only
//! settings (listener, queues, migration flags, upgrade) are `Config`'s, the mount's own are
//! `mount.rs`'s. No I/O beyond what `config` allows itself.

use log::LevelFilter;

use super::{
    apply_virtiofsd, check_branches_differ, check_contradictions, check_sandbox, early_log_level,
    expand_globs, id_map, migration, union_settings, ConfigError, Confinement,
    MAX_THREAD_POOL_SIZE,
};
use crate::args::{Args, MigrationMode, NegotiationMode, SandboxMode, SeccompAction};
use crate::fs::session::FindBy;
use crate::fs::FsConfig;
use crate::vhost::{MAX_PAGES_LIMIT, MAX_WRITE_LIMIT};

/// The settings every transport shares, checked.
#[derive(Clone, Debug)]
pub struct Shared {
    /// Log verbosity.
    pub log_level: LevelFilter,
    /// The filesystem settings.
    pub fs: FsConfig,
    /// What the confinement flags ask for.
    pub confinement: Confinement,
    /// `--max-pages` (1..=1020).
    pub max_pages: u16,
    /// `--max-write`.
    pub max_write: u32,
    /// `--thread-pool-size`, or the number of CPUs.
    pub thread_pool_size: usize,
    /// `--ctl-socket` (or `-o ctl-socket=`).
    pub ctl_socket: Option<std::path::PathBuf>,
    /// How the session moves to another daemon (`--migration-*`; vhost only).
    pub migration: crate::vhost::Migration,
    /// One line each for settings accepted but not (fully) honoured.
    pub notes: Vec<String>,
    /// The generic mount options named in `-o` or `--config` (normalized name, value), which
    /// a host mount honours.
    pub mount_options: Vec<(String, String)>,
    /// virtiofsd's legacy `-o sandbox=`, if given.
    pub legacy_sandbox: Option<SandboxMode>,
}

impl Shared {
    /// Checks and converts the shared settings of `args`, over the registry's defaults
    /// changed by `defaults` (`key`, `value`: applied before --config, -o and the flags).
    pub fn new(args: &Args, defaults: &[(&str, &str)]) -> Result<Self, ConfigError> {
        let mut settings = union_settings(args, defaults)?;
        let mut notes = std::mem::take(&mut settings.notes);
        let legacy = settings.virtiofsd.clone();
        apply_virtiofsd(args, &legacy, &mut settings, &mut notes)?;
        if let (Some(dir), Some(source)) = (&args.shared_dir, &legacy.source) {
            let real = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or(p.to_owned());
            if real(dir) != real(source) {
                // Only one of them would be served, the other dropped without a word.
                return Err(ConfigError::Contradicts {
                    first: "--shared-dir",
                    second: "-o source=",
                    why: "they name different directories as the shared directory",
                });
            }
        }
        let mut branches = Vec::new();
        if let Some(dir) = args.shared_dir.clone().or(legacy.source.clone()) {
            branches.push(crate::union::Branch {
                path: dir,
                mode: crate::union::BranchMode::RW,
                min_free: None,
                static_cache: false,
            });
        }
        branches.extend(args.branches.clone().map(|l| l.0).unwrap_or_default());
        branches.extend(args.branch.clone());
        if branches.is_empty() {
            branches = settings.branches.clone();
        }
        let mut branches = expand_globs(branches)?;
        if branches.is_empty() {
            return Err(ConfigError::NoBranches);
        }
        check_branches_differ(&branches)?;
        check_contradictions(args, &settings)?;
        if args.readonly || settings.readonly == Some(true) {
            // The whole share is read-only: every branch is RO, so every change is EROFS.
            for b in &mut branches {
                b.mode = crate::union::BranchMode::RO;
            }
        }
        let max_pages = u16::try_from(args.max_pages)
            .ok()
            .filter(|p| (1..=MAX_PAGES_LIMIT).contains(p))
            .ok_or(ConfigError::MaxPages(args.max_pages))?;
        let max_write = Some(args.max_write)
            .filter(|w| w % 4096 == 0 && (4096..=MAX_WRITE_LIMIT).contains(w))
            .ok_or(ConfigError::MaxWrite(args.max_write))?;
        let thread_pool_size = args.thread_pool_size.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
        if thread_pool_size > MAX_THREAD_POOL_SIZE {
            return Err(ConfigError::ThreadPoolSize(thread_pool_size));
        }

        let posix_acl = args
            .posix_acl
            .or(legacy.posix_acl)
            .unwrap_or(NegotiationMode::Never);
        let translating = !args.translate_uid.is_empty() || !args.translate_gid.is_empty();
        if translating && posix_acl != NegotiationMode::Never {
            return Err(ConfigError::TranslateWithAcl(posix_acl));
        }
        if args.migration_mode == Some(MigrationMode::FileHandles) {
            if args.migration_verify_handles {
                return Err(ConfigError::MigrationFlag("--migration-verify-handles"));
            }
            if args.migration_confirm_paths {
                return Err(ConfigError::MigrationFlag("--migration-confirm-paths"));
            }
        }
        let mut migration = migration(args);
        migration.export.handles_allowed = settings.opts.file_handles
            != crate::fs::options::FileHandles::Never
            || migration.export.find_by == FindBy::FileHandles
            || migration.export.verify_handles;
        let confinement = Confinement {
            sandbox: args
                .sandbox
                .or(legacy.sandbox)
                .unwrap_or(SandboxMode::Namespace),
            seccomp: args.seccomp.unwrap_or(SeccompAction::Kill),
            modcaps: args.modcaps.clone().or(legacy.modcaps.clone()),
            uid_map: args.uid_map.clone(),
            gid_map: args.gid_map.clone(),
            translate_uid: args.translate_uid.clone(),
            translate_gid: args.translate_gid.clone(),
            keep_sys_admin: settings.opts.cow,
            file_handles: migration.export.handles_allowed,
            unmount: false,
        };
        check_sandbox(&confinement, rustix::process::geteuid().is_root())?;
        Ok(Shared {
            log_level: early_log_level(args),
            fs: FsConfig {
                branches,
                opts: settings.opts,
                ids: crate::fs::Ids {
                    uid: id_map(&args.translate_uid)?,
                    gid: id_map(&args.translate_gid)?,
                },
            },
            confinement,
            max_pages,
            max_write,
            thread_pool_size,
            ctl_socket: args.ctl_socket.clone().or(settings.ctl_socket.clone()),
            migration,
            notes,
            mount_options: settings.mount,
            legacy_sandbox: legacy.sandbox,
        })
    }
}
