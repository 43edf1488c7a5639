//! The man page and shell completions, generated from the clap definitions (so they never
//! drift from `--help`), and the subcommands that print them (`union-virtiofsd man`,
//! `union-virtiofsd completions SHELL`: what packages install). Never exits by itself.

use std::io::{self, Write};

use clap_complete::Shell;

/// Writes `text` (the man page or a completion script) on stdout; the exit status (0, or 2
/// with one line on stderr when it cannot be made or written).
pub fn print(text: io::Result<Vec<u8>>) -> u8 {
    let mut stdout = io::stdout().lock();
    match text
        .and_then(|t| stdout.write_all(&t))
        .and_then(|()| stdout.flush())
    {
        // A reader that stops early (`| head`) is no error.
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            let _ = writeln!(
                io::stderr(),
                "union-virtiofsd: cannot write the output: {e}"
            );
            2
        }
        _ => 0,
    }
}

fn command() -> clap::Command {
    crate::cli::command()
}

/// The man page's EXIT STATUS section (roff), after OPTIONS (README, "Command-line options").
const EXIT_STATUS: &str = r#".SH "EXIT STATUS"
.TP
0
The front\-end hung up, SIGTERM or SIGINT came, or the session went to a new daemon (\fB\-\-upgrade\fR).
.TP
1
Setting up or serving failed after the command line was accepted (the sandbox, the seccomp filter, the vhost\-user session, an upgrade).
.TP
2
Bad command\-line input, said in one line, with nothing made: an unknown option or value, a branch that does not exist, a \fB\-\-socket\-path\fR the daemon will not use (too long, no such directory, a file that is not a socket, a socket another process serves on).
.TP
128+N
Killed by signal N (159: SIGSYS under \fB\-\-seccomp kill\fR).
"#;

/// The man page (roff), section 1: clap's, with EXIT STATUS after OPTIONS (before the
/// sections clap puts after them: EXTRA for `after_help`, VERSION), or last.
pub fn man_page() -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    clap_mangen::Man::new(command()).render(&mut out)?;
    let at = [&b"\n.SH EXTRA\n"[..], b"\n.SH VERSION\n"]
        .iter()
        .find_map(|h| out.windows(h.len()).position(|w| w == *h))
        .map_or(out.len(), |i| i + 1);
    out.splice(at..at, EXIT_STATUS.bytes());
    Ok(out)
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command(), "union-virtiofsd", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn man_page_and_completions_name_the_options() {
        let man = String::from_utf8(man_page().unwrap()).unwrap();
        assert!(man.contains(".TH union-virtiofsd 1"), "{}", &man[..200]);
        for opt in [
            "readonly",
            "shared\\-dir",
            "socket\\-path",
            "print\\-capabilities",
        ] {
            assert!(man.contains(opt), "man page lacks {opt}");
        }
        let sections: Vec<_> = man.lines().filter(|l| l.starts_with(".SH")).collect();
        assert_eq!(
            sections,
            [
                ".SH NAME",
                ".SH SYNOPSIS",
                ".SH DESCRIPTION",
                ".SH OPTIONS",
                ".SH \"EXIT STATUS\"",
                ".SH EXTRA",
                ".SH VERSION"
            ]
        );
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let c = String::from_utf8(completions(shell)).unwrap();
            assert!(
                c.contains("readonly") && c.contains("shared-dir"),
                "{shell}"
            );
        }
    }
}
