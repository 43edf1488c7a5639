//! The control socket's wire format, pure (no I/O): frames of a `u32` little-endian length and
//! a payload of NUL-separated fields. Decoding is for untrusted bytes: it rejects, never panics.
//!
//! Requests: `keys`, `get\0KEY`, `set\0KEY\0VALUE` (the directories a branch edit adds ride
//! along as SCM_RIGHTS descriptors, in the order of their paths in VALUE),
//! `query\0PATH\0WHAT` and `protocol`. Replies: `ok` followed by `\0VALUE` for each value (so
//! `ok` is no value and `ok\0` one empty value), or `err\0ERRNO\0MESSAGE` (ERRNO in decimal).
//!
//! Versions: this is protocol version [`PROTOCOL_VERSION`] (1), which `protocol` answers. The
//! verbs and frames above never change meaning; a later version only adds verbs, so an older
//! client works against a newer daemon unchanged. A client that needs a later verb asks
//! `protocol` first: a daemon from before `protocol` existed answers it
//! `err\0EINVAL\0malformed request: unknown verb 'protocol'`, which means version 1 (the
//! same verbs), and an unknown verb is always one such error line, never a broken connection.

/// The control protocol version this daemon speaks (`protocol` answers it).
pub const PROTOCOL_VERSION: u32 = 1;

/// The largest payload of one frame (requests and replies).
pub const MAX_FRAME: usize = 1 << 20;

/// Bytes of a frame's length header.
pub const HEADER_LEN: usize = 4;

/// A frame or payload that is not the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// A frame longer than [`MAX_FRAME`].
    #[error("frame of {0} bytes (at most {MAX_FRAME})")]
    Oversized(usize),
    /// The first field names no request or reply.
    #[error("unknown verb '{0}'")]
    UnknownVerb(String),
    /// A request with more or fewer fields than its verb takes.
    #[error("'{verb}' takes {want} fields, not {got}")]
    FieldCount {
        /// The verb.
        verb: &'static str,
        /// Fields it takes (the verb included).
        want: usize,
        /// Fields given.
        got: usize,
    },
    /// A field that is not UTF-8.
    #[error("the {0} is not UTF-8")]
    NotUtf8(&'static str),
    /// A field to encode that holds a NUL byte (it would split the field in two).
    #[error("the {0} holds a NUL byte")]
    Nul(&'static str),
    /// An error reply whose errno is not a positive decimal number.
    #[error("bad errno in an error reply")]
    BadErrno,
}

/// One request to the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Every key.
    Keys,
    /// The value of a key.
    Get {
        /// The key, without the `user.mergerfs.` prefix.
        key: String,
    },
    /// Sets a key (descriptors of the directories a branch edit adds travel with it).
    Set {
        /// The key.
        key: String,
        /// The new value.
        value: String,
    },
    /// A per-file query.
    Query {
        /// The union path.
        path: String,
        /// `basepath`, `relpath`, `fullpath` or `allpaths`.
        what: String,
    },
    /// The protocol version the daemon speaks.
    Protocol,
}

impl Request {
    /// The payload for this request; fails if a field holds a NUL byte.
    pub fn encode(&self) -> Result<Vec<u8>, ProtoError> {
        let fields: Vec<(&'static str, &str)> = match self {
            Request::Keys => vec![("verb", "keys")],
            Request::Get { key } => vec![("verb", "get"), ("key", key)],
            Request::Set { key, value } => {
                vec![("verb", "set"), ("key", key), ("value", value)]
            }
            Request::Query { path, what } => {
                vec![("verb", "query"), ("path", path), ("query", what)]
            }
            Request::Protocol => vec![("verb", "protocol")],
        };
        join(fields.iter().map(|(name, f)| (*name, f.as_bytes())))
    }

    /// Parses a request payload (at most [`MAX_FRAME`] bytes).
    pub fn decode(payload: &[u8]) -> Result<Self, ProtoError> {
        if payload.len() > MAX_FRAME {
            return Err(ProtoError::Oversized(payload.len()));
        }
        let fields: Vec<&[u8]> = payload.split(|b| *b == 0).collect();
        let verb = fields[0];
        let (name, want): (&'static str, usize) = match verb {
            b"keys" => ("keys", 1),
            b"get" => ("get", 2),
            b"set" => ("set", 3),
            b"query" => ("query", 3),
            b"protocol" => ("protocol", 1),
            _ => {
                let shown: String = String::from_utf8_lossy(verb).chars().take(32).collect();
                return Err(ProtoError::UnknownVerb(shown));
            }
        };
        if fields.len() != want {
            return Err(ProtoError::FieldCount {
                verb: name,
                want,
                got: fields.len(),
            });
        }
        let text = |i: usize, what: &'static str| {
            std::str::from_utf8(fields[i])
                .map(str::to_owned)
                .map_err(|_| ProtoError::NotUtf8(what))
        };
        Ok(match name {
            "keys" => Request::Keys,
            "protocol" => Request::Protocol,
            "get" => Request::Get {
                key: text(1, "key")?,
            },
            "set" => Request::Set {
                key: text(1, "key")?,
                value: text(2, "value")?,
            },
            _ => Request::Query {
                path: text(1, "path")?,
                what: text(2, "query")?,
            },
        })
    }
}

