//! virtiofsd's `--xattrmap`: parses its rule string and renames, refuses or hides xattr names
//! between guest and host, rule for rule as virtiofsd 1.14 (its `passthrough/xattrmap.rs`
//! and `doc/xattr-mapping.md`). Pure: no I/O and no errno; `fs/ops/xattr.rs` applies it.
//!
//! A map is a list of rules, each `<sep>type<sep>scope<sep>key<sep>prepend<sep>` where `<sep>`
//! is the rule's first character (any one, `:` and `/` being usual), with white space allowed
//! between rules:
//!
//! - scope `client` matches a name the guest sends (get/set/remove) that starts with `key`;
//!   `server` matches a name the host lists that starts with `prepend`; `all` is both.
//! - type `prefix`: a guest name becomes `prepend` + name; a host name loses `prepend`.
//!   `ok`: unchanged. `bad`: the guest is refused (EPERM, ENODATA for a read) and the host
//!   name hidden. `unsupported`: refused with ENOTSUP, hidden.
//! - `<sep>map<sep>key<sep>prepend<sep>`, allowed once and last, stands for `prefix` on `key`,
//!   then (with a `key`) `bad` on the other direction's prefixes and `ok` for the rest, or
//!   (without) `bad` for the rest.
//!
//! The first rule that matches decides. Where no rule matches, virtiofsd 1.14 panics; here
//! the name is refused and hidden, as by QEMU's C virtiofsd, whose parser ends every map
//! with `:bad:all:::`. A field's non-ASCII characters are matched as their UTF-8 bytes
//! (virtiofsd keeps only each character's low byte, so such a rule never matches there).

use std::borrow::Cow;
use std::ffi::{CStr, CString};

/// Why a `--xattrmap` string is refused; rules are numbered from 1.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Only white space: a map needs at least one rule.
    #[error("no rules (a rule is :type:scope:key:prepend: or :map:key:prepend:)")]
    NoRules,
    /// The text ends inside a rule: the separator closing one of its fields is missing.
    #[error("rule {rule}: no '{sep}' closing its {field} field (a rule's first character is its separator, as ':' in :type:scope:key:prepend: or :map:key:prepend:)")]
    Incomplete {
        /// The rule's number.
        rule: usize,
        /// Its separator.
        sep: char,
        /// The field left open: type, scope, key or prepend.
        field: &'static str,
    },
    /// A type other than prefix, ok, bad, unsupported or map.
    #[error("rule {rule}: unknown type '{got}' (expected prefix, ok, bad, unsupported or map)")]
    Type {
        /// The rule's number.
        rule: usize,
        /// What it says.
        got: String,
    },
    /// A scope other than all, client or server.
    #[error("rule {rule}: unknown scope '{got}' (expected all, client or server)")]
    Scope {
        /// The rule's number.
        rule: usize,
        /// What it says.
        got: String,
    },
    /// A `map` rule followed by another rule (there is at most one, and it is the last).
    #[error("rule {rule}: a map rule must be the last rule")]
    MapNotLast {
        /// The map rule's number.
        rule: usize,
    },
    /// A NUL character in a field (no xattr name contains one).
    #[error("rule {rule}: a NUL character in a field")]
    Nul {
        /// The rule's number.
        rule: usize,
    },
}

/// What a matching rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Prefix,
    Ok,
    Bad,
    Unsupported,
}

/// One rule, `map` already expanded.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    kind: Kind,
    /// Applies to names from the guest (matched against `key`).
    client: bool,
    /// Applies to names the host lists (matched against `prepend`).
    server: bool,
    key: Vec<u8>,
    prepend: Vec<u8>,
}

impl Rule {
    fn all(kind: Kind, key: &[u8], prepend: &[u8]) -> Rule {
        Rule {
            kind,
            client: true,
            server: true,
            key: key.to_vec(),
            prepend: prepend.to_vec(),
        }
    }
}

