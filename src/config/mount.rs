//! The checked settings of `union-virtiofsd mount MOUNTPOINT`: the shared ones (`shared.rs`)
//! plus the kernel mount's own, taken from the generic mount options mergerfs passes on
//! (`allow_other`, `default_permissions`, `nonempty`, `fsname=`, `noexec`…), which the vhost
//! daemon ignores. No I/O: the mount point itself is checked by `fusedev` when it mounts.

use std::path::PathBuf;

use log::LevelFilter;

use super::{ConfigError, Shared};
use crate::args::{Args, SandboxMode};
use crate::fs::options::{CacheFiles, PassthroughIo};

/// The kernel mount's options, with mergerfs's meanings and defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountOptions {
    /// `allow_other`: users other than the mounter may use the mount (default: when run as
    /// root, as mergerfs; not through fusermount3).
    pub allow_other: bool,
    /// `default_permissions` (mergerfs's `kernel-permissions-check`, default true): the kernel
    /// checks modes before a request is sent.
    pub default_permissions: bool,
    /// `nonempty`: mount over a directory that has entries.
    pub nonempty: bool,
    /// `fsname=`: the mount's source in /proc/mounts (default `union-virtiofsd`).
    pub fsname: String,
    /// `subtype=`: the type is `fuse.<subtype>` (default `union-virtiofsd`).
    pub subtype: String,
    /// `ro` or `--readonly`: a read-only mount.
    pub readonly: bool,
    /// `noexec`.
    pub noexec: bool,
    /// `noatime`.
    pub noatime: bool,
    /// `suid`: set-user-ID bits take effect (default: `nosuid`).
    pub suid: bool,
    /// `dev`: device files may be opened (default: `nodev`).
    pub dev: bool,
}

/// The generic mount options a host mount honours (normalized names), whose "ignored" notes
/// are the vhost daemon's only.
const HONOURED: &[&str] = &[
    "allow-other",
    "default-permissions",
    "kernel-permissions-check",
    "nonempty",
    "fsname",
    "subtype",
    "noexec",
    "exec",
    "noatime",
    "atime",
    "suid",
    "nosuid",
    "dev",
    "nodev",
];

/// Where a host mount's defaults are mergerfs's rather than virtiofsd's: extended attributes
/// pass through (a guest asks once and remembers ENOSYS; on the host, tools expect xattrs),
/// and the kernel keeps a file's pages when its mtime moves (no FUSE_AUTO_INVAL_DATA: a
/// rewrite through the mount would otherwise read every block again after each write).
const MOUNT_DEFAULTS: &[(&str, &str)] =
    &[("xattr", "passthrough"), ("cache.auto_inval_data", "false")];

/// The checked configuration of one host mount.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// Where the union is mounted.
    pub mountpoint: PathBuf,
    /// The kernel mount's options.
    pub options: MountOptions,
    /// Log verbosity.
    pub log_level: LevelFilter,
    /// What every transport shares (union, confinement, limits, threads, ctl socket).
    pub shared: Shared,
    /// `--rlimit-nofile`.
    pub rlimit_nofile: Option<u64>,
    /// `--config`, re-read on SIGHUP.
    pub config_file: Option<PathBuf>,
    /// Whether the daemon mounts with mount(2) itself (it has CAP_SYS_ADMIN: root) rather than
    /// through fusermount3 (an ordinary user).
    pub privileged: bool,
    /// Threads reading /dev/fuse (each with its own clone of the device): `--thread-pool-size`,
    /// or 4 per CPU (at least 2).
    pub readers: usize,
}

