//! The one place where errors from several branches are folded into the errno the guest sees.
//!
//! mergerfs reports the most informative failure: a branch that lacks the path (ENOENT) says the
//! least, a branch that is full (ENOSPC) says more, and a branch that cannot be written at all
//! (EROFS) says the most. Any other errno ranks with ENOSPC: it is a real failure of a branch that
//! had the entry, so it outranks ENOENT.

/// Rank of an errno in the precedence ENOENT < (ENOSPC, others) < EROFS.
fn rank(errno: i32) -> u8 {
    match errno {
        libc::ENOENT => 0,
        libc::EROFS => 2,
        _ => 1,
    }
}

/// Accumulates per-branch results: success if any branch succeeded, otherwise the
/// highest-precedence errno seen (ENOENT when nothing was tried).
#[derive(Clone, Copy, Debug, Default)]
pub struct ErrnoFold {
    ok: bool,
    err: Option<i32>,
}

impl ErrnoFold {
    /// A fold with no results yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that one branch succeeded.
    pub fn ok(&mut self) {
        self.ok = true;
    }

    /// Records one branch's failure.
    pub fn err(&mut self, errno: i32) {
        match self.err {
            Some(cur) if rank(cur) >= rank(errno) => {}
            _ => self.err = Some(errno),
        }
    }

    /// Records a result.
    pub fn add<T>(&mut self, r: &std::io::Result<T>) {
        match r {
            Ok(_) => self.ok(),
            Err(e) => self.err(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    /// The errno to report if nothing succeeded.
    pub fn errno(&self) -> i32 {
        self.err.unwrap_or(libc::ENOENT)
    }

    /// For action loops (unlink, rmdir, chmod, setxattr… on every selected copy), as mergerfs
    /// reports them: any copy's failure is the answer even when other copies were changed
    /// (e.g. ENOTEMPTY from `rmdir` of a directory empty on one branch only).
    pub fn result_all(&self) -> std::io::Result<()> {
        match self.err {
            Some(e) => Err(std::io::Error::from_raw_os_error(e)),
            None if self.ok => Ok(()),
            None => Err(std::io::Error::from_raw_os_error(libc::ENOENT)),
        }
    }

    /// `Ok(())` if any branch succeeded, else the folded errno.
    pub fn result(&self) -> std::io::Result<()> {
        if self.ok {
            Ok(())
        } else {
            Err(std::io::Error::from_raw_os_error(self.errno()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_is_enoent_enospc_erofs() {
        let mut f = ErrnoFold::new();
        assert_eq!(f.errno(), libc::ENOENT);
        f.err(libc::EROFS);
        f.err(libc::ENOSPC);
        f.err(libc::ENOENT);
        assert_eq!(f.errno(), libc::EROFS);
        let mut g = ErrnoFold::new();
        g.err(libc::ENOENT);
        g.err(libc::ENOSPC);
        assert_eq!(g.errno(), libc::ENOSPC);
        assert!(g.result().is_err());
        g.ok();
        assert!(g.result().is_ok());
        assert_eq!(
            g.result_all().unwrap_err().raw_os_error(),
            Some(libc::ENOSPC)
        );
        let mut h = ErrnoFold::new();
        h.ok();
        assert!(h.result_all().is_ok());
        assert_eq!(
            ErrnoFold::new().result_all().unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
    }
}
