//! The subcommands besides serving (`ctl`, `mount`, ...): the host's tools around a daemon.
//! clap derive only, as the rest of `args`.

use std::path::PathBuf;

use clap::ValueEnum;

/// The commands of union-virtiofsd besides serving: the host's tools around a daemon.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum Command {
    /// Read and change a running daemon's options through its control socket (mergerfs's
    /// runtime names).
    ///
    /// The control socket is `<SOCKET>.ctl`, next to the vhost-user socket; `--socket` takes
    /// either. Values are printed on stdout, one per line; any error is one line on stderr and
    /// exit status 2.
    Ctl(CtlArgs),
    /// Mount the union on the host at MOUNTPOINT through /dev/fuse (as mergerfs does), with
    /// the daemon's branch, `-o` and `--config` options; runs until it is unmounted.
    ///
    /// Root mounts with mount(2); an ordinary user mounts through fusermount3, as libfuse
    /// does. mergerfs's generic mount options apply: `allow_other` (default as root; for a
    /// user only where /etc/fuse.conf has `user_allow_other`), `default_permissions`
    /// (default; `-o kernel-permissions-check=false` turns it off), `nonempty`, `fsname=`,
    /// `ro`, `noexec`, `noatime`, `suid`, `dev`. `umount MOUNTPOINT` (`fusermount3 -u` for a
    /// user's mount; SIGTERM/SIGINT detach it) ends it; a bad command line or mount point, or
    /// a mount fusermount3 refuses, is one line on stderr and exit status 2.
    Mount(MountArgs),
    /// Print the man page (roff, section 1) on standard output.
    Man,
    /// Print SHELL's completion script on standard output.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// The command line of `union-virtiofsd mount` besides the daemon's options.
#[derive(Clone, Debug, clap::Args)]
pub struct MountArgs {
    /// The directory the union is mounted on.
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: PathBuf,
}

/// The command line of `union-virtiofsd ctl` (the host's control client).
#[derive(Clone, Debug, clap::Args)]
pub struct CtlArgs {
    /// The daemon's vhost-user socket (`.ctl` is appended) or its control socket `<PATH>.ctl`.
    #[arg(long, value_name = "PATH", required_unless_present = "ctl_socket")]
    pub socket: Option<PathBuf>,

    /// The daemon's control socket as its `--ctl-socket` named it (any name).
    #[arg(long, value_name = "PATH", conflicts_with = "socket")]
    pub ctl_socket: Option<PathBuf>,

    /// What to do.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// What `union-virtiofsd ctl` does. KEYs are mergerfs's option names, with or without the
/// `user.mergerfs.` prefix.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum CtlCommand {
    /// Print KEY's value; with no KEY, every `key=value`, one per line.
    Get {
        /// The option.
        key: Option<String>,
    },
    /// Set KEY to VALUE. For `branches` mergerfs's edits: `+`, `+<`, `+>` add (globs are
    /// expanded here), `-`, `-<`, `->` remove, `=` (or nothing) replaces.
    Set {
        /// The option.
        key: String,
        /// The new value.
        #[arg(allow_hyphen_values = true)]
        value: String,
    },
    /// Print where a file of the union is on the host, one value per line.
    Query {
        /// The file, as a path in the union.
        path: String,
        /// What to print.
        #[arg(value_enum, default_value_t = CtlQuery::Allpaths)]
        what: CtlQuery,
    },
    /// Print every key, one per line.
    Keys,
}

/// mergerfs's per-file queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CtlQuery {
    /// The branch holding the file.
    Basepath,
    /// The file's path within its branch.
    Relpath,
    /// The file's full host path.
    Fullpath,
    /// The full host path in every branch holding it.
    Allpaths,
}

impl CtlQuery {
    /// mergerfs's name for the query.
    pub fn name(self) -> &'static str {
        match self {
            CtlQuery::Basepath => "basepath",
            CtlQuery::Relpath => "relpath",
            CtlQuery::Fullpath => "fullpath",
            CtlQuery::Allpaths => "allpaths",
        }
    }
}
