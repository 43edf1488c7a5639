//! The inode numbers the guest sees (`inodecalc=`): pure functions of the union path or the
//! host device and inode.

use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;

use super::options::InodeCalc;

/// SipHash-1-3 (zero keys, as `DefaultHasher::new()`) of `bytes` in one pass, kept clear of 0
/// (invalid) and 1 (the root's number).
///
/// The numbers are those of hashing the tuples `("path", rel)` and `("devino", dev, ino)`
/// with `Hash` (what earlier versions did, field by field): the hasher streams, so the same
/// bytes in one write give the same hash, with a fraction of the per-field work. A guest
/// keeps seeing the numbers it saw before an upgrade.
fn hash_ino(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(bytes);
    h.finish().max(2)
}

/// `("path", rel)` as `Hash` feeds it to a hasher: the str, its 0xff terminator, the slice's
/// length prefix, the bytes.
fn path_ino(rel: &[u8]) -> u64 {
    let mut buf: smallvec::SmallVec<[u8; 256]> = smallvec::SmallVec::new();
    buf.extend_from_slice(b"path\xff");
    buf.extend_from_slice(&rel.len().to_ne_bytes());
    buf.extend_from_slice(rel);
    hash_ino(&buf)
}

/// `("devino", dev, ino)` as `Hash` feeds it to a hasher.
fn devino_ino(dev: u64, ino: u64) -> u64 {
    let mut buf = [0u8; 23];
    buf[..7].copy_from_slice(b"devino\xff");
    buf[7..15].copy_from_slice(&dev.to_ne_bytes());
    buf[15..].copy_from_slice(&ino.to_ne_bytes());
    hash_ino(&buf)
}

/// The union inode number of an entry under `calc` (`inodecalc=`): by union path, by host
/// device and inode, or (hybrid, the default) directories by path and the rest by dev/ino, so
/// a directory merged across branches keeps one number. The root is always 1. `rel` is only
/// read by the path-based modes (and for directories under hybrid-hash).
pub(crate) fn ino_for(calc: InodeCalc, is_dir: bool, rel: &[u8], dev: u64, ino: u64) -> u64 {
    if rel == b"." {
        return 1;
    }
    let by_path = || path_ino(rel);
    let by_devino = || devino_ino(dev, ino);
    let fold32 = |h: u64| ((h >> 32) ^ (h & 0xffff_ffff)).max(2);
    match calc {
        InodeCalc::Passthrough => ino,
        InodeCalc::PathHash => by_path(),
        InodeCalc::PathHash32 => fold32(by_path()),
        InodeCalc::DevinoHash => by_devino(),
        InodeCalc::DevinoHash32 => fold32(by_devino()),
        InodeCalc::HybridHash if is_dir => by_path(),
        InodeCalc::HybridHash => by_devino(),
        InodeCalc::HybridHash32 if is_dir => fold32(by_path()),
        InodeCalc::HybridHash32 => fold32(by_devino()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass hashes are the field-by-field ones earlier versions showed the guest.
    #[test]
    fn inode_numbers_are_those_of_hashing_the_fields() {
        use std::hash::Hash;
        let fields = |parts: &dyn Fn(&mut DefaultHasher)| {
            let mut h = DefaultHasher::new();
            parts(&mut h);
            h.finish().max(2)
        };
        for (dev, ino) in [(0, 0), (1, 2), (0x803, 123_456_789), (u64::MAX, 7)] {
            let want = fields(&|h| ("devino", dev, ino).hash(h));
            assert_eq!(devino_ino(dev, ino), want, "{dev} {ino}");
        }
        let long = vec![b'x'; 300];
        for rel in [&b"a"[..], b"a/b/c", b"", &long] {
            let want = fields(&|h| ("path", rel).hash(h));
            assert_eq!(path_ino(rel), want, "{rel:?}");
        }
    }
}
