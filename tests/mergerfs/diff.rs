//! Differential tests: each scenario runs on a real mergerfs 2.33 FUSE mount, through our
//! `UnionFs`, and on our daemon mounted on the host the same way (`union-virtiofsd mount`,
//! operation by operation through the kernel), each over fresh tmpfs branches, and the
//! outcomes (per-operation results and errnos, what every branch holds afterwards) must be
//! identical. Needs root, mergerfs and fuse3
//! (`apt-get install -y mergerfs fuse3`); a missing mergerfs fails, it never skips.
//!
//! The `runtime_*` tests make the same runtime change on both sides (mergerfs: setxattr of
//! `user.mergerfs.<key>` on `<mount>/.mergerfs`; ours: `UnionFs::ctl_set`), branch edits
//! included, then compare what follows; the `*_side_by_side` ones show, without diffing, where
//! we differ from mergerfs 2.33 on purpose.
//!
//! `MERGERFS_DIFF_SHOW=1 cargo test --test mergerfs -- --nocapture` prints both outcomes
//! of every scenario. `lup` and `eplup` are not compared: mergerfs 2.33 does not have them (it accepts any policy
//! name at mount time and crashes on the first create).

use std::collections::BTreeSet;

use testkit::mergerfs_diff::*;

/// Five RW branches whose space answers differ, so every space policy has one right branch:
///
/// | branch | size | used  | free  | used %  | picked by |
/// |--------|------|-------|-------|---------|-----------|
/// | 0      | 16M  | 2M    | 14M   | 12.5    | ff        |
/// | 1      | 16M  | 8M    | 8M    | 50      | lfs       |
/// | 2      | 32M  | 1.5M  | 30.5M | 4.7     | lus       |
/// | 3      | 64M  | 2M    | 62M   | 3.1     | (lup)     |
/// | 4      | 128M | 24M   | 104M  | 18.75   | mfs       |
const SPACE: &[BranchSpec] = &[
    br("16M", "RW", 2 * MIB),
    br("16M", "RW", 8 * MIB),
    br("32M", "RW", 3 * MIB / 2),
    br("64M", "RW", 2 * MIB),
    br("128M", "RW", 24 * MIB),
];

/// Creates of every kind at the root and inside `d`, recorded in order.
fn create_kinds(t: &mut Trace, o: &dyn Ops) {
    t.rec("create f", o.create("f", b"root file")).ok();
    t.rec("mkdir g", o.mkdir("g", 0o755)).ok();
    t.rec("create d/f", o.create("d/f", b"in d")).ok();
    t.rec("mkdir d/g", o.mkdir("d/g", 0o750)).ok();
    t.rec("symlink d/s", o.symlink("f", "d/s")).ok();
    t.rec("read d/f", o.read("d/f")).ok();
}

/// `d` (mode 0711) exists on branches 0–3 but not on 4, so path-preserving policies choose
/// among 0–3 and the others may need to clone it.
fn d_on_0_to_3(s: &Setup) {
    for b in 0..4 {
        s.dir(b, "d", 0o711);
    }
}

/// Runs the create scenario with `policy` on the SPACE branches and checks, beyond equality,
/// that mergerfs put the entries where the policy's definition says (so the scenario really
/// distinguishes the policy): `root` for top-level entries and `in_d` for entries in `d`.
fn create_policy(policy: &str, root: &[usize], in_d: &[usize]) {
    let opts = format!("category.create={policy},minfreespace=1M");
    let o = assert_same(
        &format!("create policy {policy}"),
        &Scenario {
            branches: SPACE,
            options: &opts,
            setup: &d_on_0_to_3,
            run: &create_kinds,
        },
    );
    for p in ["f", "g"] {
        assert_eq!(o.holders(p), root, "{policy}: mergerfs placed {p}\n{o}");
    }
    for p in ["d/f", "d/g", "d/s"] {
        assert_eq!(o.holders(p), in_d, "{policy}: mergerfs placed {p}\n{o}");
    }
}

#[test]
fn create_ff() {
    create_policy("ff", &[0], &[0]);
}

#[test]
fn create_epff() {
    create_policy("epff", &[0], &[0]);
}

#[test]
fn create_lfs() {
    create_policy("lfs", &[1], &[1]);
}

#[test]
fn create_lus() {
    create_policy("lus", &[2], &[2]);
}

#[test]
fn create_mfs_clones_the_parent() {
    // `d` is missing on branch 4: mfs still picks it and clones `d` (mode 0711) there.
    create_policy("mfs", &[4], &[4]);
}

#[test]
fn create_epmfs() {
    create_policy("epmfs", &[4], &[3]);
}

#[test]
fn create_eplfs() {
    create_policy("eplfs", &[1], &[1]);
}

#[test]
fn create_eplus() {
    create_policy("eplus", &[2], &[2]);
}

#[test]
fn create_newest_takes_the_newest_parent() {
    let o = assert_same(
        "create policy newest",
        &Scenario {
            branches: SPACE,
            options: "category.create=newest,minfreespace=1M",
            setup: &|s| {
                for (b, t) in [(0, 1_000), (1, 3_000), (2, 2_000), (4, 500)] {
                    s.dir(b, "d", 0o755);
                    s.mtime(b, "d", t);
                }
            },
            run: &|t, o| {
                t.rec("create d/f", o.create("d/f", b"x")).ok();
                t.rec("mkdir d/g", o.mkdir("d/g", 0o755)).ok();
            },
        },
    );
    assert_eq!(o.holders("d/f"), [1], "{o}");
}

#[test]
fn create_newest_gives_a_tie_to_the_last_branch() {
    // mergerfs compares st_mtime in whole seconds and skips only a strictly older branch:
    // of tied parents the last wins. Sub-second differences do not count.
    let o = assert_same(
        "create policy newest, tied",
        &Scenario {
            branches: SPACE,
            options: "category.create=newest,minfreespace=1M",
            setup: &|s| {
                for b in [0, 1, 2] {
                    s.dir(b, "d", 0o755);
                    s.mtime(b, "d", 2_000);
                }
                s.mtime_nanos(0, "d", 2_000, 900_000_000);
            },
            run: &|t, o| {
                t.rec("create d/f", o.create("d/f", b"x")).ok();
            },
        },
    );
    assert_eq!(o.holders("d/f"), [2], "{o}");
}

#[test]
fn create_all_and_epall_make_directories_everywhere() {
    let setup = |s: &Setup| {
        s.dir(1, "d", 0o750);
        s.dir(3, "d", 0o750);
    };
    let run = |t: &mut Trace, o: &dyn Ops| {
        t.rec("mkdir top", o.mkdir("top", 0o755)).ok();
        t.rec("mkdir d/sub", o.mkdir("d/sub", 0o700)).ok();
        t.rec("symlink d/ln", o.symlink("sub", "d/ln")).ok();
        t.rec("create d/file", o.create("d/file", b"one copy")).ok();
    };
    let epall = assert_same(
        "create policy epall",
        &Scenario {
            branches: SPACE,
            options: "category.create=epall,minfreespace=1M",
            setup: &setup,
            run: &run,
        },
    );
    assert_eq!(epall.holders("top"), [0, 1, 2, 3, 4], "{epall}");
    assert_eq!(epall.holders("d/sub"), [1, 3], "{epall}");
    let all = assert_same(
        "create policy all",
        &Scenario {
            branches: SPACE,
            options: "category.create=all,minfreespace=1M",
            setup: &setup,
            run: &run,
        },
    );
    assert_eq!(all.holders("d/sub"), [0, 1, 2, 3, 4], "{all}");
}

#[test]
fn create_erofs_refuses_everything() {
    assert_same(
        "create policy erofs",
        &Scenario {
            branches: SPACE,
            options: "category.create=erofs,minfreespace=1M",
            setup: &d_on_0_to_3,
            run: &create_kinds,
        },
    );
}

