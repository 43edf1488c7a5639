//! The device state's promise, checked: every version decodes, V2 is written byte for byte as
//! before, a peer gets the newest version it reads, and what cannot be read is refused.

use super::*;
use crate::fs::session::{Locate, LockImage, NodeImage};

fn sample() -> DeviceState {
    DeviceState {
        max_pages: 256,
        max_write: 1 << 20,
        session: SessionImage {
            branches: 2,
            nodes: vec![NodeImage {
                id: 1,
                lookups: 3,
                names: vec![],
                is_dir: true,
                locate: Locate::Unbound,
                verify: None,
                stamp: None,
            }],
            next_node: 2,
            locks: vec![LockImage::Flock {
                inode: 1,
                fh: 7,
                write: true,
                pid: 42,
            }],
            ..Default::default()
        },
    }
}

#[test]
fn round_trip() {
    let s = sample();
    let bytes = encode(s.clone());
    assert_eq!(version_of(&bytes), Some(VERSION));
    assert_eq!(decode(&bytes).unwrap(), s);
}

#[test]
fn refuses_what_it_does_not_understand() {
    let good = encode(sample());
    assert_eq!(decode(b"virtiofsd state"), Err(StateError::NotOurs));
    assert_eq!(decode(&good[..4]), Err(StateError::NotOurs));
    let mut newer = good.clone();
    newer[8..12].copy_from_slice(&3u32.to_le_bytes());
    let e = decode(&newer).unwrap_err();
    assert_eq!(e, StateError::Version { found: 3 });
    assert_eq!(
        e.to_string(),
        "device state version 3 is not one this daemon reads (it reads 1 to 2); upgrade the destination"
    );
    assert!(matches!(
        decode(&good[..good.len() - 1]),
        Err(StateError::Truncated { .. })
    ));
    let mut longer = good.clone();
    longer.push(0);
    assert_eq!(decode(&longer), Err(StateError::Trailing(1)));
    let mut garbled = good.clone();
    let n = garbled.len();
    garbled[20..n].fill(0xff);
    assert!(matches!(decode(&garbled), Err(StateError::Body(_))));
}

/// 1e60aa4's version-1 layout, as that daemon framed it.
fn strict_v1(s: DeviceState) -> Vec<u8> {
    let body = v1::DeviceState {
        max_pages: s.max_pages,
        max_write: s.max_write,
        session: v1::SessionImage::try_from(s.session).unwrap(),
    };
    framed(1, &body)
}

/// The body of one version under another's number: a version-2 body labelled 1 is what the
/// builds from 8e7487e to the fix wrote, and loads whole; a version-1 body labelled 2 is
/// refused, not half read (a body must be used up).
#[test]
fn bodies_under_another_number() {
    let s = sample();
    let mut v2_as_v1 = encode(s.clone());
    v2_as_v1[8..12].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(decode(&v2_as_v1).unwrap(), s);
    let mut v1_as_v2 = strict_v1(s.clone());
    v1_as_v2[8..12].copy_from_slice(&2u32.to_le_bytes());
    assert!(
        matches!(decode(&v1_as_v2), Err(StateError::Body(_))),
        "{:?}",
        decode(&v1_as_v2)
    );
    // Version 1 with one byte too many fits none of its bodies: 1e60aa4's layout's error.
    let mut longer = strict_v1(s);
    longer.push(0);
    let len = (longer.len() - 20) as u64;
    longer[12..20].copy_from_slice(&len.to_le_bytes());
    assert_eq!(
        decode(&longer),
        Err(StateError::Body("1 bytes left after the session".into()))
    );
}

/// A peer that reads only version 1 gets version 1 when the session fits, with nothing lost,
/// in a body both 1e60aa4's daemon and the builds after it read; a refusal naming what does
/// not fit otherwise.
#[test]
fn an_older_peer_gets_the_version_it_reads() {
    let s = sample();
    let v1 = encode_for(s.clone(), Versions::FIRST).unwrap();
    assert_eq!(version_of(&v1), Some(1));
    assert_eq!(decode(&v1).unwrap(), s);
    // 1e60aa4's reader: postcard's from_bytes, the rest of the body left alone.
    let old: v1::DeviceState = postcard::from_bytes(&v1[20..]).unwrap();
    assert_eq!(DeviceState::from(old), s);
    // The builds from 8e7487e read it whole, as their own layout (version 2's).
    let interim: v2::DeviceState = postcard::from_bytes(&v1[20..]).unwrap();
    assert_eq!(DeviceState::from(interim), s);

    let mut acl = s.clone();
    acl.session.posix_acl = true;
    let e = encode_for(acl, Versions::FIRST).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the other daemon reads device state 1 to 1, this one writes 1 to 2: version 1 has no room for negotiated POSIX ACLs; upgrade the other daemon"
    );
    let mut edited = s.clone();
    edited.session.edited_branches = vec![b"/a".to_vec()];
    assert!(matches!(
        encode_for(edited, Versions::FIRST),
        Err(StateError::PeerTooOld { .. })
    ));
    let future = Versions {
        oldest: 3,
        newest: 9,
    };
    assert!(matches!(
        encode_for(s.clone(), future),
        Err(StateError::PeerTooOld { .. })
    ));
    // A newer peer that still reads 2 gets 2.
    let newer = Versions {
        oldest: 1,
        newest: 9,
    };
    assert_eq!(version_of(&encode_for(s, newer).unwrap()), Some(2));
}

