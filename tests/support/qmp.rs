//! A minimal QMP (QEMU Machine Protocol) client for the test harness: one JSON object per line
//! over a Unix socket, with just enough JSON to build commands and read replies. Knows nothing
//! about migration or guests; tests/support/migrate.rs drives it.
//!
//! Included by tests/support/migrate.rs with `#[path = "qmp.rs"] mod qmp;`.

// Each test crate uses a different subset of this module.
#![allow(dead_code)]

use std::fmt;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long one command may wait for its reply: QEMU answers at once, except while its main
/// loop is busy (e.g. loading an incoming migration), which takes well under this.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A JSON value, as QMP sends and receives them.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// Any number (QMP's are integers that fit an f64 exactly).
    Num(f64),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<Json>),
    /// An object, members in the order received.
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// Parses one JSON text.
    pub fn parse(text: &str) -> Result<Json, QmpError> {
        let mut p = Parser {
            s: text.as_bytes(),
            i: 0,
        };
        let v = p.value()?;
        p.ws();
        if p.i != p.s.len() {
            return Err(p.err("trailing characters"));
        }
        Ok(v)
    }

    /// Member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The number as u64, if this is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Num(n) if *n >= 0.0 && n.fract() == 0.0 => Some(*n as u64),
            _ => None,
        }
    }

    /// The bool, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// An object from `(key, value)` pairs.
    pub fn obj<'a>(members: impl IntoIterator<Item = (&'a str, Json)>) -> Json {
        Json::Obj(
            members
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        )
    }
}

impl From<&str> for Json {
    fn from(s: &str) -> Json {
        Json::Str(s.to_owned())
    }
}

impl From<bool> for Json {
    fn from(b: bool) -> Json {
        Json::Bool(b)
    }
}

impl From<u64> for Json {
    fn from(n: u64) -> Json {
        Json::Num(n as f64)
    }
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Json::Null => f.write_str("null"),
            Json::Bool(b) => write!(f, "{b}"),
            Json::Num(n) if n.fract() == 0.0 && n.abs() < 1e15 => write!(f, "{}", *n as i64),
            Json::Num(n) => write!(f, "{n}"),
            Json::Str(s) => write_str(f, s),
            Json::Arr(items) => {
                f.write_str("[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            Json::Obj(members) => {
                f.write_str("{")?;
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write_str(f, k)?;
                    write!(f, ": {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

fn write_str(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("\"")
}

/// A recursive-descent JSON parser over bytes (strings are re-assembled as UTF-8).
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> QmpError {
        QmpError::Protocol(format!(
            "bad JSON at byte {}: {what}: {}",
            self.i,
            String::from_utf8_lossy(self.s)
        ))
    }

    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &str) -> Result<(), QmpError> {
        if self.s[self.i..].starts_with(lit.as_bytes()) {
            self.i += lit.len();
            Ok(())
        } else {
            Err(self.err(&format!("expected {lit}")))
        }
    }

    fn value(&mut self) -> Result<Json, QmpError> {
        self.ws();
        match self.s.get(self.i) {
            Some(b'n') => self.eat("null").map(|()| Json::Null),
            Some(b't') => self.eat("true").map(|()| Json::Bool(true)),
            Some(b'f') => self.eat("false").map(|()| Json::Bool(false)),
            Some(b'"') => self.string().map(Json::Str),
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Json::Arr(items));
                }
                loop {
                    items.push(self.value()?);
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Json::Arr(items));
                        }
                        _ => return Err(self.err("expected , or ]")),
                    }
                }
            }
            Some(b'{') => {
                self.i += 1;
                let mut members = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Json::Obj(members));
                }
                loop {
                    self.ws();
                    let key = self.string()?;
                    self.ws();
                    self.eat(":")?;
                    members.push((key, self.value()?));
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Obj(members));
                        }
                        _ => return Err(self.err("expected , or }")),
                    }
                }
            }
            Some(c) if *c == b'-' || c.is_ascii_digit() => {
                let start = self.i;
                while self
                    .s
                    .get(self.i)
                    .is_some_and(|c| c.is_ascii_digit() || b"+-.eE".contains(c))
                {
                    self.i += 1;
                }
                std::str::from_utf8(&self.s[start..self.i])
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .map(Json::Num)
                    .ok_or_else(|| self.err("bad number"))
            }
            _ => Err(self.err("expected a value")),
        }
    }

    fn string(&mut self) -> Result<String, QmpError> {
        if self.s.get(self.i) != Some(&b'"') {
            return Err(self.err("expected a string"));
        }
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.s.get(self.i) else {
                return Err(self.err("unterminated string"));
            };
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.s.get(self.i) else {
                        return Err(self.err("unterminated escape"));
                    };
                    self.i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hex = self
                                .s
                                .get(self.i..self.i + 4)
                                .and_then(|h| std::str::from_utf8(h).ok())
                                .and_then(|h| u32::from_str_radix(h, 16).ok())
                                .ok_or_else(|| self.err("bad \\u escape"))?;
                            self.i += 4;
                            // QMP escapes control characters only; a lone surrogate becomes U+FFFD.
                            char::from_u32(hex).unwrap_or('\u{fffd}')
                        }
                        _ => return Err(self.err("bad escape")),
                    };
                    let mut buf = [0; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                c => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| self.err("invalid UTF-8 in a string"))
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
        Json::parse(line.trim())
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
        let mut msg = vec![("execute", Json::from(command))];
        if !args.is_empty() {
            msg.push(("arguments", Json::obj(args.iter().cloned())));
        }
        let msg = Json::obj(msg);
        if log {
            self.log.push_str(&format!("-> {msg}\n"));
        }
        writeln!(self.writer, "{msg}")?;
        loop {
            let reply = self.read_message()?;
            if reply.get("event").is_some() {
                self.log.push_str(&format!("<- {reply}\n"));
                self.events.push(reply);
                continue;
            }
            if log {
                self.log.push_str(&format!("<- {reply}\n"));
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
        let cap = Json::obj([("capability", Json::from(name)), ("state", on.into())]);
        self.execute(
            "migrate-set-capabilities",
            &[("capabilities", Json::Arr(vec![cap]))],
        )
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
    use super::Json;

    #[test]
    fn parses_and_prints_qmp_replies() {
        let text = r#"{"return": {"status": "failed", "error-desc": "a \"b\"\n\u00e9", "downtime": 4, "ram": [1, -2.5, true, null]}}"#;
        let v = Json::parse(text).unwrap();
        let ret = v.get("return").unwrap();
        assert_eq!(ret.get("status").and_then(Json::as_str), Some("failed"));
        assert_eq!(
            ret.get("error-desc").and_then(Json::as_str),
            Some("a \"b\"\né")
        );
        assert_eq!(ret.get("downtime").and_then(Json::as_u64), Some(4));
        assert_eq!(Json::parse(&v.to_string()).unwrap(), v);
        assert!(Json::parse("{\"a\": 1,}").is_err());
    }
}