/// SPACE with branch 1 read-only: `a/b/c` (modes 0751/0750/0700, an xattr on `a/b`) exists
/// only on branch 1, `a/b` also on 3 and 4, `a` everywhere.
fn msp_setup(s: &Setup) {
    for b in 0..5 {
        s.dir(b, "a", 0o751);
    }
    for b in [1, 3, 4] {
        s.dir(b, "a/b", 0o750);
    }
    s.dir(1, "a/b/c", 0o700);
    s.file(1, "a/b/c/old", "old");
    xattr_on(&s.roots[1].join("a/b"), "user.tag", "b-on-1");
}

fn xattr_on(p: &std::path::Path, name: &str, value: &str) {
    use std::os::unix::ffi::OsStrExt;
    let cp = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let cn = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let r = unsafe {
        libc::lsetxattr(
            cp.as_ptr(),
            cn.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(r, 0, "tmpfs supports user xattrs");
}

const SPACE_1_RO: &[BranchSpec] = &[
    br("16M", "RW", 2 * MIB),
    br("16M", "RO", 8 * MIB),
    br("32M", "RW", 3 * MIB / 2),
    br("64M", "RW", 2 * MIB),
    br("128M", "RW", 24 * MIB),
];

fn msp_policy(policy: &str, want: usize) {
    let opts = format!("category.create={policy},minfreespace=1M");
    let o = assert_same(
        &format!("create policy {policy}"),
        &Scenario {
            branches: SPACE_1_RO,
            options: &opts,
            setup: &msp_setup,
            run: &|t, o| {
                t.rec("create a/b/c/new", o.create("a/b/c/new", b"n")).ok();
                t.rec("mkdir a/b/c/sub", o.mkdir("a/b/c/sub", 0o755)).ok();
                t.rec("create a/top", o.create("a/top", b"t")).ok();
            },
        },
    );
    // `a/b/c` is only on the RO branch; the deepest writable ancestor with the policy's
    // space answer is `a/b` on 3 or 4, where `c` is cloned.
    assert_eq!(o.holders("a/b/c/new"), [want], "{o}");
}

#[test]
fn create_msplfs_walks_up_to_a_writable_ancestor() {
    msp_policy("msplfs", 3);
}

#[test]
fn create_mspmfs_walks_up_to_a_writable_ancestor() {
    msp_policy("mspmfs", 4);
}

#[test]
fn create_msplus_walks_up_to_a_writable_ancestor() {
    msp_policy("msplus", 3);
}

/// Four branches of equal size (so pfrd's weights are equal): 1 is RO, 4 is below the 8M
/// minfreespace, `d` exists on 0, 1 and 3.
const RANDOM: &[BranchSpec] = &[
    br("32M", "RW", 0),
    br("32M", "RO", 0),
    br("32M", "RW", 0),
    br("32M", "RW", 0),
    br("16M", "RW", 12 * MIB),
];

const RANDOM_TRIES: usize = 40;

/// Creates many files with a random policy on both sides; each must land on exactly one
/// qualifying branch and, over the tries, every qualifying branch must be used (the chance
/// of missing one by luck is below 10^-6).
fn random_policy(policy: &str, dir: &str, qualifying: &[usize]) {
    let opts = format!("category.create={policy},minfreespace=8M");
    let sc = Scenario {
        branches: RANDOM,
        options: &opts,
        setup: &|s| {
            for b in [0, 1, 3] {
                s.dir(b, "d", 0o755);
            }
        },
        run: &|t, o| {
            for i in 0..RANDOM_TRIES {
                let p = if dir.is_empty() {
                    format!("f{i}")
                } else {
                    format!("{dir}/f{i}")
                };
                t.rec(&format!("create {p}"), o.create(&p, b"r")).ok();
            }
        },
    };
    let (theirs, ours) = run_both(&sc);
    assert_eq!(theirs.trace, ours.trace, "{policy}: results differ");
    for (side, o) in [("mergerfs", &theirs), ("ours", &ours)] {
        let mut used = BTreeSet::new();
        for i in 0..RANDOM_TRIES {
            let p = if dir.is_empty() {
                format!("f{i}")
            } else {
                format!("{dir}/f{i}")
            };
            let h = o.holders(&p);
            assert_eq!(h.len(), 1, "{side} {policy}: {p} on {h:?}\n{o}");
            assert!(
                qualifying.contains(&h[0]),
                "{side} {policy}: {p} on non-qualifying branch {}\n{o}",
                h[0]
            );
            used.insert(h[0]);
        }
        assert_eq!(
            used.into_iter().collect::<Vec<_>>(),
            qualifying,
            "{side} {policy}: qualifying branches used"
        );
    }
}

#[test]
fn create_rand() {
    random_policy("rand", "", &[0, 2, 3]);
}

#[test]
fn create_eprand() {
    random_policy("eprand", "d", &[0, 3]);
}

#[test]
fn create_pfrd() {
    random_policy("pfrd", "", &[0, 2, 3]);
}

#[test]
fn create_eppfrd() {
    random_policy("eppfrd", "d", &[0, 3]);
}

#[test]
fn create_msppfrd() {
    random_policy("msppfrd", "d", &[0, 3]);
}

#[test]
fn creates_skip_ro_nc_and_branches_under_minfreespace() {
    let o = assert_same(
        "skip RO/NC/full",
        &Scenario {
            branches: &[
                br("16M", "RO", 0),
                br("16M", "NC", 0),
                br("32M", "RW", 26 * MIB),
                br("16M", "RW", 0),
            ],
            options: "category.create=ff,minfreespace=8M",
            setup: &|_| {},
            run: &|t, o| {
                t.rec("create f", o.create("f", b"x")).ok();
                t.rec("mkdir d", o.mkdir("d", 0o755)).ok();
            },
        },
    );
    assert_eq!(o.holders("f"), [3], "{o}");
}

#[test]
fn per_branch_minfreespace_overrides_the_global_one() {
    let o = assert_same(
        "per-branch minfreespace",
        &Scenario {
            branches: &[
                br("16M", "RW,14M", 4 * MIB),
                br("16M", "RW,1M", 10 * MIB),
                br("32M", "RW", 0),
            ],
            options: "category.create=ff,minfreespace=8M",
            setup: &|_| {},
            run: &|t, o| {
                t.rec("create f", o.create("f", b"x")).ok();
            },
        },
    );
    assert_eq!(o.holders("f"), [1], "{o}");
}

#[test]
fn enospc_when_every_branch_is_under_minfreespace() {
    assert_same(
        "ENOSPC",
        &Scenario {
            branches: &[br("16M", "RW", 12 * MIB), br("32M", "RW", 28 * MIB)],
            options: "category.create=mfs,minfreespace=8M",
            setup: &|s| s.dir(0, "d", 0o755),
            run: &|t, o| {
                t.rec("create f", o.create("f", b"x")).ok();
                t.rec("mkdir g", o.mkdir("g", 0o755)).ok();
                t.rec("create d/f", o.create("d/f", b"x")).ok();
            },
        },
    );
}

#[test]
fn erofs_when_only_ro_or_nc_branches_would_qualify() {
    let run = |t: &mut Trace, o: &dyn Ops| {
        t.rec("create f", o.create("f", b"x")).ok();
        t.rec("mkdir g", o.mkdir("g", 0o755)).ok();
        t.rec("create d/f", o.create("d/f", b"x")).ok();
    };
    for (name, policy) in [("ff", "ff"), ("epmfs", "epmfs")] {
        assert_same(
            &format!("EROFS only RO/NC ({name})"),
            &Scenario {
                branches: &[br("16M", "RO", 0), br("16M", "NC", 0)],
                options: &format!("category.create={policy},minfreespace=1M"),
                setup: &|s| s.dir(1, "d", 0o755),
                run: &run,
            },
        );
        // A full RW branch beside an RO one: which errno wins.
        assert_same(
            &format!("EROFS vs ENOSPC ({name})"),
            &Scenario {
                branches: &[br("16M", "RW", 12 * MIB), br("16M", "RO", 0)],
                options: &format!("category.create={policy},minfreespace=8M"),
                setup: &|s| {
                    s.dir(0, "d", 0o755);
                    s.dir(1, "d", 0o755);
                },
                run: &run,
            },
        );
    }
}

#[test]
fn path_cloning_copies_directory_modes_and_xattrs() {
    // a/b/c exists only on branch 0; mfs picks branch 2, where the whole path is cloned.
    let o = assert_same(
        "path cloning",
        &Scenario {
            branches: &[br("16M", "RW", 0), br("32M", "RW", 0), br("64M", "RW", 0)],
            options: "category.create=mfs,minfreespace=1M",
            setup: &|s| {
                s.dir(0, "a/b/c", 0o755);
                s.chmod(0, "a", 0o711);
                s.chmod(0, "a/b", 0o2770);
                s.chmod(0, "a/b/c", 0o700);
                xattr_on(&s.roots[0].join("a/b"), "user.tag", "b");
            },
            run: &|t, o| {
                t.rec("create a/b/c/f", o.create("a/b/c/f", b"cloned")).ok();
                t.rec("mode a/b", o.mode("a/b")).ok();
            },
        },
    );
    assert_eq!(o.holders("a/b/c/f"), [2], "{o}");
}

/// Two layouts of four branches with `f` and `u` on every branch, `d` (empty) on all but the
/// last, `e` empty on the first and holding a file on the third, `m`/`n` a file on the first
/// and a directory on the third or the reverse, and `ro_only` only on the RO branch:
/// RW, RO, RW, NC, and the same with the RO branch first.
const ACTION_LAYOUTS: &[&[BranchSpec]] = &[
    &[
        br("16M", "RW", 0),
        br("16M", "RO", 0),
        br("16M", "RW", 0),
        br("16M", "NC", 0),
    ],
    &[
        br("16M", "RO", 0),
        br("16M", "RW", 0),
        br("16M", "NC", 0),
        br("16M", "RW", 0),
    ],
];

fn action_setup(s: &Setup) {
    for b in 0..4 {
        s.file(b, "f", &format!("f{b}"));
        s.file(b, "u", &format!("u{b}"));
    }
    for b in 0..3 {
        s.dir(b, "d", 0o755);
    }
    s.dir(0, "e", 0o755);
    s.dir(2, "e", 0o755);
    s.file(2, "e/x", "x");
    // A name that is a file on one branch and a directory on another, both ways round.
    s.file(0, "m", "m");
    s.dir(2, "m", 0o755);
    s.dir(0, "n", 0o755);
    s.file(2, "n", "n");
}

fn action_policy(policy: &str) {
    let opts = format!("category.action={policy},category.create=ff,minfreespace=1M");
    for (i, layout) in ACTION_LAYOUTS.iter().enumerate() {
        let ro = layout.iter().position(|b| b.mode == "RO").unwrap();
        assert_same(
            &format!("action policy {policy}, layout {i}"),
            &Scenario {
                branches: layout,
                options: &opts,
                setup: &|s| {
                    action_setup(s);
                    s.file(ro, "ro_only", "ro");
                },
                run: &|t, o| {
                    t.rec("chmod f", o.chmod("f", 0o600)).ok();
                    t.rec("truncate f", o.truncate("f", 1)).ok();
                    t.rec("setxattr f", o.setxattr("f", "user.k", b"v")).ok();
                    t.rec("setxattr d", o.setxattr("d", "user.k", b"dir")).ok();
                    t.rec("chmod ro_only", o.chmod("ro_only", 0o600)).ok();
                    t.rec("truncate ro_only", o.truncate("ro_only", 0)).ok();
                    t.rec("setxattr ro_only", o.setxattr("ro_only", "user.k", b"v"))
                        .ok();
                    t.rec("unlink ro_only", o.unlink("ro_only")).ok();
                    t.rec("unlink u", o.unlink("u")).ok();
                    t.rec("read u after unlink", o.read("u")).ok();
                    t.rec("unlink u again", o.unlink("u")).ok();
                    t.rec("rmdir d", o.rmdir("d")).ok();
                    t.rec("read_dir d after rmdir", o.read_dir("d")).ok();
                    t.rec("unlink m (a directory on another branch)", o.unlink("m"))
                        .ok();
                    t.rec("rmdir n (a file on another branch)", o.rmdir("n"))
                        .ok();
                    t.rec("read f", o.read("f")).ok();
                    t.rec("mode f", o.mode("f")).ok();
                },
            },
        );
    }
}

/// A documented difference, decided for POSIX: rmdir of a directory that is empty on one
/// branch but not on another answers ENOTEMPTY on both sides, but mergerfs has already
/// removed the empty copy, while the union removes nothing (the directory is not empty in
/// the union, so rmdir(2) must leave it as it was).
#[test]
fn rmdir_nonempty_in_the_union_removes_nothing() {
    for policy in ["epall", "all"] {
        let opts = format!("category.action={policy},category.create=ff,minfreespace=1M");
        let layout = &ACTION_LAYOUTS[0];
        let (theirs, ours) = run_both(&Scenario {
            branches: layout,
            options: &opts,
            setup: &action_setup,
            run: &|t, o| {
                t.rec("rmdir e (not empty on one branch)", o.rmdir("e"))
                    .ok();
                t.rec("read_dir e", o.read_dir("e")).ok();
            },
        });
        assert_eq!(theirs.trace, ours.trace, "{policy}: both answer ENOTEMPTY");
        assert!(
            ours.trace[0].contains("ENOTEMPTY"),
            "{policy}: {:?}",
            ours.trace
        );
        let has_e = |o: &Outcome| o.branches.iter().filter(|b| b.contains_key("e")).count();
        assert_eq!(
            has_e(&ours),
            2,
            "{policy}: the union keeps both copies\n{ours}"
        );
        assert_eq!(
            has_e(&theirs),
            1,
            "{policy}: mergerfs removed the empty copy\n{theirs}"
        );
    }
}

#[test]
fn action_epall() {
    action_policy("epall");
}

#[test]
fn action_epff() {
    action_policy("epff");
}

#[test]
fn action_all() {
    action_policy("all");
}

#[test]
fn action_erofs() {
    action_policy("erofs");
}

#[test]
fn search_policies_choose_which_copy_is_read() {
    for policy in ["ff", "newest", "epff"] {
        assert_same(
            &format!("search policy {policy}"),
            &Scenario {
                branches: &[br("16M", "RW", 0), br("16M", "RO", 0), br("16M", "NC", 0)],
                options: &format!("category.search={policy},minfreespace=1M"),
                setup: &|s| {
                    for (b, t) in [(0, 1_000), (1, 3_000), (2, 2_000)] {
                        s.file(b, "f", &format!("copy {b}"));
                        s.mtime(b, "f", t);
                    }
                    s.file(2, "nc_only", "nc");
                },
                run: &|t, o| {
                    t.rec("read f", o.read("f")).ok();
                    t.rec("mode f", o.mode("f")).ok();
                    t.rec("read nc_only", o.read("nc_only")).ok();
                },
            },
        );
    }
}

const THREE_RW: &[BranchSpec] = &[br("16M", "RW", 0), br("16M", "RW", 0), br("16M", "RW", 0)];

#[test]
fn rename_within_a_branch_and_over_a_copy_on_another() {
    assert_same(
        "rename",
        &Scenario {
            branches: THREE_RW,
            options: "category.create=epmfs,minfreespace=1M",
            setup: &|s| {
                s.file(0, "x", "x0");
                s.file(0, "a", "a0");
                s.file(1, "b", "b1");
                s.file(2, "b", "b2");
                s.dir(0, "sub", 0o755);
            },
            run: &|t, o| {
                t.rec("rename x y", o.rename("x", "y")).ok();
                t.rec("rename y sub/y", o.rename("y", "sub/y")).ok();
                // The destination exists only on other branches: they lose their copies.
                t.rec("rename a b", o.rename("a", "b")).ok();
                t.rec("read b", o.read("b")).ok();
                t.rec("rename missing z", o.rename("missing", "z")).ok();
            },
        },
    );
}

/// `src/f` on branch 0 only and `dst` on branch 1 only; `two` on branches 0 and 2 with `half`
/// (the destination directory) only on 2.
fn cross_dir_setup(s: &Setup) {
    s.dir(0, "src", 0o755);
    s.file(0, "src/f", "f");
    s.dir(1, "dst", 0o750);
    s.file(0, "two", "two0");
    s.file(2, "two", "two2");
    s.dir(2, "half", 0o755);
}

fn cross_dir_run(t: &mut Trace, o: &dyn Ops) {
    t.rec("rename src/f dst/f", o.rename("src/f", "dst/f")).ok();
    t.rec("read dst/f", o.read("dst/f")).ok();
    t.rec("read src/f", o.read("src/f")).ok();
    // Renamable on branch 2, but branch 0 lacks the destination directory.
    t.rec("rename two half/two", o.rename("two", "half/two"))
        .ok();
    t.rec("read half/two", o.read("half/two")).ok();
    t.rec("read two", o.read("two")).ok();
}

/// mergerfs: EXDEV where the destination directory is missing on the only branch holding the
/// source; where the source is on two branches and only one has the destination directory,
/// the rename succeeds there and the other copy is removed (the old name disappears).
#[test]
fn rename_into_a_directory_on_another_branch_with_a_path_preserving_policy() {
    assert_same(
        "rename across branches, epmfs",
        &Scenario {
            branches: THREE_RW,
            options: "category.create=epmfs,minfreespace=1M",
            setup: &cross_dir_setup,
            run: &cross_dir_run,
        },
    );
}

/// mergerfs: with a create policy that is not path-preserving the destination directory is
/// cloned onto the source's branch and the rename succeeds there.
#[test]
fn rename_into_a_directory_on_another_branch_with_a_non_path_preserving_policy() {
    assert_same(
        "rename across branches, mfs",
        &Scenario {
            branches: THREE_RW,
            options: "category.create=mfs,minfreespace=1M",
            setup: &cross_dir_setup,
            run: &cross_dir_run,
        },
    );
}

#[test]
fn rename_of_a_directory_on_several_branches() {
    assert_same(
        "rename directory",
        &Scenario {
            branches: &[br("16M", "RW", 0), br("16M", "RO", 0), br("16M", "RW", 0)],
            options: "category.create=epmfs,minfreespace=1M",
            setup: &|s| {
                for b in 0..3 {
                    s.dir(b, "d", 0o755);
                    s.file(b, &format!("d/f{b}"), "x");
                }
                s.file(1, "ro_file", "ro");
            },
            run: &|t, o| {
                t.rec("rename d e", o.rename("d", "e")).ok();
                t.rec("read_dir e", o.read_dir("e").map(sorted)).ok();
                t.rec("read_dir d", o.read_dir("d").map(sorted)).ok();
                t.rec("rename ro_file x", o.rename("ro_file", "x")).ok();
            },
        },
    );
}

fn link_scenario(policy: &str) {
    assert_same(
        &format!("link across branches, {policy}"),
        &Scenario {
            branches: THREE_RW,
            options: &format!("category.create={policy},minfreespace=1M"),
            setup: &|s| {
                s.file(0, "f", "data");
                s.dir(1, "dir", 0o755);
            },
            run: &|t, o| {
                t.rec("link f h", o.link("f", "h")).ok();
                t.rec("link f dir/h", o.link("f", "dir/h")).ok();
                t.rec("read dir/h", o.read("dir/h")).ok();
            },
        },
    );
}

/// mergerfs: a link into a directory missing on the source's branch is EXDEV.
#[test]
fn link_across_branches_with_a_path_preserving_policy() {
    link_scenario("epmfs");
}

/// mergerfs: the directory is cloned onto the source's branch and the link made there.
#[test]
fn link_across_branches_with_a_non_path_preserving_policy() {
    link_scenario("mfs");
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[test]
fn readdir_merges_names_across_branches() {
    let sc = Scenario {
        branches: &[br("16M", "RW", 0), br("16M", "RO", 0), br("16M", "NC", 0)],
        options: "category.create=ff,minfreespace=1M",
        setup: &|s| {
            for b in 0..3 {
                s.dir(b, "d", 0o755);
            }
            for (b, names) in [
                (0, &["m", "a", "z"][..]),
                (1, &["b", "a", "y", "c"][..]),
                (2, &["z", "x", "c", "q"][..]),
            ] {
                for n in names {
                    s.file(b, &format!("d/{n}"), n);
                }
            }
            s.dir(2, "d/sub", 0o755);
        },
        run: &|t, o| {
            t.rec("read_dir d", o.read_dir("d").map(sorted)).ok();
            t.rec("read_dir root", o.read_dir("").map(sorted)).ok();
        },
    };
    let (theirs, ours) = run_both(&sc);
    assert!(
        theirs == ours,
        "readdir sets differ\n--- mergerfs:\n{theirs}--- ours:\n{ours}"
    );
    // The order is compared separately so a difference is reported as such.
    let order = |side| {
        let mut order = Vec::new();
        let sc2 = Scenario {
            run: &|t, o| {
                t.rec("order d", o.read_dir("d")).ok();
            },
            ..sc
        };
        order.extend(run_side(&sc2, side).trace);
        order
    };
    let (a, b) = (order(Side::Mergerfs), order(Side::Ours));
    if std::env::var_os("MERGERFS_DIFF_SHOW").is_some() {
        eprintln!("readdir order: mergerfs {a:?}, ours {b:?}");
    }
    assert_eq!(a, b, "readdir order: mergerfs {a:?}, ours {b:?}");
}

/// Parses the `statfs total=T avail=A` notes of a trace.
fn statfs_notes(o: &Outcome) -> Vec<(u64, u64)> {
    o.trace
        .iter()
        .filter_map(|l| l.strip_prefix("statfs "))
        .map(|l| {
            let mut n = l
                .split(' ')
                .map(|kv| kv.split_once('=').unwrap().1.parse().unwrap());
            (n.next().unwrap(), n.next().unwrap())
        })
        .collect()
}

#[test]
fn statfs_sums_every_branch() {
    const PAGE: u64 = 4096;
    let branches = &[
        br("16M", "RW", 2 * MIB),
        br("32M", "RO", 5 * MIB),
        br("64M", "NC", 0),
        br("8M", "RW,1M", MIB),
    ];
    let sc = Scenario {
        branches,
        options: "category.create=ff,minfreespace=1M",
        setup: &|_| {},
        run: &|t, o| {
            let st = o.statfs().unwrap();
            t.note(format!("statfs total={} avail={}", st.total, st.avail));
            t.rec("create big", o.create("big", &vec![7u8; 3 * MIB]))
                .ok();
            let st = o.statfs().unwrap();
            t.note(format!("statfs total={} avail={}", st.total, st.avail));
        },
    };
    let (theirs, ours) = run_both(&sc);
    let others = |o: &Outcome| -> Vec<String> {
        o.trace
            .iter()
            .filter(|l| !l.starts_with("statfs "))
            .cloned()
            .collect()
    };
    assert_eq!(others(&theirs), others(&ours));
    assert_eq!(theirs.branches, ours.branches);
    let (a, b) = (statfs_notes(&theirs), statfs_notes(&ours));
    let slack = PAGE * branches.len() as u64;
    for ((ta, aa), (tb, ab)) in a.iter().zip(&b) {
        assert!(
            ta.abs_diff(*tb) <= slack && aa.abs_diff(*ab) <= slack,
            "statfs (total, avail): mergerfs {a:?}, ours {b:?}"
        );
    }
    // 16M + 32M + 64M + 8M, less the 8M of fill and then the 3M file.
    let (total, avail) = a[0];
    assert!(total.abs_diff(120 * MIB as u64) <= slack, "{a:?}");
    assert!(avail.abs_diff(112 * MIB as u64) <= slack, "{a:?}");
    assert!(a[1].1.abs_diff(109 * MIB as u64) <= slack, "{a:?}");
}

/// The source only on branch 0, the destination directory only on branch 1 (a path-preserving
/// policy cannot follow it there), so rename and link answer EXDEV, or fall back to symlinks.
fn exdev_setup(s: &Setup) {
    s.dir(0, "src", 0o755);
    s.file(0, "src/f", "data");
    s.file(0, "g", "gdata");
    s.dir(1, "dst", 0o755);
    s.dir(1, "dst/deep", 0o755);
}

fn exdev_run(t: &mut Trace, o: &dyn Ops) {
    t.rec("rename src/f dst/deep/f", o.rename("src/f", "dst/deep/f"))
        .ok();
    t.rec("read dst/deep/f", o.read("dst/deep/f")).ok();
    t.rec("read src/f", o.read("src/f")).ok();
    t.rec("link g dst/h", o.link("g", "dst/h")).ok();
    t.rec("read dst/h", o.read("dst/h")).ok();
}

fn exdev_case(name: &str, options: &str) {
    assert_same(
        name,
        &Scenario {
            branches: THREE_RW,
            options,
            setup: &exdev_setup,
            run: &exdev_run,
        },
    );
}

/// rename-exdev and link-exdev off: both answer EXDEV and nothing moves.
#[test]
fn exdev_passthrough() {
    exdev_case("exdev passthrough", "category.create=epmfs,minfreespace=1M");
}

/// rename-exdev=rel-symlink parks the source in .mergerfs_rename_exdev on its branch and
/// leaves a relative symlink; link-exdev=rel-symlink links by a relative symlink.
#[test]
fn exdev_rel_symlink() {
    exdev_case(
        "exdev rel-symlink",
        "category.create=epmfs,minfreespace=1M,rename-exdev=rel-symlink,link-exdev=rel-symlink",
    );
}

const MOVE: &[BranchSpec] = &[br("8M", "RW", 0), br("32M", "RW", 0), br("16M", "RW", 0)];

fn grow_setup(s: &Setup) {
    s.dir(0, "d", 0o750);
    s.file(0, "d/grow", "");
}

fn grow_run(t: &mut Trace, o: &dyn Ops) {
    // 12 MiB into a file on the 8M branch, in 1 MiB writes.
    let data: Vec<u8> = (0..12u32 << 20).map(|i| b'a' + (i % 26) as u8).collect();
    t.rec(
        "write 12M to d/grow",
        o.write_chunks("d/grow", &data, 1 << 20),
    )
    .ok();
    let back = o
        .read("d/grow")
        .map(|s| (s.len(), s.as_bytes() == data.as_slice()));
    t.rec("read back d/grow (len, intact)", back).ok();
}

/// Without moveonenospc the write fails with ENOSPC where the file is.
#[test]
fn moveonenospc_off() {
    assert_same(
        "moveonenospc=false",
        &Scenario {
            branches: MOVE,
            options: "category.create=ff,minfreespace=0",
            setup: &grow_setup,
            run: &grow_run,
        },
    );
}

/// With moveonenospc=mfs the file moves to the branch with the most free space (the 32M one),
/// its parent directory is cloned there with its mode, and the write completes.
#[test]
fn moveonenospc_mfs() {
    let out = assert_same(
        "moveonenospc=mfs",
        &Scenario {
            branches: MOVE,
            options: "category.create=ff,minfreespace=0,moveonenospc=mfs",
            setup: &grow_setup,
            run: &grow_run,
        },
    );
    assert_eq!(out.holders("d/grow"), [1]);
}

// Runtime edits: the same change made through mergerfs's control file (`setfattr -n
// user.mergerfs.<key> -v <value> <mount>/.mergerfs`) and through our `ctl_set`, then the same
// operations. `{i}` in a value is branch `i`'s root on each side; branches made with `spare`
// start outside the union.

/// Records `set KEY=VALUE` and its result.
fn set(t: &mut Trace, o: &dyn Ops, key: &str, value: &str) {
    t.rec(&format!("set {key}={value}"), o.set_option(key, value))
        .ok();
}

/// Records `get KEY` and the value.
fn get(t: &mut Trace, o: &dyn Ops, key: &str) {
    t.rec(&format!("get {key}"), o.get_option(key)).ok();
}

/// A size as mergerfs and we write it (`20971520`, `20M`, `1536K`), in bytes.
fn size_bytes(v: &str) -> u64 {
    let (digits, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let n: u64 = digits
        .parse()
        .unwrap_or_else(|_| panic!("not a size: {v:?}"));
    let shift = match unit {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => panic!("not a size: {v:?}"),
    };
    n << shift
}

/// Records `get minfreespace` in bytes. mergerfs 2.33 shows the value in bytes
/// (`20971520`), we as it is written with the largest exact binary unit (`20M`, as
/// mergerfs writes a branch's own minimum in `branches`): the same number, so the trace
/// compares it normalised (`minfreespace_formats_side_by_side` shows both).
fn get_minfreespace(t: &mut Trace, o: &dyn Ops) {
    let v = o.get_option("minfreespace").map(|v| size_bytes(&v));
    t.rec("get minfreespace (bytes)", v).ok();
}

/// Two branches and a spare that has the most free space: 14M, 24M and 64M free.
const APPEND: &[BranchSpec] = &[
    br("16M", "RW", 2 * MIB),
    br("32M", "RW", 8 * MIB),
    spare("64M", 0),
];

/// With mfs, a branch appended at run time with the most free space takes every create from
/// then on (the parent `d` is cloned onto it), and what it held already becomes visible.
#[test]
fn runtime_append_takes_creates_by_free_space() {
    let o = assert_same(
        "runtime +>",
        &Scenario {
            branches: APPEND,
            options: "category.create=mfs,minfreespace=1M",
            setup: &|s| {
                s.dir(0, "d", 0o711);
                s.file(2, "pre", "on the spare");
            },
            run: &|t, o| {
                t.rec("create before", o.create("before", b"b")).ok();
                t.rec("read pre", o.read("pre")).ok();
                get(t, o, "branches");
                set(t, o, "branches", "+>{2}");
                get(t, o, "branches");
                get(t, o, "srcmounts");
                t.rec("read pre", o.read("pre")).ok();
                create_kinds(t, o);
                t.rec("read_dir /", o.read_dir("").map(sorted)).ok();
            },
        },
    );
    assert_eq!(o.holders("before"), [1], "{o}");
    for p in ["f", "g", "d/f", "d/g", "d/s"] {
        assert_eq!(o.holders(p), [2], "mergerfs placed {p}\n{o}");
    }
}

const THREE_AND_SPARE: &[BranchSpec] = &[
    br("16M", "RW", 0),
    br("16M", "RW", 0),
    br("16M", "RW", 0),
    spare("16M", 0),
];

/// With ff, a branch prepended at run time is the first found: creates land there, and its
/// copy of a name shadows the others.
#[test]
fn runtime_prepend_takes_creates_with_ff() {
    let o = assert_same(
        "runtime +<",
        &Scenario {
            branches: THREE_AND_SPARE,
            options: "category.create=ff,minfreespace=1M",
            setup: &|s| {
                s.file(0, "dup", "dup0");
                s.file(3, "dup", "dup3");
                s.dir(1, "d", 0o750);
            },
            run: &|t, o| {
                t.rec("create a", o.create("a", b"a")).ok();
                t.rec("read dup", o.read("dup")).ok();
                set(t, o, "branches", "+<{3}");
                get(t, o, "branches");
                t.rec("read dup", o.read("dup")).ok();
                t.rec("create b", o.create("b", b"b")).ok();
                t.rec("mkdir c", o.mkdir("c", 0o755)).ok();
                t.rec("create d/f", o.create("d/f", b"in d")).ok();
                t.rec("read_dir /", o.read_dir("").map(sorted)).ok();
            },
        },
    );
    assert_eq!(o.holders("a"), [0], "{o}");
    for p in ["b", "c", "d/f"] {
        assert_eq!(o.holders(p), [3], "mergerfs placed {p}\n{o}");
    }
}

/// `-PATTERN` takes a branch out: what only it held disappears from lookups and readdir, a
/// name it shared shows the next copy, creates go to the remaining branches, and the removed
/// branch's files stay where they are.
#[test]
fn runtime_remove_by_pattern() {
    let o = assert_same(
        "runtime -{0}",
        &Scenario {
            branches: &[br("16M", "RW", 0), br("16M", "RW", 0), br("16M", "RW", 0)],
            options: "category.create=ff,minfreespace=1M",
            setup: &|s| {
                s.file(0, "only0", "o0");
                s.file(0, "both", "b0");
                s.file(1, "both", "b1");
                s.dir(0, "d", 0o755);
                s.dir(1, "d", 0o755);
                s.file(0, "d/x", "x");
                s.file(1, "d/y", "y");
            },
            run: &|t, o| {
                t.rec("read only0", o.read("only0")).ok();
                t.rec("read both", o.read("both")).ok();
                t.rec("read_dir d", o.read_dir("d").map(sorted)).ok();
                set(t, o, "branches", "-{0}");
                get(t, o, "branches");
                t.rec("read only0", o.read("only0")).ok();
                t.rec("mode only0", o.mode("only0")).ok();
                t.rec("unlink only0", o.unlink("only0")).ok();
                t.rec("read both", o.read("both")).ok();
                t.rec("read d/x", o.read("d/x")).ok();
                t.rec("read_dir /", o.read_dir("").map(sorted)).ok();
                t.rec("read_dir d", o.read_dir("d").map(sorted)).ok();
                t.rec("create new", o.create("new", b"n")).ok();
                t.rec("mkdir nd", o.mkdir("nd", 0o755)).ok();
                t.rec("create d/z", o.create("d/z", b"z")).ok();
                t.rec("create only0", o.create("only0", b"again")).ok();
            },
        },
    );
    assert_eq!(
        o.branches[0].get("only0").unwrap(),
        "file 644 \"o0\"",
        "{o}"
    );
    for p in ["new", "nd", "d/z"] {
        assert_eq!(o.holders(p), [1], "mergerfs placed {p}\n{o}");
    }
}

/// `-<` and `->` take out the first and the last branch; `=LIST` replaces the list with
/// modes. The RO branch (also the one with the most free space) is never chosen for a
/// create, by ff or mfs, and a file only on it cannot be unlinked (EROFS).
#[test]
fn runtime_remove_first_and_last_then_replace_with_modes() {
    let o = assert_same(
        "runtime -< -> =",
        &Scenario {
            branches: &[
                br("64M", "RW", 0),
                br("16M", "RW", 0),
                br("16M", "RW", 0),
                br("16M", "RW", 0),
            ],
            options: "category.create=ff,minfreespace=1M",
            setup: &|s| {
                s.file(0, "ro_file", "r");
                s.file(3, "last", "l");
            },
            run: &|t, o| {
                set(t, o, "branches", "-<");
                get(t, o, "branches");
                t.rec("read ro_file", o.read("ro_file")).ok();
                t.rec("create a", o.create("a", b"a")).ok();
                set(t, o, "branches", "->");
                get(t, o, "branches");
                t.rec("read last", o.read("last")).ok();
                set(t, o, "branches", "={0}=RO:{1}=RW");
                get(t, o, "branches");
                t.rec("read ro_file", o.read("ro_file")).ok();
                t.rec("create b", o.create("b", b"b")).ok();
                t.rec("mkdir c", o.mkdir("c", 0o755)).ok();
                t.rec("unlink ro_file", o.unlink("ro_file")).ok();
                set(t, o, "category.create", "mfs");
                t.rec("create e", o.create("e", b"e")).ok();
                t.rec("mkdir h", o.mkdir("h", 0o755)).ok();
                t.rec("read_dir /", o.read_dir("").map(sorted)).ok();
            },
        },
    );
    assert_eq!(o.holders("a"), [1], "{o}");
    for p in ["b", "c", "e", "h"] {
        assert_eq!(o.holders(p), [1], "mergerfs placed {p}\n{o}");
    }
    assert_eq!(o.holders("ro_file"), [0], "{o}");
}

/// Branches added at run time with a mode and a floor of their own: an NC branch is never
/// created on but its files are read and removed; a branch below its own floor is skipped;
/// `=LIST` changes both (an item without a mode is RW); `srcmounts` edits as `branches` does,
/// and `-` takes several patterns and globs.
#[test]
fn runtime_added_branches_with_modes_and_floors() {
    let o = assert_same(
        "runtime modes and floors",
        &Scenario {
            branches: &[
                br("16M", "RW", 2 * MIB),
                br("16M", "RW", 0),
                spare("64M", 0),
                spare("64M", 4 * MIB),
            ],
            options: "category.create=mfs,minfreespace=1M",
            setup: &|s| {
                s.file(2, "nc_file", "nc");
                s.file(2, "nc_keep", "nc");
            },
            run: &|t, o| {
                set(t, o, "branches", "+>{2}=NC:{3}=RW,100M");
                get(t, o, "branches");
                t.rec("read nc_file", o.read("nc_file")).ok();
                t.rec("unlink nc_file", o.unlink("nc_file")).ok();
                t.rec("create f", o.create("f", b"f")).ok();
                t.rec("mkdir d", o.mkdir("d", 0o755)).ok();
                set(t, o, "branches", "={0}:{1}:{2}=RW,70M:{3}");
                get(t, o, "branches");
                t.rec("create g", o.create("g", b"g")).ok();
                t.rec("create d/g", o.create("d/g", b"dg")).ok();
                set(t, o, "srcmounts", "-{0}:{3}*");
                get(t, o, "branches");
                get(t, o, "srcmounts");
                t.rec("read g", o.read("g")).ok();
                t.rec("create h", o.create("h", b"h")).ok();
                t.rec("read_dir /", o.read_dir("").map(sorted)).ok();
            },
        },
    );
    for (p, want) in [("f", &[1][..]), ("d", &[1, 3]), ("g", &[3]), ("h", &[1])] {
        assert_eq!(o.holders(p), want, "mergerfs placed {p}\n{o}");
    }
    assert_eq!(o.holders("nc_file"), [] as [usize; 0], "{o}");
}

/// A branch's own floor reads back in `branches` as mergerfs writes it: the largest exact
/// binary unit, upper case (`1536000` is `1500K`, `3k` is `3K`), bytes when none is exact.
#[test]
fn runtime_branch_floor_formats() {
    assert_same(
        "runtime branch floors",
        &Scenario {
            branches: &[br("16M", "RW", 0), spare("16M", 0)],
            options: "category.create=ff,minfreespace=1M",
            setup: &|_| {},
            run: &|t, o| {
                for v in [
                    "12345", "1500K", "1536000", "1048576", "0", "1025K", "3k", "10m", "2G", "1T",
                ] {
                    set(t, o, "branches", &format!("+>{{1}}=RW,{v}"));
                    get(t, o, "branches");
                    set(t, o, "branches", "-{1}");
                }
                for v in ["3k", "10m", "1536000"] {
                    set(t, o, "minfreespace", v);
                    get_minfreespace(t, o);
                }
            },
        },
    );
}

/// A difference in what is accepted: mergerfs 2.33 takes whole numbers only for a size
/// (`1.5M` is EINVAL, for `minfreespace` and for a branch's floor); our size parser also
/// takes fractions (`1.5M` is 1536K), as it does in `-o`.
#[test]
fn runtime_fractional_sizes_side_by_side() {
    let (theirs, ours) = side_by_side(
        "fractional sizes",
        &Scenario {
            branches: &[br("16M", "RW", 0), spare("16M", 0)],
            options: "category.create=ff,minfreespace=1M",
            setup: &|_| {},
            run: &|t, o| {
                set(t, o, "minfreespace", "1.5M");
                get_minfreespace(t, o);
                set(t, o, "branches", "+>{1}=RW,1.5M");
                get(t, o, "branches");
            },
        },
    );
    assert_eq!(
        theirs.trace,
        [
            "set minfreespace=1.5M: EINVAL",
            "get minfreespace (bytes): Ok(1048576)",
            "set branches=+>{1}=RW,1.5M: EINVAL",
            "get branches: Ok(\"{0}=RW\")",
        ]
    );
    assert_eq!(
        ours.trace,
        [
            "set minfreespace=1.5M: Ok(())",
            "get minfreespace (bytes): Ok(1572864)",
            "set branches=+>{1}=RW,1.5M: Ok(())",
            "get branches: Ok(\"{0}=RW:{1}=RW,1536K\")",
        ]
    );
}

/// `category.create`, `func.mkdir`, `minfreespace` and `moveonenospc` changed at run time
/// rule the creates that follow, and read back as set (on the SPACE branches: ff → 0,
/// lfs → 1, mfs → 4; above a 20M floor only 2, 3 and 4 qualify).
#[test]
fn runtime_policy_and_minfreespace_changes() {
    let o = assert_same(
        "runtime options",
        &Scenario {
            branches: SPACE,
            options: "category.create=ff,minfreespace=1M",
            setup: &|_| {},
            run: &|t, o| {
                get(t, o, "category.create");
                get(t, o, "func.mkdir");
                get_minfreespace(t, o);
                t.rec("create a", o.create("a", b"a")).ok();
                set(t, o, "category.create", "mfs");
                get(t, o, "category.create");
                get(t, o, "func.create");
                get(t, o, "func.mkdir");
                t.rec("create b", o.create("b", b"b")).ok();
                set(t, o, "user.mergerfs.func.mkdir", "lfs");
                get(t, o, "func.mkdir");
                get(t, o, "user.mergerfs.func.create");
                t.rec("mkdir c", o.mkdir("c", 0o755)).ok();
                t.rec("create e", o.create("e", b"e")).ok();
                set(t, o, "minfreespace", "20M");
                get_minfreespace(t, o);
                t.rec("mkdir g", o.mkdir("g", 0o755)).ok();
                t.rec("create h", o.create("h", b"h")).ok();
                set(t, o, "category.create", "ff");
                get(t, o, "category.create");
                t.rec("mkdir i", o.mkdir("i", 0o755)).ok();
                t.rec("create j", o.create("j", b"j")).ok();
                set(t, o, "minfreespace", "200M");
                get_minfreespace(t, o);
                t.rec("create k", o.create("k", b"k")).ok();
                t.rec("mkdir l", o.mkdir("l", 0o755)).ok();
                set(t, o, "moveonenospc", "true");
                get(t, o, "moveonenospc");
                set(t, o, "moveonenospc", "false");
                get(t, o, "moveonenospc");
            },
        },
    );
    for (p, want) in [
        ("a", 0),
        ("b", 4),
        ("c", 1),
        ("e", 4),
        ("g", 2),
        ("h", 4),
        ("i", 2),
        ("j", 2),
    ] {
        assert_eq!(o.holders(p), [want], "mergerfs placed {p}\n{o}");
    }
    assert!(
        o.holders("k").is_empty() && o.holders("l").is_empty(),
        "{o}"
    );
}

/// `=LIST` over the same directories changes their modes in place (RW to RO, NC to RW: the
/// former NC branch is then the first with room above the 15M floor);
/// a plain `+` appends; a branch's own floor outlives a change of the global `minfreespace`.
#[test]
fn runtime_modes_changed_in_place_and_own_floors_kept() {
    let o = assert_same(
        "runtime modes in place",
        &Scenario {
            branches: &[
                br("16M", "RW,1M", 2 * MIB),
                br("16M", "NC", 0),
                br("32M", "RW", 0),
                spare("16M", 0),
            ],
            options: "category.create=ff,minfreespace=1M",
            setup: &|s| {
                for b in 0..3 {
                    s.file(b, &format!("on{b}"), &format!("{b}"));
                }
            },
            run: &|t, o| {
                get(t, o, "branches");
                t.rec("create a", o.create("a", b"a")).ok();
                set(t, o, "minfreespace", "15M");
                get(t, o, "branches");
                // Branch 0 has 14M free: under the global floor, above its own.
                t.rec("create b", o.create("b", b"b")).ok();
                set(t, o, "branches", "={0}=RO:{1}=RW:{2}");
                get(t, o, "branches");
                t.rec("create c", o.create("c", b"c")).ok();
                t.rec("unlink on0", o.unlink("on0")).ok();
                t.rec("chmod on0", o.chmod("on0", 0o600)).ok();
                t.rec("unlink on1", o.unlink("on1")).ok();
                set(t, o, "branches", "+{3}=RW,1M");
                get(t, o, "branches");
                set(t, o, "branches", "-{1}:{2}");
                get(t, o, "branches");
                t.rec("create d", o.create("d", b"d")).ok();
                t.rec("read_dir /", o.read_dir("").map(sorted)).ok();
            },
        },
    );
    for (p, want) in [("a", 0), ("b", 0), ("c", 1), ("d", 3)] {
        assert_eq!(o.holders(p), [want], "mergerfs placed {p}\n{o}");
    }
}

/// `category.search` and `category.action` changed at run time: which copy is read, and
/// which copies a chmod changes.
#[test]
fn runtime_search_and_action_changes() {
    assert_same(
        "runtime search and action",
        &Scenario {
            branches: THREE_RW,
            options: "category.create=ff,minfreespace=1M",
            setup: &|s| {
                for (b, t) in [(0, 1_000), (1, 3_000), (2, 2_000)] {
                    s.file(b, "f", &format!("copy {b}"));
                    s.mtime(b, "f", t);
                }
            },
            run: &|t, o| {
                t.rec("read f", o.read("f")).ok();
                set(t, o, "category.search", "newest");
                get(t, o, "category.search");
                get(t, o, "func.open");
                t.rec("read f", o.read("f")).ok();
                set(t, o, "func.open", "ff");
                t.rec("read f", o.read("f")).ok();
                set(t, o, "category.action", "epff");
                get(t, o, "category.action");
                t.rec("chmod f", o.chmod("f", 0o600)).ok();
                // getattr still takes the newest copy (1), which epff did not change.
                t.rec("mode f", o.mode("f")).ok();
                set(t, o, "func.getattr", "ff");
                t.rec("mode f", o.mode("f")).ok();
                set(t, o, "func.chmod", "all");
                t.rec("chmod f", o.chmod("f", 0o640)).ok();
                set(t, o, "category.action", "epall");
                t.rec("truncate f", o.truncate("f", 2)).ok();
            },
        },
    );
}

/// `moveonenospc` switched on at run time: a write that fills its branch moves the file to
/// the branch with the most free space (see `moveonenospc_mfs`).
#[test]
fn runtime_moveonenospc_switched_on() {
    let out = assert_same(
        "runtime moveonenospc",
        &Scenario {
            branches: MOVE,
            options: "category.create=ff,minfreespace=0",
            setup: &grow_setup,
            run: &|t, o| {
                set(t, o, "moveonenospc", "mfs");
                get(t, o, "moveonenospc");
                grow_run(t, o);
            },
        },
    );
    assert_eq!(out.holders("d/grow"), [1]);
}

/// A category whose functions have different policies reads back as mergerfs 2.33 writes it:
/// each policy once, sorted by name (mergerfs joins a `std::set`).
#[test]
fn runtime_get_of_a_mixed_category() {
    assert_same(
        "runtime mixed category",
        &Scenario {
            branches: &[br("16M", "RW", 0), br("16M", "RW", 0)],
            options: "category.create=ff,minfreespace=1M",
            setup: &|_| {},
            run: &|t, o| {
                set(t, o, "category.create", "mfs");
                set(t, o, "func.mkdir", "lfs");
                get(t, o, "category.create");
                set(t, o, "func.symlink", "eplus");
                get(t, o, "category.create");
                set(t, o, "func.getattr", "newest");
                get(t, o, "category.search");
                set(t, o, "func.chmod", "ff");
                get(t, o, "category.action");
            },
        },
    );
}

/// The errnos of refused settings, as mergerfs gives them: an unknown key is ENOATTR
/// (ENODATA on Linux), a read-only one EROFS, a bad value or branch edit EINVAL; nothing
/// changes.
#[test]
fn runtime_refused_settings() {
    assert_same(
        "runtime errors",
        &Scenario {
            branches: &[br("16M", "RW", 0), br("16M", "RW", 0), spare("16M", 0)],
            options: "category.create=ff,minfreespace=1M",
            setup: &|_| {},
            run: &|t, o| {
                get(t, o, "nosuch");
                set(t, o, "nosuch", "1");
                get(t, o, "func.nosuch");
                set(t, o, "func.nosuch", "ff");
                set(t, o, "version", "9");
                set(t, o, "pid", "1");
                set(t, o, "minfreespace", "lots");
                get_minfreespace(t, o);
                set(t, o, "moveonenospc", "bogus");
                get(t, o, "moveonenospc");
                set(t, o, "branches", "<>{2}");
                set(t, o, "branches", "+{2}=ZZ");
                get(t, o, "branches");
                t.rec("create f", o.create("f", b"f")).ok();
            },
        },
    );
}

/// Runs `sc` on both sides for a documented difference: prints both outcomes, and returns
/// them for the caller's side-by-side assertions.
fn side_by_side(name: &str, sc: &Scenario) -> (Outcome, Outcome) {
    let (theirs, ours) = run_both(sc);
    eprintln!("{name}:\n--- mergerfs 2.33:\n{theirs}--- ours:\n{ours}");
    (theirs, ours)
}

/// A deliberate difference: mergerfs 2.33 adds a directory that is already a branch a second
/// time (the pool then lists it twice); we refuse with EEXIST and change nothing, since one
/// directory twice in the union is never meant (and its nodes would be ambiguous).
#[test]
fn runtime_adding_a_branch_already_in_the_pool_side_by_side() {
    let (theirs, ours) = side_by_side(
        "add a branch twice",
        &Scenario {
            branches: &[br("16M", "RW", 0), br("16M", "RW", 0)],
            options: "category.create=ff,minfreespace=1M",
            setup: &|_| {},
            run: &|t, o| {
                set(t, o, "branches", "+>{0}");
                get(t, o, "branches");
                t.rec("create f", o.create("f", b"f")).ok();
            },
        },
    );
    assert_eq!(
        theirs.trace,
        [
            "set branches=+>{0}: Ok(())",
            "get branches: Ok(\"{0}=RW:{1}=RW:{0}=RW\")",
            "create f: Ok(())",
        ]
    );
    assert_eq!(
        ours.trace,
        [
            "set branches=+>{0}: EEXIST",
            "get branches: Ok(\"{0}=RW:{1}=RW\")",
            "create f: Ok(())",
        ]
    );
    assert_eq!(theirs.branches, ours.branches);
}

/// A deliberate difference: mergerfs 2.33 lets an edit remove every branch. The pool is then
/// empty and the mount serves nothing: without entry caching not even its control file
/// resolves any more (ENOENT), so no later edit can put a branch back. We refuse with EINVAL
/// and keep the branch.
#[test]
fn runtime_removing_the_last_branch_side_by_side() {
    for edit in ["->", "-<", "-{0}", "-*"] {
        let (theirs, ours) = side_by_side(
            &format!("remove the last branch ({edit})"),
            &Scenario {
                branches: &[br("16M", "RW", 0)],
                options: "category.create=ff,minfreespace=1M",
                setup: &|s| s.file(0, "f", "f"),
                run: &|t, o| {
                    set(t, o, "branches", edit);
                    get(t, o, "branches");
                    t.rec("read f", o.read("f")).ok();
                },
            },
        );
        assert_eq!(theirs.trace[0], format!("set branches={edit}: Ok(())"));
        assert_eq!(theirs.trace[1], "get branches: ENOENT");
        assert_eq!(theirs.trace[2], "read f: ENOENT");
        assert_eq!(
            ours.trace,
            [
                format!("set branches={edit}: EINVAL"),
                "get branches: Ok(\"{0}=RW\")".into(),
                "read f: Ok(\"f\")".into(),
            ]
        );
    }
}

/// A deliberate difference: mergerfs 2.33 adds a path that does not exist (it is a branch
/// that never holds anything); we open the directory when it is added, so a missing one is
/// ENOENT and changes nothing.
#[test]
fn runtime_adding_a_missing_directory_side_by_side() {
    let (theirs, ours) = side_by_side(
        "add a missing directory",
        &Scenario {
            branches: &[br("16M", "RW", 0)],
            options: "category.create=ff,minfreespace=1M",
            setup: &|_| {},
            run: &|t, o| {
                set(t, o, "branches", "+>{0}/missing");
                get(t, o, "branches");
            },
        },
    );
    assert_eq!(
        theirs.trace,
        [
            "set branches=+>{0}/missing: Ok(())",
            "get branches: Ok(\"{0}=RW:{0}/missing=RW\")",
        ]
    );
    assert_eq!(
        ours.trace,
        [
            "set branches=+>{0}/missing: ENOENT",
            "get branches: Ok(\"{0}=RW\")",
        ]
    );
}

/// A deliberate difference: mergerfs 2.33 accepts any name as a policy at run time and the
/// daemon then crashes on the next request that uses it (here, reading it back: the mount
/// answers ECONNABORTED, then ENOTCONN); we refuse an unknown policy with EINVAL and keep
/// the one in force.
#[test]
fn runtime_bad_policy_name_side_by_side() {
    for key in ["category.create", "func.mkdir"] {
        let (theirs, ours) = side_by_side(
            &format!("bad policy for {key}"),
            &Scenario {
                branches: &[br("16M", "RW", 0)],
                options: "category.create=ff,minfreespace=1M",
                setup: &|_| {},
                run: &|t, o| {
                    set(t, o, key, "bogus");
                    get(t, o, key);
                },
            },
        );
        assert_eq!(theirs.trace[0], format!("set {key}=bogus: Ok(())"));
        assert!(
            theirs.trace[1].ends_with("ECONNABORTED") || theirs.trace[1].ends_with("ENOTCONN"),
            "mergerfs 2.33 has died: {:?}",
            theirs.trace
        );
        assert_eq!(
            ours.trace,
            [
                format!("set {key}=bogus: EINVAL"),
                format!("get {key}: Ok(\"ff\")"),
            ]
        );
    }
}

/// A deliberate difference: mergerfs 2.33 lets `inodecalc` change at run time; ours is fixed
/// when the daemon starts (a guest's inode numbers must not change under it), so EROFS.
#[test]
fn runtime_inodecalc_side_by_side() {
    let (theirs, ours) = side_by_side(
        "inodecalc at run time",
        &Scenario {
            branches: &[br("16M", "RW", 0)],
            options: "category.create=ff,minfreespace=1M",
            setup: &|_| {},
            run: &|t, o| set(t, o, "inodecalc", "path-hash"),
        },
    );
    assert_eq!(theirs.trace, ["set inodecalc=path-hash: Ok(())"]);
    assert_eq!(ours.trace, ["set inodecalc=path-hash: EROFS"]);
}

/// `minfreespace` reads back in bytes, as from mergerfs 2.33, whatever unit it was set in (a
/// branch's own minimum in `branches` takes the largest exact unit, as in mergerfs).
#[test]
fn runtime_minfreespace_reads_in_bytes() {
    let (theirs, ours) = side_by_side(
        "minfreespace formats",
        &Scenario {
            branches: &[br("16M", "RW", 0)],
            options: "category.create=ff,minfreespace=1M",
            setup: &|_| {},
            run: &|t, o| {
                get(t, o, "minfreespace");
                for v in ["20M", "1536K", "12345", "1G"] {
                    set(t, o, "minfreespace", v);
                    get(t, o, "minfreespace");
                }
            },
        },
    );
    let values = |o: &Outcome| -> Vec<String> {
        o.trace
            .iter()
            .filter_map(|l| l.strip_prefix("get minfreespace: Ok(\""))
            .map(|v| v.trim_end_matches("\")").to_string())
            .collect()
    };
    assert_eq!(
        values(&theirs),
        ["1048576", "20971520", "1572864", "12345", "1073741824"]
    );
    assert_eq!(
        values(&ours),
        values(&theirs),
        "minfreespace reads in bytes, as mergerfs"
    );
}
