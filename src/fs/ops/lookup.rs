//! LOOKUP: find a name in a directory with the getattr policy and hand the guest a node for it.
//! With `cache.negative-entry` set, a missing name is answered with a negative entry the guest
//! may cache for that long instead of ENOENT. Under a first-found search policy the lookup
//! memo (`fs/lookup_memo.rs`, which holds the trust rules) says where to look, so a name
//! costs one probe however many branches the union has; this file probes and fills it.
//! Names on `static` branches are cached longer (`fs/static_cache.rs`).

use std::ffi::CStr;
use std::io;
use std::sync::Arc;

use fuse_backend_rs::api::filesystem::Entry;

use crate::fs::call::Call;
use crate::fs::errno;
use crate::fs::inode::Rebind;
use crate::fs::lookup_memo::{Hint, Positions, Ticket, Windows};
use crate::fs::options::Func;
use crate::fs::resolve::{check_name, present, Found};
use crate::fs::static_cache::negative_window;
use crate::fs::view::View;
use crate::sys::abi::zeroed_stat;

/// Looks up `name` in `parent`; ENOENT (or a negative entry) if no branch has it.
pub fn lookup(fs: &Call<'_>, parent: u64, name: &CStr) -> io::Result<Entry> {
    check_name(name)?;
    let rel = fs.inodes.child_path(parent, name)?;
    let Answer {
        found,
        trust,
        before,
    } = search_child(fs, Func::Getattr, parent, name, &rel);
    match found {
        Ok(found) => {
            let entry = fs.entry_for(parent, name, &rel, &found, Rebind::Yes)?;
            if let Some((t, absent)) = before {
                if found.st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                    // Where the directory was not found, nothing beneath it can be: its own
                    // lookups skip those branches from the first.
                    let view = fs.shared_view();
                    let dir = [rel.to_bytes(), b"/"].concat();
                    let w = windows(view);
                    let memo = &fs.lookup_memo;
                    memo.note_dir(&t, view, entry.inode, &dir, &absent, false, w);
                }
            }
            Ok(trusted(fs.view(), entry, trust))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) && !negative(fs.view()).is_zero() => {
            let entry = Entry {
                inode: 0,
                generation: 0,
                attr: zeroed_stat(),
                attr_flags: 0,
                attr_timeout: Default::default(),
                entry_timeout: negative(fs.view()),
            };
            Ok(trusted(fs.view(), entry, trust))
        }
        Err(e) => Err(e),
    }
}

/// The window of a negative entry under `view` (longer when every branch is static).
fn negative(view: &View) -> std::time::Duration {
    negative_window(view.branches.all_static(), view.opts.cache_negative_entry)
}

/// `entry` with its name cached no longer than the memoized facts it came from hold, so
/// that a host-side change reaches the guest within one window of the probe that saw the
/// old state (not a window after a memoized answer given late in the first). A window
/// lengthened past the configured one (a static standing, `fs/static_cache.rs`) rests on
/// no host change to wait for, so it stays.
pub(crate) fn trusted(view: &View, mut entry: Entry, trust: Option<std::time::Duration>) -> Entry {
    let configured = if entry.inode == 0 {
        view.opts.cache_negative_entry
    } else {
        view.opts.cache_entry
    };
    if let Some(left) = trust.filter(|_| entry.entry_timeout <= configured) {
        entry.entry_timeout = entry.entry_timeout.min(left);
    }
    entry
}

/// What [`search_child`] answers.
pub(crate) struct Answer {
    /// The search's result.
    pub found: io::Result<Found>,
    /// How much longer it may be trusted if it rests on memoized facts (`None`: it was
    /// probed now).
    pub trust: Option<std::time::Duration>,
    /// After a scan that found the name: the positions before its copy where it is absent
    /// (a directory's absences, so far as they are known), with the scan's ticket.
    pub before: Option<(Ticket, Positions)>,
}

impl Answer {
    fn of(found: io::Result<Found>, trust: Option<std::time::Duration>) -> Self {
        Answer {
            found,
            trust,
            before: None,
        }
    }
}

