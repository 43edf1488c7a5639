//! The command line, parsed once: `union-virtiofsd [OPTIONS]` serves, `union-virtiofsd
//! COMMAND …` runs one of the host's tools (`ctl`, `man`, `completions`) and ends. A bad
//! command line is one line on stderr and exit status 2. Never exits by itself (`main` does).

use std::ffi::OsString;
use std::io::{self, Write};

use clap::{CommandFactory, FromArgMatches};

use crate::args::{Args, Command};

/// Exit status of a bad command line (as clap's own).
pub const EXIT_USAGE: u8 = 2;

/// What the command line asks for.
pub enum Parsed {
    /// Serve with these options.
    Serve(Box<Args>),
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
    Args::command().after_long_help(crate::config::registry::help_text(width))
}

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
        .filter(|a| *a == "ctl")
        .map_or("union-virtiofsd", |_| "union-virtiofsd ctl");
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
    match &args.command {
        None => Parsed::Serve(Box::new(args)),
        Some(Command::Ctl(ctl)) => Parsed::Exit(crate::ctl::cli::run(ctl)),
        Some(Command::Man) => Parsed::Exit(crate::docs::print(crate::docs::man_page())),
        Some(Command::Completions { shell }) => {
            Parsed::Exit(crate::docs::print(Ok(crate::docs::completions(*shell))))
        }
    }
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
