//! mergerfs's branch edit syntax, as `user.mergerfs.branches` takes it at run time: an
//! instruction, then a `:`-separated list. `=LIST` or a bare `LIST` replaces every branch,
//! `+LIST` and `+>LIST` append, `+<LIST` prepend, `-PATTERNS` removes the branches whose path
//! matches one of the `fnmatch(3)` patterns, `-<` the first branch, `->` the last. Items that
//! add a branch are `PATH[=RW|RO|NC[,MINFREE]]`. Pure: globs are expanded and directories
//! opened by the caller.

use std::path::Path;

use super::branch::{Branch, ParseBranchError};

/// One parsed branch edit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BranchEdit {
    /// `=LIST` or `LIST`: these branches, in this order.
    Set(Vec<Branch>),
    /// `+<LIST`: these before the others.
    Prepend(Vec<Branch>),
    /// `+LIST` or `+>LIST`: these after the others.
    Append(Vec<Branch>),
    /// `-PATTERNS`: every branch whose path matches one of these.
    Remove(Vec<String>),
    /// `-<`: the first branch.
    RemoveFirst,
    /// `->`: the last branch.
    RemoveLast,
}

/// Why an edit cannot be parsed or applied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EditError {
    /// The instruction is none of `=`, `+`, `+<`, `+>`, `-`, `-<`, `->`.
    #[error("unknown branch instruction '{0}' (expected =, +, +<, +>, -, -< or ->)")]
    Instruction(String),
    /// An item is not `PATH[=MODE[,MINFREE]]`.
    #[error("branch '{item}': {source}")]
    Item {
        /// The item.
        item: String,
        /// What is wrong with it.
        source: ParseBranchError,
    },
    /// A removal pattern is not a valid glob.
    #[error("pattern '{0}' is not a valid glob")]
    Pattern(String),
    /// The edit would leave the union without a branch.
    #[error("the union would have no branch left")]
    Empty,
}

impl BranchEdit {
    /// Parses `value` as mergerfs does: the instruction is the leading run of `+<>-=`
    /// characters, at most two of them.
    pub fn parse(value: &str) -> Result<Self, EditError> {
        let value = value.trim();
        let n = value
            .find(|c: char| !"+<>-=".contains(c))
            .unwrap_or(value.len())
            .min(2);
        let (instr, rest) = value.split_at(n);
        let list = || -> Result<Vec<Branch>, EditError> {
            rest.split(':')
                .filter(|i| !i.is_empty())
                .map(|i| {
                    i.parse().map_err(|source| EditError::Item {
                        item: i.to_string(),
                        source,
                    })
                })
                .collect()
        };
        Ok(match instr {
            "" | "=" => BranchEdit::Set(list()?),
            "+" | "+>" => BranchEdit::Append(list()?),
            "+<" => BranchEdit::Prepend(list()?),
            "-" => {
                let pats: Vec<String> = rest
                    .split(':')
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect();
                if let Some(bad) = pats.iter().find(|p| glob::Pattern::new(p).is_err()) {
                    return Err(EditError::Pattern(bad.clone()));
                }
                BranchEdit::Remove(pats)
            }
            "-<" => BranchEdit::RemoveFirst,
            "->" => BranchEdit::RemoveLast,
            other => return Err(EditError::Instruction(other.to_string())),
        })
    }

    /// The branches this edit adds, in the order they are written.
    pub fn added(&self) -> &[Branch] {
        match self {
            BranchEdit::Set(v) | BranchEdit::Prepend(v) | BranchEdit::Append(v) => v,
            _ => &[],
        }
    }

    /// The list after the edit: `current` (each with its path) with the branches this edit
    /// removes taken out, and `added` (what [`BranchEdit::added`] named, made into `T`s by
    /// the caller, in the same order) put in. Never empty.
    pub fn apply<T>(
        &self,
        current: Vec<T>,
        added: Vec<T>,
        path: impl Fn(&T) -> &Path,
    ) -> Result<Vec<T>, EditError> {
        let mut out = current;
        match self {
            BranchEdit::Set(_) => out = added,
            BranchEdit::Append(_) => out.extend(added),
            BranchEdit::Prepend(_) => {
                let mut v = added;
                v.extend(out);
                out = v;
            }
            BranchEdit::Remove(pats) => {
                let pats: Vec<glob::Pattern> = pats
                    .iter()
                    .filter_map(|p| glob::Pattern::new(p).ok())
                    .collect();
                out.retain(|b| {
                    let p = path(b).to_string_lossy();
                    !pats.iter().any(|pat| pat.matches(&p))
                });
            }
            BranchEdit::RemoveFirst => {
                if !out.is_empty() {
                    out.remove(0);
                }
            }
            BranchEdit::RemoveLast => {
                out.pop();
            }
        }
        if out.is_empty() {
            return Err(EditError::Empty);
        }
        Ok(out)
    }
}

