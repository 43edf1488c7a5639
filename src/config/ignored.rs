//! The mergerfs and mount options that are accepted and ignored: each with the reason it has
//! no effect on a vhost-user device, the one note a start logs for it. Pure data: the registry
//! (`registry.rs`) decides what an option does; nothing here parses a value or logs.

/// Where an ignored name comes from, which decides where it is listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A key of mergerfs's own (its docs, its `user.mergerfs.*` list): also a `ctl` key.
    Mergerfs,
    /// A generic FUSE, mount(8) or fstab option mergerfs passes on: `-o` and config files only.
    Mount,
}

/// One accepted-and-ignored option.
#[derive(Debug)]
pub struct IgnoredSpec {
    /// The name, mergerfs's spelling (`_` and `-` are interchangeable on input).
    pub name: &'static str,
    /// Why it has no effect here: the text of its note.
    pub why: &'static str,
    /// What `ctl get` shows (the value that describes this daemon).
    pub shown: &'static str,
    /// mergerfs lets it change while mounted: `ctl set` accepts it (and ignores it) too.
    pub runtime: bool,
    /// Where it comes from.
    pub origin: Origin,
}

const fn m(
    name: &'static str,
    shown: &'static str,
    runtime: bool,
    why: &'static str,
) -> IgnoredSpec {
    IgnoredSpec {
        name,
        why,
        shown,
        runtime,
        origin: Origin::Mergerfs,
    }
}

const fn k(name: &'static str, why: &'static str) -> IgnoredSpec {
    IgnoredSpec {
        name,
        why,
        shown: "",
        runtime: false,
        origin: Origin::Mount,
    }
}

const KERNEL_MOUNT: &str = "the guest mounts the share with its own options; ignored";
const NOTHING: &str = "does nothing in mergerfs either; ignored";
const THREADS: &str = "one thread per request queue plus --thread-pool-size serve requests (a \
     host mount: --thread-pool-size readers, default 4 per CPU); ignored";
const SPLICE: &str = "data moves through guest memory, there is no /dev/fuse to splice; ignored";
const NODES: &str =
    "nodes live until the guest forgets them, and export uses file handles; ignored";
const STATUS: &str = "a value the daemon reports, not a setting; ignored";

