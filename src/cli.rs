//! The command line, parsed once: `union-virtiofsd [OPTIONS]` serves, `union-virtiofsd mount
//! MOUNTPOINT [OPTIONS]` serves the same options on a host mount, as does the fstab form
//! `union-virtiofsd BRANCHES MOUNTPOINT [OPTIONS]` (mergerfs's, which mount.fuse3 runs), and
//! `union-virtiofsd COMMAND …` runs one of the host's tools (`ctl`, `man`, `completions`) and
//! ends. A first positional argument that names a command is that command; any other is the
//! fstab form's BRANCHES, whose entries are paths with a `/`. A bad command line is one line
//! on stderr and exit status 2. Never exits by itself (`main` does).

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Args as _, CommandFactory, FromArgMatches};

use crate::args::{Args, Command, FstabArgs};

/// Exit status of a bad command line (as clap's own).
pub const EXIT_USAGE: u8 = 2;

/// What the command line asks for.
pub enum Parsed {
    /// Serve with these options.
    Serve(Box<Args>),
    /// Mount the union on the host at `mountpoint` with these options.
    Mount {
        /// The mount point.
        mountpoint: PathBuf,
        /// The options (no vhost-only one is given).
        args: Box<Args>,
        /// Whether to go to the background once mounted (the fstab form without -f).
        background: bool,
    },
    /// Done (help, version, a tool command, or a bad command line): exit with this status.
    Exit(u8),
}

/// The whole command: [`Args`] with the union options' list after `--help` (not after `-h`,
/// which stays a summary).
pub fn command() -> clap::Command {
    command_for(help_width())
}

/// The whole command, its union options' list wrapped to `width` columns (the man page's
/// is fixed, so that it does not depend on where it was made).
pub fn command_for(width: usize) -> clap::Command {
    let help = crate::config::registry::help_text(width);
    let top = Args::command();
    // `mount` takes the daemon's options (parsed into the same `Args`); the vhost-only ones
    // stay known to it but hidden, and are refused when given (see `parse`).
    let options: Vec<clap::Arg> = top
        .get_arguments()
        .map(|a| match VHOST_ONLY.contains(&a.get_id().as_str()) {
            true => a.clone().hide(true),
            false => a.clone(),
        })
        .collect();
    let mount_help = help.clone();
    // The fstab form's positionals: the top level's only.
    FstabArgs::augment_args(top)
        .after_long_help(help)
        .mut_subcommand("mount", |m| m.args(options).after_long_help(mount_help))
}

/// The daemon's options that only a vhost-user device has: `mount` refuses them.
const VHOST_ONLY: &[&str] = &[
    "socket_path",
    "fd",
    "socket",
    "socket_group",
    "tag",
    "num_request_queues",
    "print_capabilities",
    "release_guest_memory",
    "upgrade",
    "migration_mode",
    "migration_on_error",
    "migration_verify_handles",
    "migration_confirm_paths",
    "uid_map",
    "gid_map",
    "sandbox",
];

/// The width `--help` is wrapped to: `COLUMNS`, else the terminal's, at most 100 (clap's).
fn help_width() -> usize {
    let columns = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok());
    columns
        .or_else(|| terminal_size::terminal_size().map(|(w, _)| usize::from(w.0)))
        .unwrap_or(100)
        .clamp(40, 100)
}

