//! The upgrade channel's frames, pinned: what the daemon of commit 1e60aa4 sent (its hello as
//! a new daemon, its handover and refusal as the running one) decodes here and is written
//! again byte for byte, and so is this daemon's hello with its tail. See `tests/golden/`.

use super::*;
use crate::fuse::state;

/// `tests/golden/NAME`.
macro_rules! golden {
    ($name:literal) => {
        include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/", $name)).as_slice()
    };
}

/// 1e60aa4's hello, as a new daemon: the hello alone.
const HELLO_1E60AA4: &[u8] = golden!("upgrade-hello-v1.bin");
/// This daemon's hello: the hello, then its [`HelloExt`].
const HELLO_OURS: &[u8] = golden!("upgrade-hello-v2.bin");

#[test]
fn the_hello_of_1e60aa4_is_a_reader_of_version_1() {
    let h = parse_hello(HELLO_1E60AA4).unwrap().unwrap();
    assert_eq!(h.version, 1);
    assert_eq!(h.reads, Versions::FIRST);
    assert!(h.pid > 1);
}

#[test]
fn this_daemons_hello_says_what_it_reads_and_is_frozen() {
    let h = parse_hello(HELLO_OURS).unwrap().unwrap();
    assert_eq!((h.version, h.reads), (1, Versions::OURS));
    assert_eq!(hello_body(h.pid), HELLO_OURS);
    // 1e60aa4's decoder (postcard's from_bytes, the tail left alone) reads the same hello.
    let old: ToOld = postcard::from_bytes(HELLO_OURS).unwrap();
    assert_eq!(
        old,
        ToOld::Hello {
            version: 1,
            pid: h.pid
        }
    );
    // A later daemon's longer tail is left alone too.
    let mut later = HELLO_OURS.to_vec();
    later.extend_from_slice(&[7, 7, 7]);
    assert_eq!(parse_hello(&later).unwrap().unwrap().reads, Versions::OURS);
    // A tail that is not a HelloExt is an error, not a guess.
    assert!(parse_hello(&HELLO_OURS[..HELLO_OURS.len() - 1]).is_err());
}

#[test]
fn refusals_of_both_daemons_are_one_frozen_frame() {
    for bytes in [
        golden!("upgrade-refused-v1.bin"),
        golden!("upgrade-refused-v2.bin"),
    ] {
        let msg: ToNew = postcard::from_bytes(bytes).unwrap();
        let ToNew::Refused(why) = &msg else {
            panic!("{msg:?}")
        };
        assert_eq!(why, "upgrade channel version 99, this daemon speaks 1");
        assert_eq!(postcard::to_stdvec(&msg).unwrap(), bytes);
    }
}

/// The handover of 1e60aa4 (device state 1) and of this daemon to a reader of version 2: the
/// frame, the front-end image in it included, is written again byte for byte, and the session
/// in it is the one the golden device state holds (the same busy session, saved again).
#[test]
fn handovers_are_frozen_and_carry_the_golden_session() {
    for (bytes, version, state_golden) in [
        (
            golden!("upgrade-handover-v1.bin"),
            1,
            golden!("device-state-v1.bin"),
        ),
        (
            golden!("upgrade-handover-v2.bin"),
            2,
            golden!("device-state-v2.bin"),
        ),
    ] {
        let msg: ToNew = postcard::from_bytes(bytes).unwrap();
        assert_eq!(postcard::to_stdvec(&msg).unwrap(), bytes);
        let ToNew::Handover(h) = msg else {
            panic!("{msg:?}")
        };
        assert!(h.has_listener && h.has_pid_file);
        // Its pid as it sees itself (1 in the namespace sandbox).
        assert_ne!(h.pid, 0);
        // hiprio and one request queue, both running, each with its position.
        assert_eq!(h.frontend.rings().len(), 2);
        assert!(h.frontend.rings().iter().all(|r| r.running()));
        assert_eq!(h.bases.len(), 2);
        assert!(h.bases.iter().all(Option::is_some));
        assert_eq!(state::version_of(&h.session), Some(version));
        let moved = state::decode(&h.session).unwrap();
        assert_eq!(moved, state::decode(state_golden).unwrap());
    }
}
