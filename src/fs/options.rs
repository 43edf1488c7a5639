//! The union's behaviour settings, typed. Built by the option registry in `config` from
//! mergerfs-style `key=value` pairs; read by the op families. No parsing here.

use std::time::Duration;

use crate::union::policy::{Category, Policy};

/// The functions whose policy can be set one by one (`func.<name>=`), with their category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Func {
    /// open(O_CREAT) of a new file.
    Create,
    /// mkdir.
    Mkdir,
    /// mknod.
    Mknod,
    /// symlink.
    Symlink,
    /// open of an existing file.
    Open,
    /// getattr / lookup.
    Getattr,
    /// access.
    Access,
    /// getxattr.
    Getxattr,
    /// listxattr.
    Listxattr,
    /// readlink.
    Readlink,
    /// chmod.
    Chmod,
    /// chown.
    Chown,
    /// link.
    Link,
    /// rename.
    Rename,
    /// rmdir.
    Rmdir,
    /// unlink.
    Unlink,
    /// truncate.
    Truncate,
    /// utimens.
    Utimens,
    /// setxattr.
    Setxattr,
    /// removexattr.
    Removexattr,
}

impl Func {
    /// Every function, for the registry and tests.
    pub const ALL: [Func; 20] = [
        Func::Create,
        Func::Mkdir,
        Func::Mknod,
        Func::Symlink,
        Func::Open,
        Func::Getattr,
        Func::Access,
        Func::Getxattr,
        Func::Listxattr,
        Func::Readlink,
        Func::Chmod,
        Func::Chown,
        Func::Link,
        Func::Rename,
        Func::Rmdir,
        Func::Unlink,
        Func::Truncate,
        Func::Utimens,
        Func::Setxattr,
        Func::Removexattr,
    ];

    /// mergerfs's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Func::Create => "create",
            Func::Mkdir => "mkdir",
            Func::Mknod => "mknod",
            Func::Symlink => "symlink",
            Func::Open => "open",
            Func::Getattr => "getattr",
            Func::Access => "access",
            Func::Getxattr => "getxattr",
            Func::Listxattr => "listxattr",
            Func::Readlink => "readlink",
            Func::Chmod => "chmod",
            Func::Chown => "chown",
            Func::Link => "link",
            Func::Rename => "rename",
            Func::Rmdir => "rmdir",
            Func::Unlink => "unlink",
            Func::Truncate => "truncate",
            Func::Utimens => "utimens",
            Func::Setxattr => "setxattr",
            Func::Removexattr => "removexattr",
        }
    }

    /// The category whose policy applies unless `func.<name>` overrides it.
    pub fn category(self) -> Category {
        use Func::*;
        match self {
            Create | Mkdir | Mknod | Symlink => Category::Create,
            Open | Getattr | Access | Getxattr | Listxattr | Readlink => Category::Search,
            Chmod | Chown | Link | Rename | Rmdir | Unlink | Truncate | Utimens | Setxattr
            | Removexattr => Category::Action,
        }
    }
}

/// The policy for each function: category defaults with per-function overrides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policies {
    funcs: [Policy; 20],
}

impl Policies {
    /// mergerfs's defaults: create=pfrd, search=ff, action=epall.
    pub fn mergerfs_defaults() -> Self {
        let mut p = Policies {
            funcs: [Policy::Ff; 20],
        };
        p.set_category(Category::Create, Policy::Pfrd);
        p.set_category(Category::Search, Policy::Ff);
        p.set_category(Category::Action, Policy::Epall);
        p
    }

    /// Sets every function of `cat` (what `category.<cat>=` does).
    pub fn set_category(&mut self, cat: Category, policy: Policy) {
        for (i, f) in Func::ALL.iter().enumerate() {
            if f.category() == cat {
                self.funcs[i] = policy;
            }
        }
    }

    /// Sets one function (what `func.<name>=` does).
    pub fn set_func(&mut self, func: Func, policy: Policy) {
        self.funcs[Func::ALL.iter().position(|f| *f == func).expect("listed")] = policy;
    }

    /// The policy in force for `func`.
    pub fn get(&self, func: Func) -> Policy {
        self.funcs[Func::ALL.iter().position(|f| *f == func).expect("listed")]
    }
}