/// Version 1's layout, by hand from postcard's rules (varints, enum variant indices, a
/// `u8` per byte, `Option` as 0/1): the shape 1e60aa4 wrote.
#[test]
fn version_1_is_the_layout_1e60aa4_wrote() {
    let bytes = strict_v1(sample());
    let body = [
        0x80, 0x02, // max_pages 256
        0x80, 0x80, 0x40, // max_write 1 MiB
        2,    // branches
        1,    // one node
        1, 3, 0, 1, 0, 0, 0, // id, lookups, no names, dir, Unbound, no verify, no stamp
        2, // next_node
        0, 0, // no open files, next_handle
        1, 1, 1, 7, 1, 42, // one lock: Flock { inode 1, fh 7, write, pid 42 }
        0, 0, 0, // no copied_up, no writeback, no submounts
    ];
    let mut want = b"UVFSDEV\0".to_vec();
    want.extend_from_slice(&1u32.to_le_bytes());
    want.extend_from_slice(&(body.len() as u64).to_le_bytes());
    want.extend_from_slice(&body);
    assert_eq!(bytes, want);
}

/// Written by the daemon of commit 1e60aa4 (the last to write version 1) over a busy session:
/// `scripts/make-golden-session.sh` (see `tests/golden/README.md`).
const GOLDEN_V1: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/golden/device-state-v1.bin"
));
/// Written by this daemon (version 2) over the same busy session, with POSIX ACLs, security
/// contexts and idmap negotiated and the branch set edited.
const GOLDEN_V2: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/golden/device-state-v2.bin"
));

/// What both golden sessions hold (the generator's busy session): root, `dir`, `dir/a`,
/// `dir/b`, `dir/sub`, and `dir/hl` = `dir/hl2` (one node, two names); `hl` open read-write,
/// copied up and POSIX-locked; `a` open read-only with an flock; `dir` open and read.
fn check_busy(s: &DeviceState) {
    use crate::fs::session::{CopiedUpImage, OpenImage};
    let img = &s.session;
    assert!(s.max_pages > 0 && s.max_write > 0);
    assert_eq!(img.nodes.len(), 6, "{:?}", img.nodes);
    let node = |id: u64| img.nodes.iter().find(|n| n.id == id).expect("node");
    let (dir, a, hl) = (2, 3, 6);
    assert_eq!(node(1).locate, Locate::Unbound);
    assert!(node(dir).is_dir);
    assert_eq!(node(dir).names, vec![(1, b"dir".to_vec())]);
    assert_eq!(node(a).names, vec![(dir, b"a".to_vec())]);
    assert_eq!(
        node(hl).names,
        vec![(dir, b"hl".to_vec()), (dir, b"hl2".to_vec())]
    );
    assert_eq!(node(hl).lookups, 2);
    assert!(matches!(node(hl).locate, Locate::Path { branch: 0 }));
    assert_eq!(img.next_node, 7);
    assert_eq!(img.open.len(), 3);
    assert!(img.open.contains(&OpenImage::File {
        fh: 1,
        inode: hl,
        flags: libc::O_RDWR as u32,
    }));
    assert!(img.open.contains(&OpenImage::File {
        fh: 2,
        inode: a,
        flags: libc::O_RDONLY as u32,
    }));
    let listing = img
        .open
        .iter()
        .find_map(|o| match o {
            OpenImage::Dir {
                fh: 3,
                inode,
                listing,
            } if *inode == dir => listing.as_ref(),
            _ => None,
        })
        .expect("dir open and read");
    let mut names: Vec<&[u8]> = listing.iter().map(|e| e.name.as_slice()).collect();
    names.sort();
    assert_eq!(names, [&b"."[..], b"..", b"a", b"b", b"hl", b"hl2", b"sub"]);
    assert_eq!(img.next_handle, 4);
    assert_eq!(img.locks.len(), 2);
    assert!(img.locks.iter().any(|l| matches!(
        l,
        LockImage::Posix { inode, owner: 0xa11ce, start: 0, end: 99, write: true, .. } if *inode == hl
    )));
    assert!(img.locks.iter().any(|l| matches!(
        l,
        LockImage::Flock { inode, fh: 2, write: true, .. } if *inode == a
    )));
    assert!(matches!(
        img.copied_up.as_slice(),
        [CopiedUpImage { branch: 0, path, .. }] if path == b"dir/hl"
    ));
}

