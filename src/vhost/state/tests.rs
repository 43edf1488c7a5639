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

/// A version-2 body labelled version 1 (the bug of issue 43 the other way round) is refused,
/// not half read: the body must be used up.
#[test]
fn a_body_of_another_version_is_refused() {
    let mut v2_as_v1 = encode(sample());
    v2_as_v1[8..12].copy_from_slice(&1u32.to_le_bytes());
    assert!(
        matches!(decode(&v2_as_v1), Err(StateError::Body(_))),
        "{:?}",
        decode(&v2_as_v1)
    );
}

/// A peer that reads only version 1 gets version 1 when the session fits, with nothing lost,
/// and a refusal naming what does not fit otherwise.
#[test]
fn an_older_peer_gets_the_version_it_reads() {
    let s = sample();
    let v1 = encode_for(s.clone(), Versions::FIRST).unwrap();
    assert_eq!(version_of(&v1), Some(1));
    assert_eq!(decode(&v1).unwrap(), s);
    assert!(v1.len() < encode(s.clone()).len());

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
    let bytes = encode_for(sample(), Versions::FIRST).unwrap();
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
