//! `epall` (existing path, all): every qualifying branch on which the path exists. The default
//! action policy, so a chmod or unlink reaches every writable copy.

use super::{existing, Category, Probe};
use crate::union::BranchMode;

/// See the module docs.
pub fn select(
    cat: Category,
    modes: &[BranchMode],
    rel: &[u8],
    probe: &dyn Probe,
) -> Result<Vec<usize>, i32> {
    let (found, fold) = existing(cat, modes, rel, probe);
    if found.is_empty() {
        Err(fold.errno())
    } else {
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::union::policy::fake::FakeProbe;
    use BranchMode::*;

    #[test]
    fn all_writable_copies_or_erofs() {
        let p = FakeProbe(vec![vec!["f"], vec!["f"], vec!["f"]]);
        assert_eq!(
            select(Category::Action, &[RW, RO, NC], b"f", &p),
            Ok(vec![0, 2])
        );
        assert_eq!(
            select(Category::Action, &[RO, RO, RO], b"f", &p),
            Err(libc::EROFS)
        );
        assert_eq!(
            select(Category::Action, &[RW, RW, RW], b"g", &p),
            Err(libc::ENOENT)
        );
        assert_eq!(
            select(Category::Search, &[RO, RO, RO], b"f", &p),
            Ok(vec![0, 1, 2])
        );
    }
}