/// The branch list as `user.mergerfs.branches` shows it: `PATH=MODE[,MINFREE][,static]` joined
/// by `:`.
pub fn show(branches: &[Branch]) -> String {
    branches
        .iter()
        .map(|b| {
            let mut s = format!("{}={}", b.path.display(), b.mode);
            if let Some(m) = b.min_free {
                s.push(',');
                s.push_str(&super::size::humanize(m));
            }
            if b.static_cache {
                s.push_str(",static");
            }
            s
        })
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::union::BranchMode;
    use std::path::PathBuf;

    fn paths(v: &[Branch]) -> Vec<&str> {
        v.iter().map(|b| b.path.to_str().unwrap()).collect()
    }

    fn start() -> Vec<Branch> {
        BranchEdit::parse("/a:/b=RO:/c=NC,1G")
            .unwrap()
            .added()
            .to_vec()
    }

    fn edit(cur: Vec<Branch>, value: &str) -> Result<Vec<Branch>, EditError> {
        let e = BranchEdit::parse(value)?;
        let added = e.added().to_vec();
        e.apply(cur, added, |b| &b.path)
    }

    #[test]
    fn instructions_as_mergerfs() {
        let cur = start();
        assert_eq!(cur[1].mode, BranchMode::RO);
        assert_eq!(cur[2].min_free, Some(1 << 30));
        assert_eq!(
            paths(&edit(cur.clone(), "+/d").unwrap()),
            ["/a", "/b", "/c", "/d"]
        );
        assert_eq!(
            paths(&edit(cur.clone(), "+>/d:/e").unwrap()),
            ["/a", "/b", "/c", "/d", "/e"]
        );
        assert_eq!(
            paths(&edit(cur.clone(), "+</d").unwrap()),
            ["/d", "/a", "/b", "/c"]
        );
        assert_eq!(paths(&edit(cur.clone(), "-/b").unwrap()), ["/a", "/c"]);
        assert_eq!(paths(&edit(cur.clone(), "-/[ab]").unwrap()), ["/c"]);
        assert_eq!(paths(&edit(cur.clone(), "-/a:/c").unwrap()), ["/b"]);
        assert_eq!(
            paths(&edit(cur.clone(), "-/nothing").unwrap()),
            ["/a", "/b", "/c"]
        );
        assert_eq!(paths(&edit(cur.clone(), "-<").unwrap()), ["/b", "/c"]);
        assert_eq!(paths(&edit(cur.clone(), "->").unwrap()), ["/a", "/b"]);
        assert_eq!(
            paths(&edit(cur.clone(), "=/x:/y=RO").unwrap()),
            ["/x", "/y"]
        );
        assert_eq!(paths(&edit(cur.clone(), "/x").unwrap()), ["/x"]);
        let e = edit(cur.clone(), "+/d=NC,10M").unwrap();
        assert_eq!((e[3].mode, e[3].min_free), (BranchMode::NC, Some(10 << 20)));
    }

    #[test]
    fn errors() {
        let cur = start();
        assert_eq!(edit(cur.clone(), "-*"), Err(EditError::Empty));
        assert_eq!(edit(vec![cur[0].clone()], "-<"), Err(EditError::Empty));
        assert_eq!(edit(cur.clone(), "="), Err(EditError::Empty));
        assert!(matches!(
            edit(cur.clone(), "+/d=XX"),
            Err(EditError::Item { .. })
        ));
        assert_eq!(
            BranchEdit::parse("<>/d"),
            Err(EditError::Instruction("<>".into()))
        );
        assert_eq!(
            BranchEdit::parse("-[z"),
            Err(EditError::Pattern("[z".into()))
        );
        // Only the first two characters are the instruction, as mergerfs splits it.
        assert!(matches!(
            BranchEdit::parse("+<=/d"),
            Err(EditError::Item { item, .. }) if item == "=/d"
        ));
    }

    #[test]
    fn shows_as_mergerfs() {
        let mut v = start();
        v.push(Branch {
            path: PathBuf::from("/d"),
            mode: BranchMode::RW,
            min_free: Some(4 << 30),
            static_cache: false,
        });
        v.push("/e=RO,static".parse().unwrap());
        assert_eq!(show(&v), "/a=RW:/b=RO:/c=NC,1G:/d=RW,4G:/e=RO,static");
    }
}
