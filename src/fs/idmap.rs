//! `--translate-uid`/`--translate-gid` as virtiofsd defines them: ids are translated by the
//! daemon (no user namespace). Guest ids (a request's caller, a chown's new owner) go through
//! the guest-to-host rules; host ids (every attribute returned) through the host-to-guest rules.
//! Ids no rule covers pass unchanged; the rules of one direction may not overlap. Pure logic.

use std::ops::Range;

/// One rule of one direction.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Rule {
    /// 1:1 from `from` onto `to..`.
    Range { from: Range<u64>, to: u32 },
    /// Every id of `from` onto `to`.
    Squash { from: Range<u64>, to: u32 },
    /// Refused (guest to host only).
    Forbid { from: Range<u64> },
}

impl Rule {
    fn source(&self) -> &Range<u64> {
        match self {
            Rule::Range { from, .. } | Rule::Squash { from, .. } | Rule::Forbid { from } => from,
        }
    }
}

/// The rules for one kind of id (uids or gids), both directions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdMap {
    guest_to_host: Vec<Rule>,
    host_to_guest: Vec<Rule>,
}

/// A guest id a `forbid-guest` rule refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("guest id {0} is forbidden by --translate-uid/--translate-gid")]
pub struct Forbidden(pub u32);

/// A rule set that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdMapError {
    /// Two rules of one direction cover the same id.
    #[error("{direction} id translations overlap at id {id}")]
    Overlap {
        /// "guest-to-host" or "host-to-guest".
        direction: &'static str,
        /// The first id covered twice.
        id: u64,
    },
    /// A range that runs past the last id.
    #[error("id range {base}+{count} runs past 4294967295")]
    TooLong {
        /// First id.
        base: u32,
        /// Length.
        count: u32,
    },
}

/// The kinds of rules, as `args` parses them (virtiofsd's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `guest:GUEST:HOST:COUNT`.
    Guest,
    /// `host:HOST:GUEST:COUNT`.
    Host,
    /// `squash-guest:GUEST:HOST:COUNT`.
    SquashGuest,
    /// `squash-host:HOST:GUEST:COUNT`.
    SquashHost,
    /// `forbid-guest:GUEST:COUNT`.
    ForbidGuest,
    /// `map:GUEST:HOST:COUNT`, both directions.
    Map,
}

fn span(base: u32, count: u32) -> Result<Range<u64>, IdMapError> {
    let end = u64::from(base) + u64::from(count);
    if end > u64::from(u32::MAX) + 1 {
        return Err(IdMapError::TooLong { base, count });
    }
    Ok(u64::from(base)..end)
}

fn push(rules: &mut Vec<Rule>, rule: Rule, direction: &'static str) -> Result<(), IdMapError> {
    let new = rule.source().clone();
    if let Some(old) = rules
        .iter()
        .map(Rule::source)
        .find(|o| o.start < new.end && new.start < o.end)
    {
        return Err(IdMapError::Overlap {
            direction,
            id: old.start.max(new.start),
        });
    }
    rules.push(rule);
    Ok(())
}

fn apply(rules: &[Rule], id: u32) -> Result<u32, Forbidden> {
    let x = u64::from(id);
    match rules.iter().find(|r| r.source().contains(&x)) {
        None => Ok(id),
        Some(Rule::Range { from, to }) => Ok(to.wrapping_add((x - from.start) as u32)),
        Some(Rule::Squash { to, .. }) => Ok(*to),
        Some(Rule::Forbid { .. }) => Err(Forbidden(id)),
    }
}