/// The host name a guest name stands for, or how it is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientName<'a> {
    /// Use this name on the host (the guest's own when a rule lets it through unchanged).
    Use(Cow<'a, CStr>),
    /// A `bad` rule (or none) matched: EPERM, or ENODATA for a read (as virtiofsd).
    Refused,
    /// An `unsupported` rule matched: ENOTSUP.
    Unsupported,
}

/// A parsed `--xattrmap`: its rules in order, `map` expanded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XattrMap {
    rules: Vec<Rule>,
    /// The host name `security.capability` is renamed to, if the map renames it.
    capability: Option<CString>,
}

/// The file capability xattr (`vfs_cap_data`), which a write, truncate or chown clears.
const CAPABILITY: &CStr = c"security.capability";

/// The rule field names, in order, for [`ParseError::Incomplete`].
const FIELDS: [&str; 4] = ["type", "scope", "key", "prepend"];

/// Reads one rule's fields from `chars`, which stands just after its separator `sep`.
struct Fields<'t, I: Iterator<Item = char>> {
    chars: &'t mut std::iter::Peekable<I>,
    sep: char,
    rule: usize,
    /// The next field's index into [`FIELDS`] (the `map` type skips `scope`).
    at: usize,
}

impl<I: Iterator<Item = char>> Fields<'_, I> {
    /// The next field's bytes, consuming its closing separator.
    fn next(&mut self) -> Result<Vec<u8>, ParseError> {
        let field = FIELDS[self.at];
        self.at += 1;
        let mut bytes = Vec::new();
        loop {
            match self.chars.next() {
                Some(c) if c == self.sep => return Ok(bytes),
                Some('\0') => return Err(ParseError::Nul { rule: self.rule }),
                Some(c) => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                None => {
                    return Err(ParseError::Incomplete {
                        rule: self.rule,
                        sep: self.sep,
                        field,
                    })
                }
            }
        }
    }
}

impl XattrMap {
    /// Parses virtiofsd's rule syntax (see the module documentation); a map holds at least
    /// one rule.
    pub fn parse(text: &str) -> Result<XattrMap, ParseError> {
        let mut chars = text.trim().chars().peekable();
        let mut rules = Vec::new();
        while let Some(sep) = chars.next() {
            if sep.is_ascii_whitespace() {
                continue;
            }
            let rule = rules.len() + 1;
            let mut fields = Fields {
                chars: &mut chars,
                sep,
                rule,
                at: 0,
            };
            let kind = fields.next()?;
            let kind = match kind.as_slice() {
                b"prefix" => Kind::Prefix,
                b"ok" => Kind::Ok,
                b"bad" => Kind::Bad,
                b"unsupported" => Kind::Unsupported,
                b"map" => {
                    fields.at += 1;
                    let (key, prepend) = (fields.next()?, fields.next()?);
                    if chars.peek().is_some() {
                        return Err(ParseError::MapNotLast { rule });
                    }
                    rules.extend(expand_map(&key, &prepend));
                    break;
                }
                _ => {
                    return Err(ParseError::Type {
                        rule,
                        got: String::from_utf8_lossy(&kind).into_owned(),
                    })
                }
            };
            let scope = fields.next()?;
            let (client, server) = match scope.as_slice() {
                b"all" => (true, true),
                b"client" => (true, false),
                b"server" => (false, true),
                _ => {
                    return Err(ParseError::Scope {
                        rule,
                        got: String::from_utf8_lossy(&scope).into_owned(),
                    })
                }
            };
            let (key, prepend) = (fields.next()?, fields.next()?);
            rules.push(Rule {
                kind,
                client,
                server,
                key,
                prepend,
            });
        }
        if rules.is_empty() {
            return Err(ParseError::NoRules);
        }
        let mut map = XattrMap {
            rules,
            capability: None,
        };
        map.capability = match map.client(CAPABILITY) {
            ClientName::Use(Cow::Owned(name)) if name.as_c_str() != CAPABILITY => Some(name),
            _ => None,
        };
        Ok(map)
    }

