//! `union-virtiofsd ctl`: the command-line client of a running daemon's control socket.
//! Prints values on stdout, one per line; any error is one line on stderr and status 2.
//! Never exits by itself (`main` does) and never panics on its input.

use std::ffi::OsString;
use std::io::{self, Write};
use std::time::Duration;

use clap::Parser;

use super::client::{self, Client, ClientError};
use crate::args::{CtlArgs, CtlCommand};

/// Exit status of a successful request.
pub const EXIT_OK: u8 = 0;
/// Exit status of any error.
pub const EXIT_ERROR: u8 = 2;

/// How long the daemon may take to answer (it serves one client at a time).
const TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `argv` (the whole command line) asks for the `ctl` subcommand.
pub fn wanted(argv: &[OsString]) -> bool {
    argv.get(1).is_some_and(|a| a == "ctl")
}

/// Runs `union-virtiofsd ctl` with `argv` (the command line from `ctl` on); the exit status.
pub fn run(argv: impl IntoIterator<Item = OsString>) -> u8 {
    let args = match CtlArgs::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) if !e.use_stderr() => {
            // --help, --version.
            let _ = e.print();
            return EXIT_OK;
        }
        Err(e) => {
            fail(&usage_error(&e));
            return EXIT_ERROR;
        }
    };
    let mut out = Vec::new();
    match execute(&args, &mut out) {
        Ok(()) => {
            let mut stdout = io::stdout().lock();
            match stdout.write_all(&out).and_then(|()| stdout.flush()) {
                // A reader that stops early (`| head -1`) is no error.
                Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
                    fail(&format!("cannot write the output: {e}"));
                    EXIT_ERROR
                }
                _ => EXIT_OK,
            }
        }
        Err(e) => {
            fail(&e.to_string());
            EXIT_ERROR
        }
    }
}

/// clap's message as one line: its first paragraph, without the usage after it.
pub fn usage_error(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let words: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let message = words.join(" ");
    message
        .strip_prefix("error: ")
        .unwrap_or(&message)
        .to_owned()
}

/// One line on stderr.
fn fail(message: &str) {
    let message = message.replace('\n', " ");
    let _ = writeln!(io::stderr(), "union-virtiofsd ctl: {message}");
}

/// Does what `args` asks, writing its output into `out` (printed only if all went well).
fn execute(args: &CtlArgs, out: &mut Vec<u8>) -> Result<(), ClientError> {
    let path = match (&args.ctl_socket, &args.socket) {
        (Some(c), _) => c.clone(),
        (None, Some(s)) => client::ctl_socket(s),
        (None, None) => unreachable!("clap requires --socket or --ctl-socket"),
    };
    let mut c = Client::connect(&path)?;
    c.set_timeout(Some(TIMEOUT))?;
    match &args.command {
        CtlCommand::Get { key: Some(key) } => {
            line(out, c.get(key)?.as_bytes());
        }
        CtlCommand::Get { key: None } => {
            for key in c.keys()? {
                let value = c.get(&key)?;
                line(out, format!("{key}={value}").as_bytes());
            }
        }
        CtlCommand::Set { key, value } => c.set(key, value)?,
        CtlCommand::Query { path, what } => {
            for v in c.query(path, what.name())? {
                line(out, &v);
            }
        }
        CtlCommand::Keys => {
            for key in c.keys()? {
                line(out, key.as_bytes());
            }
        }
    }
    Ok(())
}

fn line(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(bytes);
    out.push(b'\n');
}
