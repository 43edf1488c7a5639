//! The client's half of a branch edit (`set branches VALUE`, mergerfs's syntax): globs are
//! expanded and each directory opened here, on the host, and sent as a descriptor, so the
//! daemon (perhaps sandboxed) needs not see the paths. Never sends anything itself.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The keys whose value is a branch list (mergerfs's `branches` and its old name).
pub const BRANCH_KEYS: [&str; 2] = ["branches", "srcmounts"];

/// The characters a branch edit's instruction is made of.
const INSTRUCTION_CHARS: &str = "+<>-=";

/// Instructions that add branches (their items are opened and sent); the others (`-`, `-<`,
/// `->`) remove by pattern or position and go as they are.
const ADDING: [&str; 5] = ["", "+", "+<", "+>", "="];

/// Instructions that remove branches.
const REMOVING: [&str; 3] = ["-", "-<", "->"];

/// A branch edit the client cannot make.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// A glob that matches no directory, or names something else.
    #[error("{0}: no such directory")]
    NoSuchDirectory(String),
    /// A glob that is not a pattern.
    #[error("{glob}: bad pattern: {source}")]
    BadPattern {
        /// The glob.
        glob: String,
        /// What is wrong with it.
        source: glob::PatternError,
    },
    /// An instruction that is none of mergerfs's.
    #[error("invalid value '{value}': unknown instruction '{instruction}'")]
    Instruction {
        /// The value.
        value: String,
        /// The instruction.
        instruction: String,
    },
    /// An item with no path before its mode.
    #[error("invalid value '{0}': a branch without a path")]
    EmptyPath(String),
    /// A directory whose path cannot be written in a branch list.
    #[error("{}: a path with ':', or '=' without a mode, or not UTF-8, cannot be a branch", .0.display())]
    Unlistable(PathBuf),
    /// A directory that could not be opened.
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// More directories than one request carries.
    #[error("{0} directories in one edit (at most {max})", max = crate::sys::uds::MAX_FDS)]
    TooMany(usize),
}

/// A `set` ready to send: the value to send and the directories that go with it.
#[derive(Debug)]
pub struct Prepared {
    /// The value, with globs replaced by the directories they matched.
    pub value: String,
    /// The directories opened (`O_PATH`), in the order of their paths in `value`.
    pub dirs: Vec<OwnedFd>,
}

/// Prepares `set KEY VALUE` (KEY already without the `user.mergerfs.` prefix): for a branch
/// list that adds branches, each `GLOB[=MODE[,MINFREE]]` item becomes one
/// `PATH[=MODE[,MINFREE]]` item per directory it matches (canonical, in the glob's order),
/// each opened; any other set goes as it is.
pub fn prepare(key: &str, value: &str) -> Result<Prepared, EditError> {
    let unchanged = || Prepared {
        value: value.to_string(),
        dirs: Vec::new(),
    };
    if !BRANCH_KEYS.contains(&key) {
        return Ok(unchanged());
    }
    let split = value
        .char_indices()
        .find(|(_, c)| !INSTRUCTION_CHARS.contains(*c))
        .map_or(value.len(), |(i, _)| i);
    let (instruction, list) = value.split_at(split);
    if REMOVING.contains(&instruction) {
        return Ok(unchanged());
    }
    if !ADDING.contains(&instruction) {
        return Err(EditError::Instruction {
            value: value.to_string(),
            instruction: instruction.to_string(),
        });
    }
    let mut items = Vec::new();
    let mut dirs = Vec::new();
    for item in list.split(':').filter(|i| !i.is_empty()) {
        let (glob, suffix) = match item.rsplit_once('=') {
            Some((g, s)) => (g, Some(s)),
            None => (item, None),
        };
        if glob.is_empty() {
            return Err(EditError::EmptyPath(value.to_string()));
        }
        for path in expand(glob)? {
            let text = path
                .to_str()
                .filter(|t| !t.contains(':') && (suffix.is_some() || !t.contains('=')))
                .ok_or_else(|| EditError::Unlistable(path.clone()))?;
            items.push(match suffix {
                Some(s) => format!("{text}={s}"),
                None => text.to_string(),
            });
            dirs.push(open_dir(&path)?);
            if dirs.len() > crate::sys::uds::MAX_FDS {
                return Err(EditError::TooMany(dirs.len()));
            }
        }
    }
    Ok(Prepared {
        value: format!("{instruction}{}", items.join(":")),
        dirs,
    })
}

/// The directories `glob` matches, canonical, sorted: a pattern is expanded as at start
/// ([`crate::config::glob_directories`]: what is not a directory is skipped, an error only
/// if no directory matches); a plain path must be a directory.
fn expand(glob: &str) -> Result<Vec<PathBuf>, EditError> {
    let missing = || EditError::NoSuchDirectory(glob.to_string());
    if !crate::config::is_glob(glob) {
        let path = std::fs::canonicalize(glob).map_err(|_| missing())?;
        return if path.is_dir() {
            Ok(vec![path])
        } else {
            Err(missing())
        };
    }
    glob::Pattern::new(glob).map_err(|source| EditError::BadPattern {
        glob: glob.to_string(),
        source,
    })?;
    let found = crate::config::glob_directories(glob).ok_or_else(missing)?;
    found
        .iter()
        .map(|p| std::fs::canonicalize(p).map_err(|_| missing()))
        .collect()
}