/// How inode numbers shown to the guest are computed (`inodecalc=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InodeCalc {
    /// The host inode number as is (not unique across branches).
    Passthrough,
    /// A hash of the union path.
    PathHash,
    /// `PathHash` folded to 32 bits.
    PathHash32,
    /// A hash of the host device and inode (the default: stable across renames, shared by
    /// hard links; a merged directory takes the number of the copy lookups find).
    DevinoHash,
    /// `DevinoHash` folded to 32 bits.
    DevinoHash32,
    /// Directories by path, everything else by device and inode (mergerfs's default; a
    /// directory's number changes when it is renamed).
    HybridHash,
    /// `HybridHash` folded to 32 bits.
    HybridHash32,
}

/// Which opens use FUSE passthrough (`passthrough.io=`, mergerfs 2.42's option).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PassthroughIo {
    /// Never (the default, as mergerfs).
    #[default]
    Off,
    /// Read-only opens.
    Ro,
    /// Write-only opens.
    Wo,
    /// Every open.
    Rw,
}

impl PassthroughIo {
    /// Whether an open with access mode `accmode` (`O_RDONLY`, `O_WRONLY`, `O_RDWR`) asks
    /// for passthrough.
    pub fn covers(self, accmode: i32) -> bool {
        match self {
            PassthroughIo::Off => false,
            PassthroughIo::Ro => accmode == libc::O_RDONLY,
            PassthroughIo::Wo => accmode == libc::O_WRONLY,
            PassthroughIo::Rw => true,
        }
    }
}

/// How free space is summed (`statfs=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatfsMode {
    /// Every branch's filesystem, each counted once.
    Base,
    /// Only the branches on which the queried path exists.
    Full,
}

/// Which branches statfs leaves out (`statfs-ignore=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatfsIgnore {
    /// None.
    None,
    /// RO branches (and read-only mounts).
    Ro,
    /// NC branches.
    Nc,
}

/// What xattr requests do (`xattr=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XattrMode {
    /// Passed through to the host.
    Passthrough,
    /// Reads find nothing (ENODATA / empty list); writes fail with ENOTSUP.
    Noattr,
    /// ENOSYS: the guest stops sending them.
    Nosys,
}

/// How the guest may cache file contents (`cache.files=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheFiles {
    /// Whatever the other flags say (`direct-io` decides); mergerfs's libfuse mode.
    Libfuse,
    /// No page cache: every read and write goes to the daemon (FOPEN_DIRECT_IO).
    Off,
    /// Cached while open, dropped on open (the FUSE default).
    Partial,
    /// Kept across opens (FOPEN_KEEP_CACHE).
    Full,
    /// Kept across opens unless the file changed on the host (mtime or size).
    AutoFull,
}

/// What a rename that cannot stay on its branches does (`rename-exdev=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenameExdev {
    /// Answer EXDEV (the guest's `mv` then copies).
    Passthrough,
    /// Park the source in `.mergerfs_rename_exdev` and put a relative symlink at the target.
    RelSymlink,
    /// As `RelSymlink`, with an absolute symlink under `mountpoint`.
    AbsSymlink,
}

/// What a link that cannot stay on its branch does (`link-exdev=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkExdev {
    /// Answer EXDEV.
    Passthrough,
    /// A relative symlink to the source.
    RelSymlink,
    /// An absolute symlink to the source's host path on its branch.
    AbsBaseSymlink,
    /// An absolute symlink to the source under `mountpoint`.
    AbsPoolSymlink,
}

/// When host symlinks are shown as what they point to (`follow-symlinks=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowSymlinks {
    /// Never: symlinks are symlinks.
    Never,
    /// Symlinks to directories.
    Directory,
    /// Symlinks to regular files.
    Regular,
    /// Symlinks to directories and regular files.
    All,
}

/// How nodes hold their host objects (`--inode-file-handles`, virtiofsd's option).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileHandles {
    /// Descriptors only: a node the table closed is reopened by its path.
    Never,
    /// File handles where the branch's filesystem makes them and the daemon may open them
    /// (CAP_DAC_READ_SEARCH in the initial user namespace); descriptors elsewhere.
    Prefer,
    /// File handles on every branch: the daemon refuses to start where it cannot.
    Mandatory,
}

/// Whether an INIT option is negotiated (virtiofsd's `never|auto|always`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Negotiate {
    /// Never offered.
    #[default]
    Never,
    /// Enabled when the guest offers it.
    Auto,
    /// Enabled, and INIT fails (EPROTO) for a guest that does not offer it.
    Always,
}