    /// The host name the guest's `security.capability` is stored under when the map renames
    /// it (none when it passes unchanged or is refused): the host kernel clears only the real
    /// one on a write, truncate or chown, so the daemon must clear this one itself.
    pub fn renamed_capability(&self) -> Option<&CStr> {
        self.capability.as_deref()
    }

    /// Whether some rule matches every guest name and some rule every host name (a catch-all
    /// such as `:ok:all:::` or a `map` rule): virtiofsd asks for one. Without it, names no
    /// rule matches are refused and hidden.
    pub fn catches_all(&self) -> bool {
        let client = self.rules.iter().any(|r| r.client && r.key.is_empty());
        let server = self.rules.iter().any(|r| r.server && r.prepend.is_empty());
        client && server
    }

    /// What the guest's `name` (for getxattr, setxattr or removexattr) is on the host.
    pub fn client<'a>(&self, name: &'a CStr) -> ClientName<'a> {
        let bytes = name.to_bytes();
        let rule = self
            .rules
            .iter()
            .find(|r| r.client && bytes.starts_with(&r.key));
        let Some(rule) = rule else {
            return ClientName::Refused;
        };
        match rule.kind {
            Kind::Ok => ClientName::Use(Cow::Borrowed(name)),
            Kind::Prefix => {
                let mut mapped = rule.prepend.clone();
                mapped.extend_from_slice(bytes);
                // Neither part holds a NUL (the parser and CStr see to it).
                ClientName::Use(Cow::Owned(CString::new(mapped).expect("no NUL")))
            }
            Kind::Bad => ClientName::Refused,
            Kind::Unsupported => ClientName::Unsupported,
        }
    }

    /// The guest's view of the host's NUL-terminated name list `list` (listxattr): each name
    /// renamed, kept or hidden by the first rule matching it; names left empty are dropped.
    pub fn server_list(&self, list: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(list.len());
        for name in list.split(|b| *b == 0).filter(|n| !n.is_empty()) {
            let rule = self
                .rules
                .iter()
                .find(|r| r.server && name.starts_with(&r.prepend));
            let shown = match rule {
                Some(r) if r.kind == Kind::Ok => name,
                Some(r) if r.kind == Kind::Prefix => &name[r.prepend.len()..],
                _ => continue,
            };
            if !shown.is_empty() {
                out.extend_from_slice(shown);
                out.push(0);
            }
        }
        out
    }
}