/// Opens directory `path` as a reference only (`O_PATH`), not following a last symlink (it is
/// canonical already).
fn open_dir(path: &Path) -> Result<OwnedFd, EditError> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    rustix::fs::open(path, flags, Mode::empty()).map_err(|e| EditError::Open {
        path: path.to_path_buf(),
        source: e.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn ino(fd: &OwnedFd) -> u64 {
        rustix::fs::fstat(fd).unwrap().st_ino
    }

    #[test]
    fn other_keys_and_removals_go_as_they_are() {
        for (k, v) in [
            ("category.create", "mfs"),
            ("branches", "-/no/such/*"),
            ("branches", "-<"),
            ("srcmounts", "->"),
        ] {
            let p = prepare(k, v).unwrap();
            assert_eq!(p.value, v);
            assert!(p.dirs.is_empty());
        }
    }

    #[test]
    fn globs_become_canonical_directories_with_their_modes() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        for n in ["disk2", "disk1", "disk3"] {
            std::fs::create_dir(root.join(n)).unwrap();
        }
        std::fs::create_dir(root.join("other")).unwrap();
        std::os::unix::fs::symlink(root.join("other"), root.join("link")).unwrap();
        let r = root.display();
        for instruction in ["", "+", "+<", "+>", "="] {
            let value = format!("{instruction}{r}/disk*=RO,1G:{r}/link::");
            let p = prepare("branches", &value).unwrap();
            assert_eq!(
                p.value,
                format!("{instruction}{r}/disk1=RO,1G:{r}/disk2=RO,1G:{r}/disk3=RO,1G:{r}/other")
            );
            let want: Vec<u64> = ["disk1", "disk2", "disk3", "other"]
                .iter()
                .map(|n| std::fs::metadata(root.join(n)).unwrap().ino())
                .collect();
            assert_eq!(p.dirs.iter().map(ino).collect::<Vec<_>>(), want);
        }
    }

    #[test]
    fn what_is_no_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("file");
        std::fs::write(&file, "").unwrap();
        let gone = "+/does/not/exist";
        let e = prepare("branches", gone).unwrap_err();
        assert_eq!(e.to_string(), "/does/not/exist: no such directory");
        let glob = format!("{}/nothing*", d.path().display());
        let e = prepare("branches", &format!("+>{glob}=RW")).unwrap_err();
        assert_eq!(e.to_string(), format!("{glob}: no such directory"));
        let f = file.display().to_string();
        let e = prepare("srcmounts", &f).unwrap_err();
        assert_eq!(e.to_string(), format!("{f}: no such directory"));
    }

    #[test]
    fn a_glob_skips_what_is_no_directory_as_at_start() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir(root.join("disk1")).unwrap();
        std::fs::create_dir(root.join("disk2")).unwrap();
        std::fs::write(root.join("disk.txt"), "").unwrap();
        let r = root.display();
        let p = prepare("branches", &format!("+{r}/disk*")).unwrap();
        assert_eq!(p.value, format!("+{r}/disk1:{r}/disk2"));
        assert_eq!(p.dirs.len(), 2);
        let e = prepare("branches", &format!("+{r}/disk.*")).unwrap_err();
        assert_eq!(e.to_string(), format!("{r}/disk.*: no such directory"));
    }

    #[test]
    fn bad_values_are_refused() {
        for v in ["<+/a", "+-/a", "==/a", "+<>/a", "<"] {
            assert!(
                matches!(prepare("branches", v), Err(EditError::Instruction { .. })),
                "{v}"
            );
        }
        assert!(matches!(
            prepare("branches", "+=RW"),
            Err(EditError::Instruction { .. })
        ));
        assert!(matches!(
            prepare("branches", "+/a:=RW"),
            Err(EditError::EmptyPath(_)) | Err(EditError::NoSuchDirectory(_))
        ));
        assert!(matches!(
            prepare("branches", "+/a[:"),
            Err(EditError::BadPattern { .. }) | Err(EditError::NoSuchDirectory(_))
        ));
    }

    #[test]
    fn paths_that_cannot_be_listed_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let odd = d.path().join("a=b");
        std::fs::create_dir(&odd).unwrap();
        let glob = format!("{}/a*", d.path().display());
        assert!(matches!(
            prepare("branches", &format!("+{glob}")),
            Err(EditError::Unlistable(_))
        ));
        let p = prepare("branches", &format!("+{glob}=NC")).unwrap();
        assert!(p.value.ends_with("a=b=NC"), "{}", p.value);
        assert_eq!(p.dirs.len(), 1);
    }
}