impl MountConfig {
    /// Checks `args` (parsed by the `mount` subcommand, which has no vhost-only options) for
    /// a mount on `mountpoint`.
    pub fn new(mountpoint: PathBuf, args: &Args) -> Result<Self, ConfigError> {
        let mut shared = Shared::new(args, MOUNT_DEFAULTS)?;
        if matches!(
            shared.legacy_sandbox,
            Some(SandboxMode::Namespace | SandboxMode::Chroot)
        ) {
            shared
                .notes
                .push("sandbox: a host mount runs without the namespace sandbox; ignored".into());
        }
        // The daemon must see the host's mount table (it mounts there and serves the host's
        // directories in place); it keeps seccomp and capabilities, plus CAP_SYS_ADMIN to
        // unmount on SIGTERM when it mounted itself (fusermount3's mounts are unmounted by
        // fusermount3, through a helper started before the filter).
        let privileged = crate::sys::fusedev::may_mount();
        shared.confinement.sandbox = SandboxMode::None;
        shared.confinement.keep_sys_admin = privileged;
        shared.confinement.unmount = privileged;
        let readonly = args.readonly || shared.mount_options.iter().any(|(n, _)| n == "ro");
        let options = mount_options(&shared.mount_options, readonly, privileged)?;
        shared.notes.retain(|n| !honoured_note(n));
        passthrough_rules(&mut shared);
        Ok(MountConfig {
            mountpoint,
            options,
            log_level: shared.log_level,
            rlimit_nofile: args.rlimit_nofile,
            config_file: args.config.clone(),
            readers: readers(args.thread_pool_size, cpus()),
            shared,
            privileged,
        })
    }
}

/// Readers per CPU when `--thread-pool-size` does not say: a reader is a thread asleep in
/// read(2) on its own clone of /dev/fuse, and the kernel hands each request to the one that
/// has waited longest. With one per CPU (at least 2) bonnie++'s random creates and stats ran
/// behind mergerfs 2.33's; with 4 per CPU they do not (measured in docs/src/host-mount.md,
/// "Readers").
const READERS_PER_CPU: usize = 4;

/// How many threads read /dev/fuse: `--thread-pool-size` if given (at least 2: one may wait in
/// a blocking request such as a lock while the other serves), otherwise [`READERS_PER_CPU`]
/// per CPU.
fn readers(thread_pool_size: Option<usize>, cpus: usize) -> usize {
    thread_pool_size
        .unwrap_or(READERS_PER_CPU * cpus)
        .clamp(2, crate::config::MAX_THREAD_POOL_SIZE)
}

/// The CPUs this process may run on.
fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// mergerfs's rules for `passthrough.io`: the kernel refuses passthrough with the writeback
/// cache (`cache.writeback` goes), and `cache.files=off` would send every read and write to
/// the daemon anyway (it becomes `auto-full`), each with a note.
fn passthrough_rules(shared: &mut Shared) {
    let o = &mut shared.fs.opts;
    if o.passthrough_io == PassthroughIo::Off {
        return;
    }
    if o.writeback {
        o.writeback = false;
        shared.notes.push(
            "cache.writeback: the kernel refuses FUSE passthrough with the writeback cache; off (passthrough.io is on)".into(),
        );
    }
    if o.cache_files == CacheFiles::Off {
        o.cache_files = CacheFiles::AutoFull;
        shared.notes.push(
            "cache.files=off makes every open direct I/O, which overrides passthrough.io; auto-full instead, as mergerfs".into(),
        );
    }
}

/// Whether `note` (`NAME: why`) is about an option a host mount honours.
fn honoured_note(note: &str) -> bool {
    let name = note
        .split(':')
        .next()
        .unwrap_or("")
        .trim()
        .replace('_', "-");
    HONOURED.contains(&name.as_str())
}

