//! Every policy against a table-backed probe: which branches each category selects and which
//! errno comes back when none qualifies.

use std::cell::Cell;

use super::*;
use BranchMode::*;

const G: u64 = 1 << 30;

/// Branch `i` holds `paths[i]`, has `space[i]` = (avail, total), and `mtimes` per (branch, path).
struct Fake {
    paths: Vec<Vec<&'static str>>,
    space: Vec<(u64, u64)>,
    mtimes: Vec<(usize, &'static str, i64)>,
    /// The next value `random` returns (before reduction modulo the bound).
    rand: Cell<u64>,
}

impl Probe for Fake {
    fn exists(&self, b: usize, rel: &[u8]) -> bool {
        self.paths[b].iter().any(|p| p.as_bytes() == rel)
    }
    fn space(&self, b: usize) -> Option<Space> {
        let (avail, total) = self.space[b];
        Some(Space {
            avail,
            total,
            readonly: false,
        })
    }
    fn mtime(&self, b: usize, rel: &[u8]) -> Option<i64> {
        self.mtimes
            .iter()
            .find(|(x, p, _)| *x == b && p.as_bytes() == rel)
            .map(|m| m.2)
    }
    fn random(&self, bound: u64) -> u64 {
        if bound == u64::MAX {
            self.rand.get()
        } else {
            self.rand.get() % bound
        }
    }
}

fn br(modes: &[BranchMode]) -> Vec<BranchInfo> {
    modes
        .iter()
        .map(|&mode| BranchInfo { mode, min_free: 0 })
        .collect()
}

/// Four RW branches: avail 10G/40G/20G/5G of 100G/50G/20G/10G; "d" exists on 1 and 2.
fn four() -> Fake {
    Fake {
        paths: vec![vec!["."], vec![".", "d", "d/f"], vec![".", "d"], vec!["."]],
        space: vec![
            (10 * G, 100 * G),
            (40 * G, 50 * G),
            (20 * G, 20 * G),
            (5 * G, 10 * G),
        ],
        mtimes: vec![(1, "d", 100), (2, "d", 200)],
        rand: Cell::new(0),
    }
}

fn sel(p: &str, cat: Category, b: &[BranchInfo], rel: &str, f: &Fake) -> Result<Vec<usize>, i32> {
    p.parse::<Policy>()
        .unwrap()
        .select(cat, b, rel.as_bytes(), f)
        .map(|v| v.to_vec())
}

#[test]
fn names_round_trip_and_unknown_names_fail() {
    assert_eq!(Policy::ALL.len(), 21);
    for p in Policy::ALL {
        assert_eq!(p.name().parse::<Policy>().unwrap(), *p);
    }
    assert_eq!(
        "bogus".parse::<Policy>(),
        Err(UnknownPolicy("bogus".into()))
    );
    assert!(Policy::Epmfs.path_preserving());
    assert!(!Policy::Mfs.path_preserving());
}

#[test]
fn create_policies_pick_by_space() {
    let b = br(&[RW, RW, RW, RW]);
    let f = four();
    use Category::Create as C;
    // Non-path-preserving: any branch (used: 90/10/0/5 G; used%: 90/20/0/50).
    assert_eq!(sel("ff", C, &b, "d", &f), Ok(vec![0]));
    assert_eq!(sel("mfs", C, &b, "d", &f), Ok(vec![1]));
    assert_eq!(sel("lfs", C, &b, "d", &f), Ok(vec![3]));
    assert_eq!(sel("lus", C, &b, "d", &f), Ok(vec![2]));
    assert_eq!(sel("lup", C, &b, "d", &f), Ok(vec![2]));
    assert_eq!(sel("all", C, &b, "d", &f), Ok(vec![0, 1, 2, 3]));
    // Existing path: only branches 1 and 2 have "d".
    assert_eq!(sel("epff", C, &b, "d", &f), Ok(vec![1]));
    assert_eq!(sel("epmfs", C, &b, "d", &f), Ok(vec![1]));
    assert_eq!(sel("eplfs", C, &b, "d", &f), Ok(vec![2]));
    assert_eq!(sel("eplus", C, &b, "d", &f), Ok(vec![2]));
    assert_eq!(sel("epall", C, &b, "d", &f), Ok(vec![1, 2]));
    assert_eq!(sel("newest", C, &b, "d", &f), Ok(vec![2]));
    assert_eq!(sel("erofs", C, &b, "d", &f), Err(libc::EROFS));
}

#[test]
fn newest_ties_go_to_the_last_branch_as_in_mergerfs() {
    let mut f = four();
    f.paths = vec![vec![".", "d"]; 4];
    f.mtimes = vec![(0, "d", 7), (1, "d", 9), (2, "d", 9), (3, "d", 8)];
    let b = br(&[RW, RW, RW, RW]);
    for cat in [Category::Create, Category::Action, Category::Search] {
        assert_eq!(sel("newest", cat, &b, "d", &f), Ok(vec![2]), "{cat:?}");
    }
    // A tied branch that does not qualify (read-only, for create) is passed over.
    let b = br(&[RW, RW, RO, RW]);
    assert_eq!(sel("newest", Category::Create, &b, "d", &f), Ok(vec![1]));
}

#[test]
fn random_policies_follow_the_probe() {
    let b = br(&[RW, RW, RW, RW]);
    let f = four();
    use Category::Create as C;
    // pfrd: avail 10/40/20/5 (sum 75G). A draw in the first 10/75 picks branch 0, ...
    f.rand.set(0);
    assert_eq!(sel("pfrd", C, &b, "d", &f), Ok(vec![0]));
    f.rand.set(u64::MAX / 75 * 11);
    assert_eq!(sel("pfrd", C, &b, "d", &f), Ok(vec![1]));
    f.rand.set(u64::MAX / 75 * 74);
    assert_eq!(sel("pfrd", C, &b, "d", &f), Ok(vec![3]));
    // eppfrd only weighs branches 1 and 2 (40 + 20).
    f.rand.set(u64::MAX / 60 * 45);
    assert_eq!(sel("eppfrd", C, &b, "d", &f), Ok(vec![2]));
    f.rand.set(3);
    assert_eq!(sel("rand", C, &b, "d", &f), Ok(vec![3]));
    assert_eq!(sel("eprand", C, &b, "d", &f), Ok(vec![2]));
}

#[test]
fn most_shared_path_walks_up() {
    let b = br(&[RW, RW, RW, RW]);
    let f = four();
    use Category::Create as C;
    // "d/x/y" exists nowhere; "d/x" nowhere; "d" on 1 and 2.
    assert_eq!(sel("mspmfs", C, &b, "d/x/y", &f), Ok(vec![1]));
    assert_eq!(sel("msplfs", C, &b, "d/x/y", &f), Ok(vec![2]));
    assert_eq!(sel("msplus", C, &b, "d/x/y", &f), Ok(vec![2]));
    // "q" exists nowhere: falls back to the root, which every branch has.
    assert_eq!(sel("mspmfs", C, &b, "q", &f), Ok(vec![1]));
    f.rand.set(0);
    assert_eq!(sel("msppfrd", C, &b, "d/x", &f), Ok(vec![1]));
}

#[test]
fn modes_minfreespace_and_errno_precedence() {
    let f = four();
    use Category::*;
    // Create never uses RO or NC branches; action never uses RO.
    let b = br(&[RO, NC, RW, RO]);
    assert_eq!(sel("mfs", Create, &b, "d", &f), Ok(vec![2]));
    assert_eq!(sel("epall", Action, &b, "d", &f), Ok(vec![1, 2]));
    assert_eq!(sel("ff", Search, &b, "d", &f), Ok(vec![1]));
    // Only RO/NC branches hold the parent: EROFS beats ENOENT.
    let b = br(&[RW, NC, RO, RW]);
    assert_eq!(sel("epmfs", Create, &b, "d", &f), Err(libc::EROFS));
    // minfreespace: branch 2 (20G free) qualifies at 15G, not at 25G; then ENOSPC beats ENOENT.
    let mut b = br(&[RW, RW, RW, RW]);
    for x in &mut b {
        x.min_free = 15 * G;
    }
    assert_eq!(sel("lfs", Create, &b, "d", &f), Ok(vec![2]));
    for x in &mut b {
        x.min_free = 45 * G;
    }
    assert_eq!(sel("mfs", Create, &b, "d", &f), Err(libc::ENOSPC));
    assert_eq!(sel("epmfs", Create, &b, "nothere", &f), Err(libc::ENOENT));
    // ...and EROFS beats ENOSPC.
    let mut b = br(&[RW, RO, RW, RW]);
    for x in &mut b {
        x.min_free = 45 * G;
    }
    assert_eq!(sel("epmfs", Create, &b, "d", &f), Err(libc::EROFS));
    // minfreespace only limits creates.
    assert_eq!(sel("epmfs", Action, &b, "d", &f), Ok(vec![2]));
    assert_eq!(sel("epall", Search, &br(&[RO; 4]), "d/f", &f), Ok(vec![1]));
    assert_eq!(
        sel("epall", Action, &br(&[RO; 4]), "d/f", &f),
        Err(libc::EROFS)
    );
    assert_eq!(
        sel("ff", Search, &br(&[RW; 4]), "zz", &f),
        Err(libc::ENOENT)
    );
}

#[test]
fn non_create_categories_use_the_existing_path_twin() {
    let b = br(&[RW, RW, RW, RW]);
    let f = four();
    use Category::*;
    for (p, want) in [
        ("mfs", 1),
        ("lfs", 2),
        ("lus", 2),
        ("ff", 1),
        ("newest", 2),
        ("lup", 2),
    ] {
        assert_eq!(sel(p, Search, &b, "d", &f), Ok(vec![want]), "{p}");
        assert_eq!(sel(p, Action, &b, "d", &f), Ok(vec![want]), "{p}");
    }
    assert_eq!(sel("all", Action, &b, "d", &f), Ok(vec![1, 2]));
    assert_eq!(sel("erofs", Search, &b, "d", &f), Err(libc::EROFS));
}

/// `n` branches of 1G free each; branch `b` holds "p" when bit `b` of `mask` is set.
fn holding_p(n: usize, mask: u8) -> Fake {
    Fake {
        paths: (0..n)
            .map(|b| {
                if mask & (1 << b) != 0 {
                    vec!["p"]
                } else {
                    vec![]
                }
            })
            .collect(),
        space: vec![(G, G); n],
        mtimes: vec![],
        rand: Cell::new(0),
    }
}

/// `first_existing` promises a caller may stop at the first branch holding the path: for
/// every policy, category and existence pattern over three branches of mixed modes, the
/// policy's own first choice is exactly that branch (or it fails when there is none).
#[test]
fn first_existing_policies_choose_the_first_branch_holding_the_path() {
    let modes = br(&[RO, NC, RW]);
    let mut claimed = 0;
    for policy in Policy::ALL {
        for cat in [Category::Create, Category::Search, Category::Action] {
            if !policy.first_existing(cat) {
                continue;
            }
            claimed += 1;
            for mask in 0u8..8 {
                let fake = holding_p(3, mask);
                let first = (0..3).find(|b| mask & (1 << b) != 0);
                let got = policy.select(cat, &modes, b"p", &fake);
                match first {
                    Some(b) => assert_eq!(got.map(|v| v[0]), Ok(b), "{policy} {cat:?} {mask}"),
                    None => assert_eq!(got, Err(libc::ENOENT), "{policy} {cat:?} {mask}"),
                }
            }
        }
    }
    // ff, epff, all and epall when searching.
    assert_eq!(claimed, 4);
}

/// `every_existing` promises the policy chooses exactly the branches holding the path whose
/// mode the category allows, in order; when there are none, the errno is the policy's.
#[test]
fn every_existing_policies_choose_each_usable_branch_holding_the_path() {
    let modes = br(&[RO, NC, RW, RW]);
    let mut claimed = 0;
    for policy in Policy::ALL {
        for cat in [Category::Create, Category::Search, Category::Action] {
            if !policy.every_existing(cat) {
                continue;
            }
            claimed += 1;
            for mask in 0u8..16 {
                let fake = holding_p(4, mask);
                let want: Vec<usize> = (0..4)
                    .filter(|&b| mask & (1 << b) != 0 && cat.allows(modes[b].mode))
                    .collect();
                let got = policy.select(cat, &modes, b"p", &fake).map(|v| v.to_vec());
                if want.is_empty() {
                    let held_ro = mask & 1 != 0 && cat == Category::Action;
                    let errno = if held_ro { libc::EROFS } else { libc::ENOENT };
                    assert_eq!(got, Err(errno), "{policy} {cat:?} {mask}");
                } else {
                    assert_eq!(got, Ok(want), "{policy} {cat:?} {mask}");
                }
            }
        }
    }
    // all and epall, searching and acting.
    assert_eq!(claimed, 4);
}