/// Every accepted-and-ignored option, mergerfs's first (sorted), then the mount options.
pub static IGNORED: &[IgnoredSpec] = &[
    m("async-read", "true", false, "the guest kernel decides how reads are queued; ignored"),
    m("atomic-o-trunc", "false", false, NOTHING),
    m("attr-timeout", "", false, "deprecated in mergerfs; use cache.attr; ignored"),
    m("auto-cache", "false", false, "deprecated in mergerfs; use cache.files=auto-full; ignored"),
    m("big-writes", "false", false, NOTHING),
    m("branches-mount-timeout", "0", false, "branches must exist when the daemon starts; ignored"),
    m("branches-mount-timeout-fail", "false", false, "branches must exist when the daemon starts; ignored"),
    m("cache.files.process-names", "", true, "virtio-fs requests carry no process name; ignored"),
    m("cache.open", "0", true, NOTHING),
    m("cache.statfs", "0", true, "statfs asks the host each time; ignored"),
    m("cache.symlinks", "false", false, "the guest kernel decides whether it caches symlinks; ignored"),
    m("debug", "false", true, "use -d or --log-level debug for a trace of requests; ignored"),
    m("defaults", "", false, NOTHING),
    m("direct-io-allow-mmap", "true", false, "the guest kernel decides whether direct-io files may be mmapped; ignored"),
    m("entry-timeout", "", false, "deprecated in mergerfs; use cache.entry; ignored"),
    m("export-support", "true", false, "whether the guest exports the share over NFS is the guest's; ignored"),
    m("flush-on-close", "opened-for-write", true, "every close the guest sends reaches the host files; ignored"),
    m("fsname", "union-virtiofsd", false, "the guest names the mount (its virtiofs tag is --tag); ignored"),
    m("func.readdir", "seq", true, "a directory is read by the thread serving the request; ignored"),
    m("fuse-msg-size", "256", false, "the request size is negotiated with the guest (--max-write); ignored"),
    m("gid", "", false, "owners come from the guest's requests (see --translate-gid); ignored"),
    m("gid-cache.expire-timeout", "", true, NOTHING),
    m("gid-cache.remove-timeout", "", true, NOTHING),
    m("handle-killpriv", "true", false, "set with -o killpriv_v2 (virtiofsd's key); ignored"),
    m("handle-killpriv-v2", "true", false, "set with -o killpriv_v2 (virtiofsd's key); ignored"),
    m("hard-remove", "", false, NOTHING),
    m("ignorepponrename", "false", true, "rename and link follow mergerfs's default (path preservation by the create policy); ignored"),
    m("kernel-cache", "false", false, "deprecated in mergerfs; use cache.files=full; ignored"),
    m("kernel-permissions-check", "true", false, "the guest kernel always checks permissions on a virtiofs mount; ignored"),
    m("lazy-umount-mountpoint", "false", false, "there is no host mount point to unmount; ignored"),
    m("log.file", "", true, "the log goes to stderr or syslog (--syslog); ignored"),
    m("log.metrics", "false", true, NOTHING),
    m("mount", "", false, STATUS),
    m("negative-entry", "", false, "deprecated in mergerfs; use cache.negative-entry; ignored"),
    m("never-forget-nodes", "false", false, NODES),
    m("nfsopenhack", "off", true, "NFS export of the share happens in the guest; ignored"),
    m("no-splice-move", "", false, SPLICE),
    m("no-splice-read", "", false, SPLICE),
    m("no-splice-write", "", false, SPLICE),
    m("noforget", "false", false, NODES),
    m("nonempty", "", false, NOTHING),
    m("parallel-direct-writes", "true", true, "the guest kernel decides whether direct writes run in parallel; ignored"),
    m("passthrough.max-stack-depth", "1", false, "fixed at 1: passthrough applies to branches on a filesystem that stacks on no other (a file on overlayfs or another FUSE mount is served by the daemon); ignored"),
    m("pid", "", false, STATUS),
    m("pin-threads", "", false, THREADS),
    m("process-thread-count", "-1", false, THREADS),
    m("process-thread-queue-depth", "2", false, THREADS),
    m("proxy-ioprio", "false", true, "virtio-fs requests carry no I/O priority; ignored"),
    m("read-thread-count", "0", false, THREADS),
    m("readahead", "0", true, "the guest kernel's readahead applies; ignored"),
    m("remember", "", false, NODES),
    m("remember-nodes", "", false, NODES),
    m("scheduling-priority", "-10", false, "set the daemon's priority with nice or its service manager; ignored"),
    m("security-capability", "true", true, "security.capability is served as any other xattr (see xattr, --xattrmap); ignored"),
    m("splice-move", "false", false, SPLICE),
    m("splice-read", "false", false, SPLICE),
    m("splice-write", "false", false, SPLICE),
    m("sync-read", "", false, "the guest kernel decides how reads are queued; ignored"),
    m("threads", "0", false, THREADS),
    m("uid", "", false, "owners come from the guest's requests (see --translate-uid); ignored"),
    m("umask", "", false, "modes come from the guest's requests; ignored"),
    m("use-ino", "", false, "deprecated in mergerfs; inode numbers follow inodecalc; ignored"),
    m("version", "", false, STATUS),
    // libfuse's generic mount options, which mergerfs passes on to the kernel mount.
    k("allow-other", KERNEL_MOUNT),
    k("auto-unmount", KERNEL_MOUNT),
    k("blkdev", KERNEL_MOUNT),
    k("blksize", KERNEL_MOUNT),
    k("context", KERNEL_MOUNT),
    k("defcontext", KERNEL_MOUNT),
    k("default-permissions", "the guest kernel always checks permissions on a virtiofs mount; ignored"),
    k("fscontext", KERNEL_MOUNT),
    k("large-read", KERNEL_MOUNT),
    k("max-read", KERNEL_MOUNT),
    k("rootcontext", KERNEL_MOUNT),
    k("subtype", KERNEL_MOUNT),
    k("user", KERNEL_MOUNT),
    k("async", KERNEL_MOUNT),
    k("atime", KERNEL_MOUNT),
    k("dev", KERNEL_MOUNT),
    k("diratime", KERNEL_MOUNT),
    k("dirsync", KERNEL_MOUNT),
    k("exec", KERNEL_MOUNT),
    k("lazytime", KERNEL_MOUNT),
    k("noatime", KERNEL_MOUNT),
    k("nodev", KERNEL_MOUNT),
    k("nodiratime", KERNEL_MOUNT),
    k("noexec", KERNEL_MOUNT),
    k("nolazytime", KERNEL_MOUNT),
    k("norelatime", KERNEL_MOUNT),
    k("nostrictatime", KERNEL_MOUNT),
    k("nosuid", KERNEL_MOUNT),
    k("relatime", KERNEL_MOUNT),
    k("strictatime", KERNEL_MOUNT),
    k("suid", KERNEL_MOUNT),
    k("sync", KERNEL_MOUNT),
    // fstab's own (mount(8), systemd): they never reach a helper, but a copied line has them.
    k("auto", KERNEL_MOUNT),
    k("noauto", KERNEL_MOUNT),
    k("nofail", KERNEL_MOUNT),
    k("nouser", KERNEL_MOUNT),
    k("users", KERNEL_MOUNT),
    k("-netdev", KERNEL_MOUNT),
];

/// Name prefixes accepted and ignored whatever follows (`x-systemd.automount`, `x-gvfs-show`).
pub static IGNORED_PREFIXES: &[(&str, &str)] = &[("x-", KERNEL_MOUNT)];

/// The ignored option `name` (normalized: `-` for `_`), if it is one.
pub fn find(name: &str) -> Option<(&'static str, &'static str)> {
    if let Some(s) = IGNORED.iter().find(|s| s.name == name) {
        return Some((s.name, s.why));
    }
    IGNORED_PREFIXES
        .iter()
        .find(|(p, _)| name.starts_with(p))
        .map(|(p, why)| (*p, *why))
}