/// Parses `argv` (the whole command line) and runs a tool command it names.
pub fn parse(argv: Vec<OsString>) -> Parsed {
    // Which command a usage error is about, for its prefix (`union-virtiofsd ctl: …`).
    let tool = argv
        .get(1)
        .and_then(|a| a.to_str())
        .and_then(|a| match a {
            "ctl" => Some("union-virtiofsd ctl"),
            "mount" => Some("union-virtiofsd mount"),
            _ => None,
        })
        .unwrap_or("union-virtiofsd");
    let matches = match command().try_get_matches_from(argv) {
        Ok(m) => m,
        Err(e) if !e.use_stderr() => {
            // --help, --version: a reader that stops early (`| head`) is no error.
            let _ = e.print();
            return Parsed::Exit(0);
        }
        Err(e) => {
            let _ = writeln!(io::stderr(), "{tool}: {}", usage_error(&e));
            return Parsed::Exit(EXIT_USAGE);
        }
    };
    let args = match Args::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => {
            let _ = writeln!(io::stderr(), "union-virtiofsd: {}", usage_error(&e));
            return Parsed::Exit(EXIT_USAGE);
        }
    };
    let fstab = match FstabArgs::from_arg_matches(&matches) {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(io::stderr(), "union-virtiofsd: {}", usage_error(&e));
            return Parsed::Exit(EXIT_USAGE);
        }
    };
    match &args.command {
        None => match (fstab.fstab_branches, fstab.fstab_mountpoint) {
            (Some(branches), Some(mountpoint)) => {
                if let Some(flag) = vhost_only_given(&matches) {
                    let _ = writeln!(
                        io::stderr(),
                        "{tool}: {flag} is a vhost-user daemon option, not a mount's (see --help)"
                    );
                    return Parsed::Exit(EXIT_USAGE);
                }
                let mut args = args.clone();
                args.branches = Some(branches);
                Parsed::Mount {
                    mountpoint,
                    background: !args.foreground,
                    args: Box::new(args),
                }
            }
            _ => Parsed::Serve(Box::new(args)),
        },
        Some(Command::Mount(m)) => {
            let Some((_, sub)) = matches.subcommand() else {
                return Parsed::Exit(EXIT_USAGE);
            };
            if let Some(flag) = vhost_only_given(sub) {
                let _ = writeln!(
                    io::stderr(),
                    "{tool}: {flag} is a vhost-user daemon option, not a mount's (see --help)"
                );
                return Parsed::Exit(EXIT_USAGE);
            }
            match Args::from_arg_matches(sub) {
                Ok(args) => Parsed::Mount {
                    mountpoint: m.mountpoint.clone(),
                    args: Box::new(args),
                    background: false,
                },
                Err(e) => {
                    let _ = writeln!(io::stderr(), "{tool}: {}", usage_error(&e));
                    Parsed::Exit(EXIT_USAGE)
                }
            }
        }
        Some(Command::Ctl(ctl)) => Parsed::Exit(crate::ctl::cli::run(ctl)),
        Some(Command::Man) => Parsed::Exit(crate::docs::print(crate::docs::man_page())),
        Some(Command::Completions { shell }) => {
            Parsed::Exit(crate::docs::print(Ok(crate::docs::completions(*shell))))
        }
    }
}

/// The first vhost-only option given on the command line of `matches`, as its flag.
fn vhost_only_given(matches: &clap::ArgMatches) -> Option<String> {
    VHOST_ONLY
        .iter()
        .find(|id| matches.value_source(id) == Some(ValueSource::CommandLine))
        .map(|id| format!("--{}", id.replace('_', "-")))
}

/// clap's message as one line: its first paragraph, without the usage and tips after it,
/// and a pointer to `--help`.
pub fn usage_error(e: &clap::Error) -> String {
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        // clap's help in place of an error: say what is missing instead.
        return "arguments missing (see --help)".to_owned();
    }
    let text = e.render().to_string();
    let words: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let message = words.join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    format!("{message} (see --help)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(v: &[&str]) -> Parsed {
        parse(v.iter().map(OsString::from).collect())
    }

    /// The mount a command line asks for: mount point, branch count, background.
    fn mount_of(v: &[&str]) -> (PathBuf, usize, bool) {
        match parse_all(v) {
            Parsed::Mount {
                mountpoint,
                args,
                background,
            } => {
                let n = args.branches.map(|b| b.0.len()).unwrap_or(0) + args.branch.len();
                (mountpoint, n, background)
            }
            _ => panic!("{v:?} is no mount"),
        }
    }

    #[test]
    fn a_first_path_is_the_fstab_form_and_a_command_name_the_command() {
        let m = |v: &[&str]| mount_of(v);
        // mount.fuse3's order and mergerfs's (-o first): to the background.
        assert_eq!(
            m(&["u", "/a:/b=RO", "/m", "-o", "category.create=mfs"]),
            ("/m".into(), 2, true)
        );
        assert_eq!(m(&["u", "-o", "rw", "/a", "/m"]), ("/m".into(), 1, true));
        assert_eq!(m(&["u", "-f", "/a:/b", "/m"]), ("/m".into(), 2, false));
        // The command wins its name; a branch of that name is written as a path.
        assert_eq!(
            m(&["u", "mount", "/m", "--branch", "/a"]),
            ("/m".into(), 1, false)
        );
        assert_eq!(m(&["u", "./mount", "/m"]), ("/m".into(), 1, true));
        // mergerfs's fstab sources: globs and modes (expanded later, as --branches).
        assert_eq!(
            m(&["u", "/mnt/disk*:/ro=RO,1G", "/m"]),
            ("/m".into(), 2, true)
        );
        assert!(matches!(
            parse_all(&["u", "--socket-path", "/s", "--branch", "/a"]),
            Parsed::Serve(_)
        ));
        for bad in [
            &["u", "frob"][..],
            &["u", "/a"],
            &["u", "/a", "/m", "extra"],
            &["u", "/a", "/m", "--branches", "/b"],
            &["u", "/a", "/m", "--socket-path", "/s"],
            &["u", "mount", "/m", "/a"],
        ] {
            assert!(
                matches!(parse_all(bad), Parsed::Exit(EXIT_USAGE)),
                "{bad:?} accepted"
            );
        }
    }
}
