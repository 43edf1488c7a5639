//! O_DIRECT through the host mount onto an ext4 branch (an image on a loop device, which
//! enforces O_DIRECT's alignment as a disk does; tmpfs ignores it): each `dd` with
//! `oflag=direct` or `iflag=direct` ends as the same `dd` on the branch itself, with the same
//! status, error and byte count, and leaves the same bytes: aligned writes and reads go
//! through (the daemon places a WRITE's payload and a READ's data on a page), unaligned ones
//! fail with EINVAL as on the branch.

use std::path::Path;
use std::process::Command;

use testkit::ext4::Ext4;
use testkit::hostmount::HostMount;

/// How a `dd` ended: success, its error (`Invalid argument`) if any, the bytes it copied.
#[derive(Debug, PartialEq, Eq)]
struct Ended {
    ok: bool,
    error: Option<String>,
    copied: u64,
}

/// Runs `dd` with `args` in `dir` (relative paths).
fn dd(dir: &Path, args: &[&str]) -> Ended {
    let out = Command::new("dd")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let error = err
        .lines()
        .find(|l| l.starts_with("dd: "))
        .and_then(|l| l.rsplit(": ").next())
        .map(str::to_owned);
    let copied = err
        .lines()
        .find(|l| l.contains(" copied, "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("dd {args:?}: no byte count in {err}"));
    Ended {
        ok: out.status.success(),
        error,
        copied,
    }
}

#[test]
fn o_direct_on_an_ext4_branch_behaves_as_on_the_branch() {
    let e = Ext4::new(64);
    let native = e.path().join("native");
    std::fs::create_dir(&native).unwrap();
    let m = HostMount::new(&[e.path()], &["-o", "minfreespace=1M"]);
    let src = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i * 31 % 253) as u8).collect();
    std::fs::write(src.path().join("data"), &data).unwrap();
    let input = format!("if={}", src.path().join("data").display());
    let rows: &[&[&str]] = &[
        // Aligned writes: whole pages, 512-byte sectors, 1 MiB (two WRITEs of max_write).
        &[&input, "of=pages", "bs=4096", "count=16", "oflag=direct"],
        &[&input, "of=sectors", "bs=512", "count=7", "oflag=direct"],
        &[
            &input,
            "of=pages",
            "bs=512",
            "count=3",
            "seek=5",
            "oflag=direct",
            "conv=notrunc",
        ],
        &[&input, "of=big", "bs=1M", "count=3", "oflag=direct"],
        // Unaligned: the branch refuses them (EINVAL), so must the mount.
        &[&input, "of=odd", "bs=1000", "count=1", "oflag=direct"],
        &[
            &input,
            "of=pages",
            "bs=4096",
            "count=1",
            "seek=1",
            "oflag=direct,seek_bytes",
            "conv=notrunc",
        ],
        // Reads: aligned through, unaligned EINVAL.
        &["if=big", "of=/dev/null", "bs=1M", "iflag=direct"],
        &[
            "if=pages",
            "of=/dev/null",
            "bs=512",
            "skip=3",
            "iflag=direct",
        ],
        &["if=pages", "of=/dev/null", "bs=1000", "iflag=direct"],
    ];
    let mut ended = Vec::new();
    for args in rows {
        let on_branch = dd(&native, args);
        let through = dd(m.path(), args);
        assert_eq!(through, on_branch, "dd {args:?}\n{}", m.log());
        ended.push(through);
    }
    // The branch does enforce O_DIRECT: aligned rows pass, unaligned ones get EINVAL.
    let einval = Some("Invalid argument");
    for (i, r) in ended.iter().enumerate() {
        let unaligned = matches!(i, 4 | 5 | 8);
        assert_eq!(r.ok, !unaligned, "dd {:?}: {r:?}", rows[i]);
        assert_eq!(
            r.error.as_deref(),
            einval.filter(|_| unaligned),
            "dd {:?}",
            rows[i]
        );
    }
    assert_eq!(ended[3].copied, 3 << 20);
    for name in ["pages", "sectors", "big", "odd"] {
        let (a, b) = (
            std::fs::read(native.join(name)),
            std::fs::read(e.path().join(name)),
        );
        assert_eq!(a.unwrap(), b.unwrap(), "{name} differs");
    }
    // What the mount reads back with O_DIRECT is what the branch holds.
    let back = m.path().join("back");
    let r = dd(
        m.path(),
        &[
            "if=big",
            &format!("of={}", back.display()),
            "bs=64k",
            "iflag=direct",
        ],
    );
    assert!(r.ok && r.copied == 3 << 20, "{r:?}");
    assert_eq!(std::fs::read(&back).unwrap(), &data[..]);
}

/// What the mount cannot carry: the alignment of the caller's memory. The kernel copies an
/// O_DIRECT write's data into the daemon's buffer, whose payload is page-aligned whatever
/// the caller's buffer was, so a write from unaligned memory at an aligned offset and size
/// goes through where the branch itself refuses it (EINVAL).
#[test]
fn the_callers_memory_alignment_is_not_carried() {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let e = Ext4::new(32);
    let m = HostMount::new(&[e.path()], &["-o", "minfreespace=1M"]);
    let mut mem = vec![7u8; 3 * 4096];
    let page = mem.as_ptr() as usize % 4096;
    let start = (4096 - page) % 4096 + 1;
    let unaligned = &mut mem[start..start + 4096];
    let write = |dir: &Path| {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(dir.join("u"))
            .unwrap();
        testkit::errno::result(f.write_at(unaligned, 0))
    };
    assert_eq!(write(e.path()), Err(libc::EINVAL));
    assert_eq!(write(m.path()), Ok(4096));
}