/// The daemon's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Done; the values asked for (none for `set`).
    Ok(Vec<Vec<u8>>),
    /// Refused or failed.
    Err {
        /// The errno (mergerfs's: ENODATA unknown key, EROFS read-only key, EINVAL bad value…).
        errno: i32,
        /// One line for the user.
        message: String,
    },
}

impl Reply {
    /// The payload for this reply; fails if a value holds a NUL byte. NULs in an error
    /// message (its last field) are sent as they are.
    pub fn encode(&self) -> Result<Vec<u8>, ProtoError> {
        match self {
            Reply::Ok(values) => {
                let fields = std::iter::once(("verb", &b"ok"[..]))
                    .chain(values.iter().map(|v| ("value", v.as_slice())));
                join(fields)
            }
            Reply::Err { errno, message } => {
                let mut out = format!("err\0{errno}\0").into_bytes();
                out.extend_from_slice(message.as_bytes());
                Ok(out)
            }
        }
    }

    /// Parses a reply payload.
    pub fn decode(payload: &[u8]) -> Result<Self, ProtoError> {
        if payload.len() > MAX_FRAME {
            return Err(ProtoError::Oversized(payload.len()));
        }
        let mut fields = payload.split(|b| *b == 0);
        match fields.next().unwrap_or_default() {
            b"ok" => Ok(Reply::Ok(fields.map(<[u8]>::to_vec).collect())),
            b"err" => {
                let mut parts = payload.splitn(3, |b| *b == 0).skip(1);
                let errno = parts
                    .next()
                    .and_then(|e| std::str::from_utf8(e).ok())
                    .and_then(|e| e.parse::<i32>().ok())
                    .filter(|e| *e > 0)
                    .ok_or(ProtoError::BadErrno)?;
                let Some(message) = parts.next() else {
                    return Err(ProtoError::FieldCount {
                        verb: "err",
                        want: 3,
                        got: 2,
                    });
                };
                Ok(Reply::Err {
                    errno,
                    message: String::from_utf8_lossy(message).into_owned(),
                })
            }
            verb => {
                let shown: String = String::from_utf8_lossy(verb).chars().take(32).collect();
                Err(ProtoError::UnknownVerb(shown))
            }
        }
    }
}

/// `payload` with its length header in front; fails if it is longer than [`MAX_FRAME`].
pub fn frame(payload: &[u8]) -> Result<Vec<u8>, ProtoError> {
    if payload.len() > MAX_FRAME {
        return Err(ProtoError::Oversized(payload.len()));
    }
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    // Fits: MAX_FRAME < u32::MAX.
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

/// The payload length a frame header announces; fails if it is longer than [`MAX_FRAME`].
pub fn frame_len(header: [u8; HEADER_LEN]) -> Result<usize, ProtoError> {
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(ProtoError::Oversized(len));
    }
    Ok(len)
}