#[test]
fn the_version_1_golden_of_1e60aa4_decodes_with_the_new_fields_defaulted() {
    assert_eq!(version_of(GOLDEN_V1), Some(1));
    let s = decode(GOLDEN_V1).unwrap();
    check_busy(&s);
    assert_eq!(s.session.branches, 2);
    assert!(!s.session.posix_acl && !s.session.security_ctx && !s.session.idmap);
    assert!(s.session.edited_branches.is_empty());
    // Version 1 is frozen too: 1e60aa4's layout written again byte for byte.
    assert_eq!(strict_v1(s.clone()), GOLDEN_V1);
    // What a peer that reads only version 1 gets, 1e60aa4's daemon reads as it read this.
    let compat = encode_for(s, Versions::FIRST).unwrap();
    let old = |b: &[u8]| postcard::from_bytes::<v1::DeviceState>(&b[20..]).unwrap();
    assert_eq!(old(&compat), old(GOLDEN_V1));
}

#[test]
fn the_version_2_golden_decodes_and_is_written_again_byte_for_byte() {
    assert_eq!(version_of(GOLDEN_V2), Some(2));
    let s = decode(GOLDEN_V2).unwrap();
    check_busy(&s);
    let img = &s.session;
    assert_eq!(img.branches, 3);
    assert!(img.posix_acl && img.security_ctx && img.idmap);
    let tails: Vec<&str> = img
        .edited_branches
        .iter()
        .map(|p| std::str::from_utf8(p).unwrap().rsplit('/').next().unwrap())
        .collect();
    assert_eq!(tails, ["upper", "lower", "extra"]);
    // A change to version 2's layout without a new version fails here.
    assert_eq!(encode(s.clone()), GOLDEN_V2);
    // It does not fit version 1.
    assert!(matches!(
        encode_for(s, Versions::FIRST),
        Err(StateError::PeerTooOld { .. })
    ));
}

/// A peer that reads 1 and 2 gets version 2 of the version-1 golden, with nothing changed.
#[test]
fn the_version_1_golden_moves_on_as_version_2() {
    let s = decode(GOLDEN_V1).unwrap();
    let v2 = encode(s.clone());
    assert_eq!(version_of(&v2), Some(2));
    assert_eq!(decode(&v2).unwrap(), s);
}

/// Written by the daemon of commit f782537 (the last of the twelve-field bodies, 592a8b6 on)
/// with POSIX ACLs, security contexts and idmap negotiated, under version 1's number.
const GOLDEN_V1_F782537: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/golden/device-state-v1-f782537.bin"
));
/// Written by the daemon of commit ebf1e6c (the last before the fix: version 2's body under
/// version 1's number) with those and a branch edit.
const GOLDEN_V1_EBF1E6C: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/golden/device-state-v1-ebf1e6c.bin"
));

/// The sessions of the builds that wrote longer bodies under version 1's number load whole,
/// their additions kept.
#[test]
fn the_longer_version_1_bodies_of_later_builds_load_whole() {
    assert_eq!(version_of(GOLDEN_V1_F782537), Some(1));
    let s = decode(GOLDEN_V1_F782537).unwrap();
    check_busy(&s);
    assert_eq!(s.session.branches, 2);
    assert!(s.session.posix_acl && s.session.security_ctx && s.session.idmap);
    assert!(s.session.edited_branches.is_empty());
    // Neither 1e60aa4's layout nor version 2's uses that body up.
    let b = &GOLDEN_V1_F782537[20..];
    assert!(body::<v1::DeviceState>(b).is_err() && body::<v2::DeviceState>(b).is_err());

    assert_eq!(version_of(GOLDEN_V1_EBF1E6C), Some(1));
    let s = decode(GOLDEN_V1_EBF1E6C).unwrap();
    check_busy(&s);
    assert_eq!(s.session.branches, 3);
    assert!(s.session.posix_acl && s.session.security_ctx && s.session.idmap);
    assert_eq!(s.session.edited_branches.len(), 3);
    // Its body is version 2's, byte for byte.
    assert_eq!(encode(s)[20..], GOLDEN_V1_EBF1E6C[20..]);
}
