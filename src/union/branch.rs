//! One branch of the union: a host directory, its mode, its free-space floor and whether the
//! host promises never to change it (`static`). Parsing only; no I/O here.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// How a branch may be used, as mergerfs names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BranchMode {
    /// Read-write: searched, modified and eligible for new files.
    RW,
    /// Read-only: searched, never modified (EROFS when the only copy lives here).
    RO,
    /// No-create: searched and modified in place, but never chosen for new files.
    NC,
}

impl fmt::Display for BranchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BranchMode::RW => "RW",
            BranchMode::RO => "RO",
            BranchMode::NC => "NC",
        })
    }
}

/// Error parsing a branch mode or branch specification.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseBranchError {
    /// The mode after `=` is not RW, RO or NC.
    #[error("unknown branch mode '{0}' (expected RW, RO or NC)")]
    UnknownMode(String),
    /// The path part is empty.
    #[error("empty branch path")]
    EmptyPath,
    /// An item after the mode is neither `static` nor a size (the per-branch minfreespace).
    #[error(transparent)]
    MinFree(#[from] super::size::ParseSizeError),
}

impl FromStr for BranchMode {
    type Err = ParseBranchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "RW" => Ok(BranchMode::RW),
            "RO" => Ok(BranchMode::RO),
            "NC" => Ok(BranchMode::NC),
            _ => Err(ParseBranchError::UnknownMode(s.to_string())),
        }
    }
}

/// A branch as given on the command line: `PATH[=RW|RO|NC[,MINFREE][,static]]`. The directory
/// is opened later, by the fs layer; this is only the description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Branch {
    /// Host directory that is the branch root.
    pub path: PathBuf,
    /// How the branch may be used.
    pub mode: BranchMode,
    /// This branch's minimum free space for creates, overriding the global `minfreespace`.
    pub min_free: Option<u64>,
    /// `static`: the host never changes this branch while the share is in use, so the guest
    /// may cache what lives only here for a long time (`fs/static_cache.rs`).
    pub static_cache: bool,
}

impl FromStr for Branch {
    type Err = ParseBranchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (path, spec) = s.rsplit_once('=').unwrap_or((s, "RW"));
        if path.is_empty() {
            return Err(ParseBranchError::EmptyPath);
        }
        let mut items = spec.split(',');
        let mode = items.next().unwrap_or_default().parse()?;
        let (mut min_free, mut static_cache) = (None, false);
        for item in items {
            if item.eq_ignore_ascii_case("static") {
                static_cache = true;
            } else {
                min_free = Some(super::size::parse_size(item)?);
            }
        }
        Ok(Branch {
            path: PathBuf::from(path),
            mode,
            min_free,
            static_cache,
        })
    }
}

impl Branch {
    /// Parses a mergerfs-style branch list: `/a=RW:/b=RO:/c`.
    pub fn parse_list(s: &str) -> Result<Vec<Branch>, ParseBranchError> {
        s.split(':')
            .filter(|p| !p.is_empty())
            .map(str::parse)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_modes_and_lists() {
        let b: Branch = "/srv/a=ro".parse().unwrap();
        assert_eq!(b.mode, BranchMode::RO);
        assert_eq!(b.path, PathBuf::from("/srv/a"));
        let l = Branch::parse_list("/a=RW:/b=NC:/c").unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[1].mode, BranchMode::NC);
        assert_eq!(l[2].mode, BranchMode::RW);
        assert_eq!(
            "/a=XX".parse::<Branch>(),
            Err(ParseBranchError::UnknownMode("XX".into()))
        );
        assert_eq!("=RW".parse::<Branch>(), Err(ParseBranchError::EmptyPath));
        let b: Branch = "/d=NC,10G".parse().unwrap();
        assert_eq!((b.mode, b.min_free), (BranchMode::NC, Some(10 << 30)));
        assert!(matches!(
            "/d=RW,lots".parse::<Branch>(),
            Err(ParseBranchError::MinFree(_))
        ));
        let b: Branch = "/base=RO,static".parse().unwrap();
        assert_eq!(
            (b.mode, b.min_free, b.static_cache),
            (BranchMode::RO, None, true)
        );
        let b: Branch = "/d=NC,1G,STATIC".parse().unwrap();
        assert_eq!((b.min_free, b.static_cache), (Some(1 << 30), true));
        assert!(!"/d=RO".parse::<Branch>().unwrap().static_cache);
    }
}
