//! A minimal QMP (QEMU Machine Protocol) client for the test harness: one JSON object per line
//! over a Unix socket, JSON handled by `serde_json`. Knows nothing about migration or guests;
//! [`crate::migrate`] drives it.

use std::fmt;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::ser::Formatter;

/// How long one command may wait for its reply: QEMU answers at once, except while its main
/// loop is busy (e.g. loading an incoming migration), which takes well under this.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A JSON value, as QMP sends and receives them (objects keep their members' order).
pub type Json = serde_json::Value;

/// `v` on one line in QEMU's own style, `{"a": 1, "b": [2, 3]}`: how commands are sent and how
/// the exchange appears in [`Qmp::log`] (tests look for e.g. `{"execute": "cont"}` there).
pub fn to_line(v: &Json) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Spaced);
    v.serialize(&mut ser)
        .expect("a JSON value serializes into a Vec");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// serde_json's compact output with a space after each `,` and `:`.
struct Spaced;

impl Spaced {
    fn separator<W: ?Sized + Write>(w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
}

impl Formatter for Spaced {
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        Spaced::separator(w, first)
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        Spaced::separator(w, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
}

/// What can go wrong talking QMP.
#[derive(Debug)]
pub enum QmpError {
    /// Connecting, reading or writing the socket failed (EOF included: QEMU exited).
    Io(io::Error),
    /// QEMU sent something that is not the expected JSON.
    Protocol(String),
    /// The command failed: QMP's `error` reply, class and description.
    Command {
        /// QMP error class, e.g. `GenericError`.
        class: String,
        /// Human-readable description.
        desc: String,
    },
}

impl fmt::Display for QmpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QmpError::Io(e) => write!(f, "QMP I/O: {e}"),
            QmpError::Protocol(m) => write!(f, "QMP protocol: {m}"),
            QmpError::Command { class, desc } => write!(f, "QMP {class}: {desc}"),
        }
    }
}

impl From<io::Error> for QmpError {
    fn from(e: io::Error) -> Self {
        QmpError::Io(e)
    }
}

/// One QMP session, in command mode (after `qmp_capabilities`).
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// Asynchronous events received while waiting for replies, in order.
    pub events: Vec<Json>,
    /// Commands sent and replies received (`->` / `<-` lines), for failure reports.
    pub log: String,
}

impl Qmp {
    /// Connects to the QMP socket at `path`, retrying (bounded by `deadline`) while QEMU has not
    /// created it yet, reads the greeting and enters command mode.
    pub fn connect(path: &Path, deadline: Instant) -> Result<Qmp, QmpError> {
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => return Err(e.into()),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        let mut qmp = Qmp {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            events: Vec::new(),
            log: String::new(),
        };
        let greeting = qmp.read_message()?;
        if greeting.get("QMP").is_none() {
            return Err(QmpError::Protocol(format!(
                "not a QMP greeting: {greeting}"
            )));
        }
        qmp.execute("qmp_capabilities", &[])?;
        Ok(qmp)
    }

    fn read_message(&mut self) -> Result<Json, QmpError> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "QEMU closed QMP").into());
        }
        serde_json::from_str(&line)
            .map_err(|e| QmpError::Protocol(format!("bad JSON ({e}): {}", line.trim_end())))
    }

    /// Runs `command` with `args` and returns its `return` value; events that arrive first are
    /// kept in [`Qmp::events`]. Every exchange is appended to [`Qmp::log`].
    pub fn execute(&mut self, command: &str, args: &[(&str, Json)]) -> Result<Json, QmpError> {
        self.execute_logged(command, args, true)
    }

    /// [`Qmp::execute`], appending to [`Qmp::log`] only if `log` (for polled queries).
    pub fn execute_logged(
        &mut self,
        command: &str,
        args: &[(&str, Json)],
        log: bool,
    ) -> Result<Json, QmpError> {
        let mut msg = serde_json::Map::new();
        msg.insert("execute".into(), command.into());
        if !args.is_empty() {
            let args = args.iter().map(|(k, v)| ((*k).to_owned(), v.clone()));
            msg.insert("arguments".into(), args.collect());
        }
        let msg = to_line(&msg.into());
        if log {
            self.log.push_str(&format!("-> {msg}\n"));
        }
        writeln!(self.writer, "{msg}")?;
        loop {
            let reply = self.read_message()?;
            if reply.get("event").is_some() {
                self.log.push_str(&format!("<- {}\n", to_line(&reply)));
                self.events.push(reply);
                continue;
            }
            if log {
                self.log.push_str(&format!("<- {}\n", to_line(&reply)));
            }
            if let Some(ret) = reply.get("return") {
                return Ok(ret.clone());
            }
            if let Some(err) = reply.get("error") {
                let field = |k| err.get(k).and_then(Json::as_str).unwrap_or("").to_owned();
                return Err(QmpError::Command {
                    class: field("class"),
                    desc: field("desc"),
                });
            }
            return Err(QmpError::Protocol(format!("unexpected reply: {reply}")));
        }
    }

    /// `query-status`: the run state, e.g. `running`, `inmigrate`, `postmigrate`, `paused`.
    pub fn status(&mut self) -> Result<String, QmpError> {
        let ret = self.execute_logged("query-status", &[], false)?;
        ret.get("status")
            .and_then(Json::as_str)
            .map(str::to_owned)
            .ok_or_else(|| QmpError::Protocol(format!("query-status without status: {ret}")))
    }

    /// `migrate-set-capabilities` for one capability.
    pub fn set_capability(&mut self, name: &str, on: bool) -> Result<(), QmpError> {
        let caps = serde_json::json!([{ "capability": name, "state": on }]);
        self.execute("migrate-set-capabilities", &[("capabilities", caps)])
            .map(drop)
    }

    /// `migrate` to `uri` (returns once started; poll [`Qmp::query_migrate`]).
    pub fn migrate(&mut self, uri: &str) -> Result<(), QmpError> {
        self.execute("migrate", &[("uri", uri.into())]).map(drop)
    }

    /// `query-migrate`, logged only when `log`.
    pub fn query_migrate(&mut self, log: bool) -> Result<Json, QmpError> {
        self.execute_logged("query-migrate", &[], log)
    }

    /// `cont`: resume a stopped guest.
    pub fn cont(&mut self) -> Result<(), QmpError> {
        self.execute("cont", &[]).map(drop)
    }

    /// `quit`: QEMU exits (it may close the socket before or after replying).
    pub fn quit(&mut self) -> Result<(), QmpError> {
        match self.execute("quit", &[]) {
            Err(QmpError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(()),
            r => r.map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::to_line;

    #[test]
    fn lines_look_like_qemus() {
        let v = serde_json::json!({ "execute": "x", "arguments": { "b": [1, true], "a": null } });
        assert_eq!(
            to_line(&v),
            r#"{"execute": "x", "arguments": {"b": [1, true], "a": null}}"#
        );
    }
}