/// All behaviour settings of the union.
#[derive(Clone, Debug, PartialEq)]
pub struct UnionOptions {
    /// Per-function policies.
    pub policies: Policies,
    /// Default minimum free space for creates, in bytes (a branch may override it).
    pub minfreespace: u64,
    /// On ENOSPC/EDQUOT during a write, move the file with this policy and retry.
    pub moveonenospc: Option<Policy>,
    /// Inode number calculation.
    pub inodecalc: InodeCalc,
    /// statfs summing.
    pub statfs: StatfsMode,
    /// statfs branch filter.
    pub statfs_ignore: StatfsIgnore,
    /// xattr behaviour.
    pub xattr: XattrMode,
    /// virtiofsd's `--xattrmap`: how xattr names are renamed, refused or hidden between the
    /// guest and the host (`None`: they pass unchanged).
    pub xattrmap: Option<crate::fs::xattrmap::XattrMap>,
    /// Reads and writes become no-ops (benchmarking the transport).
    pub nullrw: bool,
    /// Page-cache mode for file contents.
    pub cache_files: CacheFiles,
    /// Force FOPEN_DIRECT_IO (mergerfs's `direct_io`).
    pub direct_io: bool,
    /// The guest caches directory listings across opens (mergerfs's `cache.readdir`:
    /// FOPEN_CACHE_DIR and FOPEN_KEEP_CACHE on every directory; virtiofsd's `--cache
    /// always|metadata`).
    pub cache_readdir: bool,
    /// FUSE_AUTO_INVAL_DATA: the guest drops a file's pages when it sees its mtime change
    /// (mergerfs's `cache.auto_inval_data`; negotiated at INIT).
    pub auto_inval_data: bool,
    /// Attribute cache timeout.
    pub cache_attr: Duration,
    /// Entry cache timeout.
    pub cache_entry: Duration,
    /// Negative lookup cache timeout (0: negative lookups are not cached).
    pub cache_negative_entry: Duration,
    /// Drop the host page cache of a file when it is closed.
    pub dropcacheonclose: bool,
    /// Copy-on-write layers (`cow=true`): RW branches are upper layers over the RO ones, in
    /// overlayfs's on-disk format (whiteouts, opaque directories). See `fs/cow.rs`.
    pub cow: bool,
    /// Rename fallback on EXDEV.
    pub rename_exdev: RenameExdev,
    /// Link fallback on EXDEV.
    pub link_exdev: LinkExdev,
    /// Where the guest mounts the share (for the absolute-symlink EXDEV modes).
    pub mountpoint: String,
    /// Which host symlinks are shown as their targets (resolved inside their branch only).
    pub follow_symlinks: FollowSymlinks,
    /// Break hard links before a file is opened for writing.
    pub link_cow: bool,
    /// Show old, unwritable files as symlinks to their host path.
    pub symlinkify: bool,
    /// How old (mtime and ctime) a file must be for `symlinkify`.
    pub symlinkify_timeout: Duration,
    /// Negotiate FUSE_HANDLE_KILLPRIV_V2: the daemon clears set-user-ID/set-group-ID bits on
    /// a write or truncate by an unprivileged guest caller (the guest then skips a GETXATTR
    /// and a SETATTR per write).
    pub killpriv_v2: bool,
    /// Serve POSIX record locks and flock on the host (FUSE_POSIX_LOCKS, FUSE_FLOCK_LOCKS);
    /// virtiofsd's legacy `-o no_posix_lock`/`no_flock` turn it off (the guest then keeps
    /// its locks to itself).
    pub host_locks: bool,
    /// How long the same holders may block a POSIX lock request (F_SETLKW) before it answers
    /// EDEADLK, a deadlock the daemon cannot see (zero: no bound). The guest cannot interrupt a request it sent,
    /// so this is what ends a wait whose holder waits for the waiter to exit.
    pub lock_timeout: Duration,
    /// How long a flock wait blocked only by locks held outside this daemon's guest (host
    /// processes, another guest) lasts before it answers ENOLCK (zero: no bound).
    pub lock_wait_external: Duration,
    /// How nodes hold their host objects.
    pub file_handles: FileHandles,
    /// Test hook (`--test-panic-on-lookup`): a lookup of this name panics inside the node
    /// table's lock.
    pub test_panic_on_lookup: Option<std::ffi::CString>,
    /// How many node descriptors stay open (at most a quarter of the descriptor budget);
    /// those of the least recently used nodes beyond it are closed.
    pub node_fds: usize,
    /// Offer READDIRPLUS (entries with attributes); `--no-readdirplus` turns it off.
    pub readdirplus: bool,
    /// Negotiate FUSE_WRITEBACK_CACHE (`--writeback`, `cache.writeback=true`): the guest's
    /// page cache holds writes and sends them later, in large requests; it then also reads
    /// through handles opened write-only and applies O_APPEND itself.
    pub writeback: bool,
    /// Tell the guest which directories are mount points (FUSE_ATTR_SUBMOUNT), so that it
    /// gives each host filesystem its own st_dev (virtiofsd's default;
    /// `--no-announce-submounts` turns it off).
    pub announce_submounts: bool,
    /// Pass the guest's O_NOATIME on to the host (`--preserve-noatime`); by default it is
    /// dropped, as virtiofsd does, because the host refuses it (EPERM) for files the opener
    /// does not own.
    pub preserve_noatime: bool,
    /// POSIX ACLs (`--posix-acl`): FUSE_POSIX_ACL, DONT_MASK and SETXATTR_EXT together; the
    /// guest enforces ACLs, the daemon applies its umask per request (so the host applies a
    /// parent's default ACL instead) and clears set-group-ID when the guest says to.
    pub posix_acl: Negotiate,
    /// Security labels (`--security-label`): FUSE_SECURITY_CTX; the context the guest sends
    /// with a new object is set on it (as an xattr, named through `--xattrmap`) before the
    /// object gets its name.
    pub security_label: Negotiate,
    /// Offer FUSE_ALLOW_IDMAP (`--allow-idmap`): the guest may make idmapped mounts of the
    /// share. Requests that create nothing then carry no caller (uid and gid -1): they are
    /// served as the guest's root, the guest's kernel having checked them.
    pub allow_idmap: bool,
    /// `path-queries`: the guest may read mergerfs's per-file queries (`user.mergerfs.
    /// basepath`, `relpath`, `fullpath`, `allpaths`), which show host paths.
    pub path_queries: bool,
    /// `passthrough.io`: which opens of a host mount the kernel serves straight from the
    /// branch file (FUSE passthrough), leaving the daemon out of their reads and writes.
    pub passthrough_io: PassthroughIo,
}