impl IdMap {
    /// Builds the map from `(kind, source base, target base, count)` rules in command-line
    /// order (`target` is unused by `forbid-guest`).
    pub fn new(rules: &[(Kind, u32, u32, u32)]) -> Result<Self, IdMapError> {
        const G2H: &str = "guest-to-host";
        const H2G: &str = "host-to-guest";
        let mut m = IdMap::default();
        for &(kind, from, to, count) in rules {
            let from_span = span(from, count)?;
            match kind {
                Kind::Guest => push(
                    &mut m.guest_to_host,
                    Rule::Range {
                        from: from_span,
                        to,
                    },
                    G2H,
                )?,
                Kind::Host => push(
                    &mut m.host_to_guest,
                    Rule::Range {
                        from: from_span,
                        to,
                    },
                    H2G,
                )?,
                Kind::SquashGuest => push(
                    &mut m.guest_to_host,
                    Rule::Squash {
                        from: from_span,
                        to,
                    },
                    G2H,
                )?,
                Kind::SquashHost => push(
                    &mut m.host_to_guest,
                    Rule::Squash {
                        from: from_span,
                        to,
                    },
                    H2G,
                )?,
                Kind::ForbidGuest => {
                    push(&mut m.guest_to_host, Rule::Forbid { from: from_span }, G2H)?
                }
                Kind::Map => {
                    span(to, count)?;
                    push(
                        &mut m.guest_to_host,
                        Rule::Range {
                            from: from_span,
                            to,
                        },
                        G2H,
                    )?;
                    let back = Rule::Range {
                        from: span(to, count)?,
                        to: from,
                    };
                    push(&mut m.host_to_guest, back, H2G)?;
                }
            }
        }
        Ok(m)
    }

    /// Whether every id passes unchanged in both directions.
    pub fn is_identity(&self) -> bool {
        self.guest_to_host.is_empty() && self.host_to_guest.is_empty()
    }

    /// The host id for guest id `id`.
    pub fn to_host(&self, id: u32) -> Result<u32, Forbidden> {
        apply(&self.guest_to_host, id)
    }

    /// The guest id for host id `id` (never refused).
    pub fn to_guest(&self, id: u32) -> u32 {
        apply(&self.host_to_guest, id).unwrap_or(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_translates_in_its_own_direction_only() {
        let m = IdMap::new(&[
            (Kind::Guest, 1000, 5000, 10),
            (Kind::Host, 7000, 2000, 5),
            (Kind::SquashGuest, 3000, 99, 100),
            (Kind::SquashHost, 8000, 65534, 1000),
            (Kind::ForbidGuest, 0, 0, 1),
        ])
        .unwrap();
        assert_eq!(m.to_host(1000), Ok(5000));
        assert_eq!(m.to_host(1009), Ok(5009));
        assert_eq!(m.to_host(1010), Ok(1010), "past the range: unchanged");
        assert_eq!(m.to_guest(5000), 5000, "guest rule is one-way");
        assert_eq!(m.to_guest(7004), 2004);
        assert_eq!(m.to_host(2004), Ok(2004), "host rule is one-way");
        assert_eq!(m.to_host(3050), Ok(99));
        assert_eq!(m.to_guest(8999), 65534);
        assert_eq!(m.to_guest(9000), 9000);
        assert_eq!(m.to_host(0), Err(Forbidden(0)));
        assert_eq!(m.to_guest(0), 0);
        assert!(!m.is_identity());
        assert!(IdMap::new(&[]).unwrap().is_identity());
    }

    #[test]
    fn map_is_both_ways_and_overlaps_are_refused() {
        let m = IdMap::new(&[(Kind::Map, 0, 100_000, 65536)]).unwrap();
        assert_eq!(m.to_host(1000), Ok(101_000));
        assert_eq!(m.to_guest(101_000), 1000);
        assert_eq!(m.to_guest(99_999), 99_999);
        assert_eq!(
            IdMap::new(&[(Kind::Guest, 10, 0, 10), (Kind::ForbidGuest, 15, 0, 1)]),
            Err(IdMapError::Overlap {
                direction: "guest-to-host",
                id: 15
            })
        );
        // The same guest range in the host direction does not overlap.
        assert!(IdMap::new(&[(Kind::Guest, 10, 0, 10), (Kind::Host, 10, 0, 10)]).is_ok());
        assert_eq!(
            IdMap::new(&[(Kind::Guest, u32::MAX, 0, 2)]),
            Err(IdMapError::TooLong {
                base: u32::MAX,
                count: 2
            })
        );
        let top = IdMap::new(&[(Kind::SquashGuest, u32::MAX, 7, 1)]).unwrap();
        assert_eq!(top.to_host(u32::MAX), Ok(7));
    }
}