/// The fields joined by NULs; fails on a field holding one.
fn join<'a>(fields: impl Iterator<Item = (&'static str, &'a [u8])>) -> Result<Vec<u8>, ProtoError> {
    let mut out = Vec::new();
    for (i, (name, f)) in fields.enumerate() {
        if f.contains(&0) {
            return Err(ProtoError::Nul(name));
        }
        if i > 0 {
            out.push(0);
        }
        out.extend_from_slice(f);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_have_their_documented_bytes() {
        let get = Request::Get { key: "a.b".into() };
        assert_eq!(get.encode().unwrap(), b"get\0a.b");
        assert_eq!(Request::Keys.encode().unwrap(), b"keys");
        assert_eq!(Request::Protocol.encode().unwrap(), b"protocol");
        assert_eq!(Request::decode(b"protocol").unwrap(), Request::Protocol);
        let set = Request::Set {
            key: "branches".into(),
            value: "+/a".into(),
        };
        assert_eq!(set.encode().unwrap(), b"set\0branches\0+/a");
        let q = Request::Query {
            path: "/f".into(),
            what: "allpaths".into(),
        };
        assert_eq!(q.encode().unwrap(), b"query\0/f\0allpaths");
        assert_eq!(
            Request::decode(b"get\0").unwrap(),
            Request::Get { key: "".into() }
        );
    }

    #[test]
    fn replies_tell_no_value_from_one_empty_value() {
        assert_eq!(Reply::Ok(vec![]).encode().unwrap(), b"ok");
        assert_eq!(Reply::Ok(vec![vec![]]).encode().unwrap(), b"ok\0");
        assert_eq!(Reply::decode(b"ok").unwrap(), Reply::Ok(vec![]));
        assert_eq!(Reply::decode(b"ok\0").unwrap(), Reply::Ok(vec![vec![]]));
        assert_eq!(
            Reply::decode(b"ok\0a\0b").unwrap(),
            Reply::Ok(vec![b"a".to_vec(), b"b".to_vec()])
        );
        let e = Reply::Err {
            errno: libc::EROFS,
            message: "read-only option 'version'".into(),
        };
        assert_eq!(
            e.encode().unwrap(),
            format!("err\0{}\0read-only option 'version'", libc::EROFS).as_bytes()
        );
    }

    #[test]
    fn malformed_requests_are_errors() {
        let cases: &[(&[u8], ProtoError)] = &[
            (b"", ProtoError::UnknownVerb(String::new())),
            (b"frob\0x", ProtoError::UnknownVerb("frob".into())),
            (b"GET\0x", ProtoError::UnknownVerb("GET".into())),
            (
                b"keys\0",
                ProtoError::FieldCount {
                    verb: "keys",
                    want: 1,
                    got: 2,
                },
            ),
            (
                b"get",
                ProtoError::FieldCount {
                    verb: "get",
                    want: 2,
                    got: 1,
                },
            ),
            (
                b"set\0k",
                ProtoError::FieldCount {
                    verb: "set",
                    want: 3,
                    got: 2,
                },
            ),
            (
                b"set\0k\0v\0w",
                ProtoError::FieldCount {
                    verb: "set",
                    want: 3,
                    got: 4,
                },
            ),
            (b"get\0\xff", ProtoError::NotUtf8("key")),
            (b"query\0/p\0\xc3", ProtoError::NotUtf8("query")),
        ];
        for (bytes, want) in cases {
            assert_eq!(Request::decode(bytes).as_ref(), Err(want), "{bytes:?}");
        }
        let big = vec![b'a'; MAX_FRAME + 1];
        assert_eq!(
            Request::decode(&big),
            Err(ProtoError::Oversized(MAX_FRAME + 1))
        );
    }

    #[test]
    fn malformed_replies_are_errors() {
        assert!(Reply::decode(b"").is_err());
        assert!(Reply::decode(b"maybe").is_err());
        assert_eq!(Reply::decode(b"err"), Err(ProtoError::BadErrno));
        assert_eq!(Reply::decode(b"err\0x\0m"), Err(ProtoError::BadErrno));
        assert_eq!(Reply::decode(b"err\0-5\0m"), Err(ProtoError::BadErrno));
        assert!(Reply::decode(b"err\x005").is_err());
        assert_eq!(
            Reply::decode(b"err\x005\0a\0b").unwrap(),
            Reply::Err {
                errno: 5,
                message: "a\0b".into()
            }
        );
    }

    #[test]
    fn nul_bytes_cannot_be_encoded_inside_a_field() {
        let set = Request::Set {
            key: "k".into(),
            value: "a\0b".into(),
        };
        assert_eq!(set.encode(), Err(ProtoError::Nul("value")));
        assert_eq!(
            Reply::Ok(vec![b"a\0".to_vec()]).encode(),
            Err(ProtoError::Nul("value"))
        );
    }

    #[test]
    fn frames_are_bounded() {
        assert_eq!(frame(b"keys").unwrap(), b"\x04\0\0\0keys");
        assert_eq!(frame_len([4, 0, 0, 0]), Ok(4));
        assert_eq!(frame_len((MAX_FRAME as u32).to_le_bytes()), Ok(MAX_FRAME));
        assert_eq!(
            frame_len([0xff; 4]),
            Err(ProtoError::Oversized(u32::MAX as usize))
        );
        assert!(frame(&vec![0; MAX_FRAME + 1]).is_err());
    }

    fn field() -> impl Strategy<Value = String> {
        "[^\0]{0,40}"
    }

    fn request() -> impl Strategy<Value = Request> {
        prop_oneof![
            Just(Request::Keys),
            Just(Request::Protocol),
            field().prop_map(|key| Request::Get { key }),
            (field(), field()).prop_map(|(key, value)| Request::Set { key, value }),
            (field(), field()).prop_map(|(path, what)| Request::Query { path, what }),
        ]
    }

    fn reply() -> impl Strategy<Value = Reply> {
        let value = proptest::collection::vec(1u8..=255, 0..20);
        prop_oneof![
            proptest::collection::vec(value, 0..6).prop_map(Reply::Ok),
            (1i32..4096, ".{0,60}").prop_map(|(errno, message)| Reply::Err { errno, message }),
        ]
    }

    proptest! {
        #[test]
        fn requests_round_trip(r in request()) {
            let framed = frame(&r.encode().unwrap()).unwrap();
            let len = frame_len(framed[..4].try_into().unwrap()).unwrap();
            prop_assert_eq!(len, framed.len() - 4);
            prop_assert_eq!(Request::decode(&framed[4..]).unwrap(), r);
        }

        #[test]
        fn replies_round_trip(r in reply()) {
            prop_assert_eq!(Reply::decode(&r.encode().unwrap()).unwrap(), r);
        }

        #[test]
        fn any_bytes_decode_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Request::decode(&bytes);
            let _ = Reply::decode(&bytes);
        }
    }
}