/// The rules `map` stands for (virtiofsd's expansion).
fn expand_map(key: &[u8], prepend: &[u8]) -> Vec<Rule> {
    let mut rules = vec![Rule::all(Kind::Prefix, key, prepend)];
    if key.is_empty() {
        rules.push(Rule::all(Kind::Bad, b"", b""));
    } else {
        // Host names under `key` unprefixed are hidden, and the guest may not reach the
        // prefixed names directly.
        rules.push(Rule::all(Kind::Bad, prepend, key));
        rules.push(Rule::all(Kind::Ok, b"", b""));
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(text: &str) -> XattrMap {
        XattrMap::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn rule(kind: Kind, scope: &str, key: &str, prepend: &str) -> Rule {
        Rule {
            kind,
            client: scope != "server",
            server: scope != "client",
            key: key.into(),
            prepend: prepend.into(),
        }
    }

    /// The guest name's fate: `=NAME` (host name), `EPERM` or `ENOTSUP`.
    fn client(m: &XattrMap, name: &str) -> String {
        let c = CString::new(name).unwrap();
        match m.client(&c) {
            ClientName::Use(n) => format!("={}", n.to_str().unwrap()),
            ClientName::Refused => "EPERM".into(),
            ClientName::Unsupported => "ENOTSUP".into(),
        }
    }

    /// The guest's list for host names `names`.
    fn server(m: &XattrMap, names: &[&str]) -> Vec<String> {
        let mut list = Vec::new();
        for n in names {
            list.extend_from_slice(n.as_bytes());
            list.push(0);
        }
        let out = m.server_list(&list);
        assert!(out.is_empty() || out.ends_with(&[0]));
        out.split(|b| *b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| String::from_utf8(n.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn parses_one_rule_per_type_and_scope() {
        let m = map(":prefix:client:trusted.:user.virtiofs.:");
        assert_eq!(
            m.rules,
            [rule(Kind::Prefix, "client", "trusted.", "user.virtiofs.")]
        );
        let m = map(":ok:server::security.: :bad:all::: :unsupported:client:x.::");
        assert_eq!(
            m.rules,
            [
                rule(Kind::Ok, "server", "", "security."),
                rule(Kind::Bad, "all", "", ""),
                rule(Kind::Unsupported, "client", "x.", ""),
            ]
        );
    }

    /// virtiofsd's documented example 2: `/` as separator, rules on lines of their own.
    #[test]
    fn rules_on_several_lines_with_another_separator() {
        let m = map(
            "\n        /prefix/all/trusted./user.virtiofs./\n        /bad/server//trusted./\n        \
             /bad/client/user.virtiofs.//\n        /ok/all///\n        ",
        );
        assert_eq!(
            m.rules,
            [
                rule(Kind::Prefix, "all", "trusted.", "user.virtiofs."),
                rule(Kind::Bad, "server", "", "trusted."),
                rule(Kind::Bad, "client", "user.virtiofs.", ""),
                rule(Kind::Ok, "all", "", ""),
            ]
        );
        assert_eq!(client(&m, "trusted.a"), "=user.virtiofs.trusted.a");
        assert_eq!(client(&m, "user.virtiofs.trusted.a"), "EPERM");
        assert_eq!(client(&m, "user.b"), "=user.b");
        assert_eq!(client(&m, "security.selinux"), "=security.selinux");
        assert_eq!(
            server(
                &m,
                &[
                    "user.virtiofs.trusted.a",
                    "trusted.raw",
                    "user.b",
                    "security.c"
                ]
            ),
            ["trusted.a", "user.b", "security.c"]
        );
        // Each rule may pick its own separator.
        assert_eq!(
            map(":prefix:all:trusted.:user.virtiofs.: /prefix/all/trusted./user.virtiofs./").rules,
            [
                rule(Kind::Prefix, "all", "trusted.", "user.virtiofs."),
                rule(Kind::Prefix, "all", "trusted.", "user.virtiofs."),
            ]
        );
    }

    /// Example 1: every name under one prefix, and its `map` shorthand.
    #[test]
    fn prefix_everything_and_its_map_shorthand() {
        let long = map(":prefix:all::user.virtiofs.::bad:all:::");
        let short = map(":map::user.virtiofs.:");
        assert_eq!(long, short);
        for m in [&long, &short] {
            assert_eq!(client(m, "trusted.x"), "=user.virtiofs.trusted.x");
            assert_eq!(client(m, "user.y"), "=user.virtiofs.user.y");
            assert_eq!(
                server(
                    m,
                    &["user.virtiofs.trusted.x", "user.y", "security.selinux"]
                ),
                ["trusted.x"]
            );
        }
        assert!(short.catches_all());
    }

    /// `:map:KEY:PREPEND:` with a key is example 2's four rules (virtiofsd's expansion).
    #[test]
    fn map_with_a_key_expands_to_prefix_bad_ok() {
        let m = map("/map/trusted./user.virtiofs./");
        assert_eq!(
            m.rules,
            [
                rule(Kind::Prefix, "all", "trusted.", "user.virtiofs."),
                rule(Kind::Bad, "all", "user.virtiofs.", "trusted."),
                rule(Kind::Ok, "all", "", ""),
            ]
        );
    }

    /// The SELinux case: the guest's labels kept apart from the host's.
    #[test]
    fn selinux_labels_under_trusted_virtiofs() {
        let m = map(":map:security.:trusted.virtiofs.:");
        assert_eq!(
            client(&m, "security.selinux"),
            "=trusted.virtiofs.security.selinux"
        );
        assert_eq!(client(&m, "trusted.virtiofs.security.selinux"), "EPERM");
        assert_eq!(client(&m, "user.z"), "=user.z");
        assert_eq!(client(&m, "trusted.other"), "=trusted.other");
        assert_eq!(
            server(
                &m,
                &[
                    "security.selinux",
                    "trusted.virtiofs.security.selinux",
                    "user.z",
                    "trusted.other"
                ]
            ),
            ["security.selinux", "user.z", "trusted.other"]
        );
    }

    /// The map the real-guest test uses: `trusted.*` moved under `user.vm.`, other `user.*`
    /// kept, the rest refused; on the way back every host name passes (`:ok:all:user.::`
    /// matches every server name, its prepend being empty).
    #[test]
    fn prefix_ok_bad_with_empty_fields() {
        // A rule ends with its separator and the next starts with its own: `::` ends one
        // rule and starts the next, but `:ok:all:user.::` already ends with its second `:`,
        // so `bad:all:::` would be a rule whose separator is `b` (virtiofsd 1.14 refuses it
        // too: IncompleteRule in rule 3).
        assert_eq!(
            XattrMap::parse(":prefix:all:trusted.:user.vm.::ok:all:user.::bad:all:::"),
            Err(ParseError::Incomplete {
                rule: 3,
                sep: 'b',
                field: "type"
            })
        );
        let m = map(":prefix:all:trusted.:user.vm.::ok:all:user.:::bad:all:::");
        assert_eq!(client(&m, "trusted.foo"), "=user.vm.trusted.foo");
        assert_eq!(client(&m, "user.bar"), "=user.bar");
        assert_eq!(client(&m, "user.vm.trusted.foo"), "=user.vm.trusted.foo");
        assert_eq!(client(&m, "security.baz"), "EPERM");
        assert_eq!(
            server(&m, &["user.vm.trusted.foo", "user.bar", "security.raw"]),
            ["trusted.foo", "user.bar", "security.raw"]
        );
    }

    /// Example 3: `security.*` refused and hidden both ways, everything else through.
    #[test]
    fn bad_hides_and_refuses_unsupported_too() {
        let m = map("/bad/all/security./security./\n/ok/all///");
        assert_eq!(client(&m, "security.x"), "EPERM");
        assert_eq!(client(&m, "user.x"), "=user.x");
        assert_eq!(server(&m, &["security.x", "user.x"]), ["user.x"]);
        let m = map(":unsupported:all:security.:security.::ok:all:::");
        assert_eq!(client(&m, "security.x"), "ENOTSUP");
        assert_eq!(server(&m, &["security.x", "user.x"]), ["user.x"]);
    }

    #[test]
    fn the_capability_name_when_renamed_only() {
        let renamed = |text: &str| {
            map(text)
                .renamed_capability()
                .map(|n| n.to_str().unwrap().to_owned())
        };
        assert_eq!(
            renamed(":map:security.:trusted.virtiofs.:").as_deref(),
            Some("trusted.virtiofs.security.capability")
        );
        assert_eq!(
            renamed(":map::user.virtiofs.:").as_deref(),
            Some("user.virtiofs.security.capability")
        );
        assert_eq!(
            renamed(":prefix:client:security.capability:user.c.: :ok:all:::").as_deref(),
            Some("user.c.security.capability")
        );
        // Passed unchanged (the host kernel clears it), refused or unsupported: nothing to do.
        assert_eq!(renamed(":ok:all:::"), None);
        assert_eq!(
            renamed(":prefix:all:trusted.:user.vm.::ok:all:user.:::bad:all:::"),
            None
        );
        assert_eq!(
            renamed(":unsupported:all:security.:security.: ;ok;all;;;"),
            None
        );
        // A rule for the server side alone does not rename a guest name.
        assert_eq!(renamed(":prefix:server::user.s.: :ok:all:::"), None);
    }

    #[test]
    fn scopes_apply_to_their_direction_only() {
        let m = map(":prefix:client:a.:user.a.::prefix:server::user.b.::ok:all:::");
        // The client rule does not strip, the server rule does not prepend.
        assert_eq!(client(&m, "a.x"), "=user.a.a.x");
        assert_eq!(client(&m, "b.x"), "=b.x");
        assert_eq!(server(&m, &["user.a.a.x", "user.b.y"]), ["user.a.a.x", "y"]);
    }

    /// virtiofsd 1.14 panics where no rule matches; here the name is refused and hidden (QEMU's
    /// C virtiofsd's implicit `:bad:all:::`).
    #[test]
    fn unmatched_names_are_refused_and_hidden() {
        let m = map(":prefix:client:trusted.:user.virtiofs.:");
        assert!(!m.catches_all());
        assert_eq!(client(&m, "user.x"), "EPERM");
        assert!(server(&m, &["user.x", "trusted.y"]).is_empty());
        assert!(map(":ok:client:::").rules[0].client);
        assert!(!map(":ok:client:::").catches_all());
        assert!(map(":ok:client::: :bad:server:::").catches_all());
    }

    /// A host name that is exactly the stripped prefix leaves nothing to show.
    #[test]
    fn empty_names_are_dropped_from_lists() {
        let m = map(":map::user.vm.:");
        assert!(server(&m, &["user.vm.", "user.vm.a"]) == ["a"]);
        assert!(m.server_list(b"").is_empty());
        assert!(m.server_list(b"user.x\0").is_empty());
    }

    #[test]
    fn bad_input_gives_a_clear_error() {
        let err = |t: &str| XattrMap::parse(t).unwrap_err();
        assert_eq!(err(""), ParseError::NoRules);
        assert_eq!(err(" \n\t "), ParseError::NoRules);
        assert_eq!(
            err(":prefix:client:hi"),
            ParseError::Incomplete {
                rule: 1,
                sep: ':',
                field: "key"
            }
        );
        assert_eq!(
            err(":ok:all::: :prefix:all:trusted.:user.vm."),
            ParseError::Incomplete {
                rule: 2,
                sep: ':',
                field: "prepend"
            }
        );
        assert_eq!(
            err(":TOMATOPIRATE:trusted.:virtiofs.user.:"),
            ParseError::Type {
                rule: 1,
                got: "TOMATOPIRATE".into()
            }
        );
        assert_eq!(
            err("/prefix/helloworld///"),
            ParseError::Scope {
                rule: 1,
                got: "helloworld".into()
            }
        );
        assert_eq!(
            err(":map:trusted.:virtiofs.user.::map:trusted.:virtiofs.user.:"),
            ParseError::MapNotLast { rule: 1 }
        );
        assert_eq!(
            err(":ok:all::: :map::x.: :ok:all:::"),
            ParseError::MapNotLast { rule: 2 }
        );
        assert_eq!(err(":ok:all:a\0:b:"), ParseError::Nul { rule: 1 });
        // Types and scopes are case-sensitive, as in virtiofsd.
        assert!(matches!(err(":OK:all:::"), ParseError::Type { .. }));
        assert!(matches!(err(":ok:All:::"), ParseError::Scope { .. }));
        assert_eq!(
            err(":prefix:client:hi").to_string(),
            "rule 1: no ':' closing its key field (a rule's first character is its \
             separator, as ':' in :type:scope:key:prepend: or :map:key:prepend:)"
        );
        assert_eq!(
            err("/prefix/helloworld///").to_string(),
            "rule 1: unknown scope 'helloworld' (expected all, client or server)"
        );
    }

    #[test]
    fn white_space_around_and_between_rules_only() {
        assert_eq!(map("  :map::u.:  \n"), map(":map::u.:"));
        // Inside a rule, white space is part of its field.
        assert_eq!(
            XattrMap::parse(": ok :all:::"),
            Err(ParseError::Type {
                rule: 1,
                got: " ok ".into()
            })
        );
        assert_eq!(map(":ok:all: :: :bad:all:::").rules[0].key, b" ");
    }
}
