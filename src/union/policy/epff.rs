//! `epff` (existing path, first found): the first qualifying branch on which the path (for create,
//! the parent directory) already exists. Path-preserving: never creates directories.

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
    found.first().map(|&i| vec![i]).ok_or(fold.errno())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::union::policy::fake::FakeProbe;
    use BranchMode::*;

    #[test]
    fn first_branch_with_the_parent() {
        let p = FakeProbe(vec![vec!["."], vec![".", "d"], vec![".", "d"]]);
        assert_eq!(
            select(Category::Create, &[RW, RW, RW], b"d", &p),
            Ok(vec![1])
        );
        assert_eq!(
            select(Category::Create, &[RW, RO, RW], b"d", &p),
            Ok(vec![2])
        );
        assert_eq!(
            select(Category::Create, &[RW, NC, RO], b"d", &p),
            Err(libc::EROFS)
        );
        assert_eq!(
            select(Category::Create, &[RW, RW, RW], b"e", &p),
            Err(libc::ENOENT)
        );
    }
}