/// The memo's trust windows under `view`'s options.
pub(crate) fn windows(view: &View) -> Windows {
    Windows {
        found: view.opts.cache_entry,
        missing: view.opts.cache_negative_entry,
    }
}

/// Whether `func`'s search under `view` may use the memo: several branches (one branch is
/// one probe anyway), a first-found policy (the memo records first copies) and a nonzero
/// entry window.
pub(crate) fn memo_applies(view: &View, func: Func) -> bool {
    view.branches.len() > 1
        && windows(view).active()
        && view.opts.policies.get(func).first_existing(func.category())
}

/// `name` in directory node `parent` (union path `rel`) as [`UnionFs::search`] finds it,
/// probing only where the memo says the first copy can be, and filling the memo with what
/// was found. Answers as `search` would have when the memo's facts hold.
pub(crate) fn search_child(
    fs: &Call<'_>,
    func: Func,
    parent: u64,
    name: &CStr,
    rel: &CStr,
) -> Answer {
    let view = fs.shared_view();
    let full = rel.to_bytes();
    if !memo_applies(view, func) || !full.ends_with(name.to_bytes()) {
        return Answer::of(fs.search(func, rel), None);
    }
    // The directory's path with its trailing `/` (empty for the root).
    let dir = &full[..full.len() - name.to_bytes().len()];
    let memo = &fs.lookup_memo;
    let w = windows(view);
    let advice = memo.consult(view, parent, dir, name.to_bytes());
    match advice.hint {
        Some((Hint::Nowhere, left)) => return Answer::of(Err(errno(libc::ENOENT)), Some(left)),
        Some((Hint::At(pos), left)) if pos < view.branches.len() => {
            // Gone from there (or failing): the full search below says where it is now.
            if let Ok(Some(f)) = fs.lookup_on(view.branches.id_at(pos), rel) {
                return Answer::of(Ok(f), Some(left));
            }
        }
        _ => {}
    }
    let absent = match advice.absent {
        Some(a) => a,
        None if advice.want_facts => {
            let a = absences(fs, view, dir);
            memo.note_dir(&advice.ticket, view, parent, dir, &a, true, w);
            a
        }
        None => Positions::default(),
    };
    // As `search`: the first branch that has it; a real failure before it is reported over
    // ENOENT, and nothing is memoized after one (it may hide a copy).
    let t = advice.ticket;
    let mut failure = None;
    let mut before = absent.clone();
    for pos in (0..view.branches.len()).filter(|&p| !absent.contains(p)) {
        match fs.lookup_on(view.branches.id_at(pos), rel) {
            Ok(Some(f)) => {
                let mut answer = Answer::of(Ok(f), t.left());
                if failure.is_none() {
                    let hint = Hint::At(pos);
                    memo.note_name(&t, view, parent, dir, name.to_bytes(), hint, w);
                    answer.before = Some((t, before)).filter(|(_, b)| *b != Positions::default());
                }
                return answer;
            }
            Ok(None) => before.insert(pos),
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failure {
        return Answer::of(Err(e), t.left());
    }
    memo.note_name(&t, view, parent, dir, name.to_bytes(), Hint::Nowhere, w);
    Answer::of(Err(errno(libc::ENOENT)), t.left())
}

/// The positions where directory `dir` (with its trailing `/`) certainly does not resolve
/// (so nothing beneath it does either): one `O_PATH` open per branch. A failure other than
/// "absent" leaves the branch to be probed.
fn absences(fs: &Call<'_>, view: &Arc<View>, dir: &[u8]) -> Positions {
    let mut out = Positions::default();
    let Ok(path) = std::ffi::CString::new(dir.strip_suffix(b"/").unwrap_or(dir)) else {
        return out;
    };
    for pos in 0..view.branches.len() {
        if matches!(
            present(fs.open_on(view.branches.id_at(pos), &path)),
            Ok(None)
        ) {
            out.insert(pos);
        }
    }
    out
}