/// mergerfs's default minfreespace: 4 GiB.
pub const DEFAULT_MINFREESPACE: u64 = 4 << 30;

impl Default for UnionOptions {
    fn default() -> Self {
        UnionOptions {
            policies: Policies::mergerfs_defaults(),
            minfreespace: DEFAULT_MINFREESPACE,
            moveonenospc: None,
            inodecalc: InodeCalc::DevinoHash,
            statfs: StatfsMode::Base,
            statfs_ignore: StatfsIgnore::None,
            xattr: XattrMode::Nosys,
            xattrmap: None,
            nullrw: false,
            cache_files: CacheFiles::Libfuse,
            cache_readdir: false,
            auto_inval_data: true,
            direct_io: false,
            cache_attr: Duration::from_secs(1),
            cache_entry: Duration::from_secs(1),
            cache_negative_entry: Duration::ZERO,
            dropcacheonclose: false,
            cow: false,
            rename_exdev: RenameExdev::Passthrough,
            link_exdev: LinkExdev::Passthrough,
            mountpoint: "/mnt".to_string(),
            follow_symlinks: FollowSymlinks::Never,
            link_cow: false,
            symlinkify: false,
            symlinkify_timeout: Duration::from_secs(3600),
            passthrough_io: PassthroughIo::Off,
            killpriv_v2: true,
            host_locks: true,
            file_handles: FileHandles::Prefer,
            node_fds: 512,
            test_panic_on_lookup: None,
            lock_timeout: Duration::from_secs(10),
            lock_wait_external: Duration::from_secs(60),
            readdirplus: true,
            writeback: false,
            announce_submounts: true,
            preserve_noatime: false,
            posix_acl: Negotiate::Never,
            security_label: Negotiate::Never,
            allow_idmap: false,
            path_queries: false,
        }
    }
}
