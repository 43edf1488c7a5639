//! `ff` (first found): the first qualifying branch. For search and action the path must exist
//! there; for create it need not (mergerfs then clones the parent path onto that branch).

use super::{existing, Category, Probe};
use crate::union::BranchMode;

/// See the module docs.
pub fn select(
    cat: Category,
    modes: &[BranchMode],
    rel: &[u8],
    probe: &dyn Probe,
) -> Result<Vec<usize>, i32> {
    if cat == Category::Create {
        return match modes.iter().position(|&m| cat.allows(m)) {
            Some(i) => Ok(vec![i]),
            None => Err(libc::EROFS),
        };
    }
    let (found, fold) = existing(cat, modes, rel, probe);
    found.first().map(|&i| vec![i]).ok_or(fold.errno())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::union::policy::fake::FakeProbe;
    use BranchMode::*;

    #[test]
    fn first_found_for_each_category() {
        let p = FakeProbe(vec![vec![], vec!["x"], vec!["x"]]);
        assert_eq!(
            select(Category::Search, &[RW, RO, RW], b"x", &p),
            Ok(vec![1])
        );
        assert_eq!(
            select(Category::Action, &[RW, RO, RW], b"x", &p),
            Ok(vec![2])
        );
        assert_eq!(
            select(Category::Create, &[RO, NC, RW], b"x", &p),
            Ok(vec![2])
        );
        assert_eq!(
            select(Category::Create, &[RO, NC], b"x", &p),
            Err(libc::EROFS)
        );
        assert_eq!(
            select(Category::Search, &[RW, RW, RW], b"y", &p),
            Err(libc::ENOENT)
        );
    }
}