/// The kernel mount's options from the generic options named (`given`, in order: a later one
/// wins), for a daemon that mounts itself (root: `allow_other` by default, as mergerfs) or
/// through fusermount3 (which refuses `allow_other` unless /etc/fuse.conf allows it).
fn mount_options(
    given: &[(String, String)],
    readonly: bool,
    root: bool,
) -> Result<MountOptions, ConfigError> {
    let mut o = MountOptions {
        allow_other: root,
        default_permissions: true,
        nonempty: false,
        fsname: "union-virtiofsd".into(),
        subtype: "union-virtiofsd".into(),
        readonly,
        noexec: false,
        noatime: false,
        suid: false,
        dev: false,
    };
    let bad = |key: &str, value: &str, expected: &'static str| {
        ConfigError::Option(super::registry::OptionError::BadValue {
            name: key.to_owned(),
            value: value.to_owned(),
            expected,
        })
    };
    for (name, value) in given {
        let flag = |v: &str| match v {
            "" | "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(bad(name, v, "true or false")),
        };
        match name.as_str() {
            "allow-other" => o.allow_other = flag(value)?,
            "default-permissions" | "kernel-permissions-check" => {
                o.default_permissions = flag(value)?
            }
            "nonempty" => o.nonempty = flag(value)?,
            "fsname" | "subtype" if value.is_empty() || value.contains([',', ' ', '\n']) => {
                return Err(bad(name, value, "a name without commas or spaces"));
            }
            "fsname" => o.fsname = value.clone(),
            "subtype" => o.subtype = value.clone(),
            "noexec" | "exec" => o.noexec = name == "noexec",
            "noatime" | "atime" => o.noatime = name == "noatime",
            "suid" | "nosuid" => o.suid = name == "suid",
            "dev" | "nodev" => o.dev = name == "dev",
            _ => {}
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn mergerfs_defaults_and_overrides() {
        let o = mount_options(&[], false, true).unwrap();
        assert!(o.allow_other && o.default_permissions && !o.nonempty && !o.suid);
        assert_eq!(o.fsname, "union-virtiofsd");
        let o = mount_options(&[], false, false).unwrap();
        assert!(!o.allow_other);
        let o = mount_options(
            &given(&[
                ("allow-other", ""),
                ("kernel-permissions-check", "false"),
                ("fsname", "pool"),
                ("nonempty", ""),
                ("noexec", ""),
                ("suid", ""),
            ]),
            true,
            false,
        )
        .unwrap();
        assert!(o.allow_other && !o.default_permissions && o.nonempty && o.noexec && o.suid);
        assert!(o.readonly);
        assert_eq!(o.fsname, "pool");
        assert!(mount_options(&given(&[("fsname", "a b")]), false, true).is_err());
        assert!(mount_options(&given(&[("allow-other", "maybe")]), false, true).is_err());
    }

    #[test]
    fn readers_per_cpu_unless_the_pool_size_is_given() {
        assert_eq!(readers(None, 2), 8);
        assert_eq!(readers(None, 1), 4);
        assert_eq!(readers(Some(3), 64), 3);
        // One reader could sit in a blocking lock request with nobody left to serve.
        assert_eq!(readers(Some(0), 2), 2);
        assert_eq!(readers(Some(1), 2), 2);
        assert_eq!(readers(None, 1000), crate::config::MAX_THREAD_POOL_SIZE);
    }

    #[test]
    fn passthrough_turns_off_writeback_and_direct_io_files() {
        use clap::Parser;
        let args = Args::try_parse_from([
            "union-virtiofsd",
            "--branch=/a",
            "-o",
            "passthrough.io=rw,cache.writeback=true,cache.files=off",
        ])
        .unwrap();
        let c = MountConfig::new("/m".into(), &args).unwrap();
        let o = &c.shared.fs.opts;
        assert_eq!(o.passthrough_io, PassthroughIo::Rw);
        assert!(!o.writeback);
        assert_eq!(o.cache_files, CacheFiles::AutoFull);
        assert_eq!(c.shared.notes.len(), 2, "{:?}", c.shared.notes);
    }

    #[test]
    fn the_page_cache_survives_an_mtime_change_unless_asked() {
        use clap::Parser;
        let mount = |extra: &[&str]| {
            let args = Args::try_parse_from(
                ["union-virtiofsd", "--branch=/a"]
                    .iter()
                    .chain(extra)
                    .copied(),
            )
            .unwrap();
            MountConfig::new("/m".into(), &args).unwrap().shared.fs.opts
        };
        assert!(!mount(&[]).auto_inval_data, "mergerfs's default");
        assert!(mount(&["-o", "cache.auto_inval_data=true"]).auto_inval_data);
    }

    #[test]
    fn only_the_notes_of_honoured_options_go() {
        assert!(honoured_note("allow_other: the guest mounts…; ignored"));
        assert!(!honoured_note(
            "threads: one thread per request queue…; ignored"
        ));
    }
}
