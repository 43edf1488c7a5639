//! `union-virtiofsd ctl`: the command-line client of a running daemon's control socket.
//! Prints values on stdout, one per line; any error is one line on stderr and status 2.
//! Never exits by itself (`main` does) and never panics on its input.

use std::io::{self, Write};
use std::time::Duration;

use super::client::{self, Client, ClientError};
use crate::args::{CtlArgs, CtlCommand};

/// Exit status of a successful request.
pub const EXIT_OK: u8 = 0;
/// Exit status of any error.
pub const EXIT_ERROR: u8 = 2;

/// How long the daemon may take to answer (it serves one client at a time).
const TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `union-virtiofsd ctl` as `args` ask; the exit status.
pub fn run(args: &CtlArgs) -> u8 {
    let mut out = Vec::new();
    match execute(args, &mut out) {
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
