//! FUSE passthrough on the host mount (`passthrough.io`): the kernel reads and writes the
//! branch file itself, so the daemon's debug log shows no READ (opcode 15) or WRITE (16)
//! for such a file while the bytes still land on the branch; opens the kernel would refuse
//! beside a passthrough open still succeed; and what must be served by the daemon is (a
//! copy-on-write file not yet copied up, `nullrw`). Plus fsx with passthrough on.

use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;

use testkit::hostmount::HostMount;
use testkit::tmpfs::Tmpfs;

/// Whether the daemon's log shows a request with opcode `op` (15 READ, 16 WRITE).
fn served(m: &HostMount, op: u32) -> bool {
    m.log().contains(&format!(" opcode={op} "))
}

/// A debug-logged mount of `branches` with `-o minfreespace=1M,EXTRA`.
fn mount(branches: &[&Path], extra: &str) -> HostMount {
    let o = format!("minfreespace=1M,{extra}");
    HostMount::new(branches, &["-o", &o, "--log-level", "debug"])
}

#[test]
fn passthrough_reads_and_writes_never_reach_the_daemon() {
    let a = Tmpfs::new("64M");
    fs::write(a.path().join("old"), b"made on the branch").unwrap();
    let m = mount(&[a.path()], "passthrough.io=rw");
    let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    fs::write(m.path().join("new"), &data).unwrap();
    assert_eq!(fs::read(m.path().join("new")).unwrap(), data);
    assert_eq!(fs::read(a.path().join("new")).unwrap(), data);
    assert_eq!(
        fs::read(m.path().join("old")).unwrap(),
        b"made on the branch"
    );
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(m.path().join("old"))
        .unwrap();
    f.write_all(b", and more").unwrap();
    drop(f);
    assert_eq!(
        fs::read(a.path().join("old")).unwrap(),
        b"made on the branch, and more"
    );
    assert!(!served(&m, 15) && !served(&m, 16), "{}", m.log());
    assert!(m.log().contains("FUSE passthrough on"), "{}", m.log());
    // The same through a mount without passthrough: the log does show them.
    let b = Tmpfs::new("64M");
    let plain = mount(&[b.path()], "passthrough.io=off");
    fs::write(plain.path().join("new"), &data).unwrap();
    assert_eq!(fs::read(plain.path().join("new")).unwrap(), data);
    assert!(served(&plain, 15) && served(&plain, 16), "{}", plain.log());
}

/// `ro`: read-only opens pass through, writes reach the daemon; a node open either way
/// takes any further open (the kernel refuses, with EIO, an open that breaks its rules).
#[test]
fn read_only_mode_and_mixed_opens_of_one_file() {
    let a = Tmpfs::new("64M");
    fs::write(a.path().join("r"), b"read me").unwrap();
    let m = mount(&[a.path()], "passthrough=ro");
    assert_eq!(fs::read(m.path().join("r")).unwrap(), b"read me");
    assert!(!served(&m, 15), "{}", m.log());
    fs::write(m.path().join("w"), b"written").unwrap();
    assert!(served(&m, 16), "{}", m.log());
    assert_eq!(fs::read(a.path().join("w")).unwrap(), b"written");
    // Open for reading (passthrough), then for writing while it is open.
    let mut r = fs::File::open(m.path().join("r")).unwrap();
    let mut w = fs::OpenOptions::new()
        .write(true)
        .open(m.path().join("r"))
        .unwrap();
    w.write_all(b"READ").unwrap();
    drop(w);
    let mut s = String::new();
    r.read_to_string(&mut s).unwrap();
    assert_eq!(s, "READ me");
    drop(r);
    // Open for writing (through the daemon), then for reading while it is open.
    let mut w = fs::OpenOptions::new()
        .write(true)
        .open(m.path().join("w"))
        .unwrap();
    let s = fs::read_to_string(m.path().join("w")).unwrap();
    assert_eq!(s, "written");
    w.write_all(b"W").unwrap();
    drop(w);
    assert_eq!(fs::read(m.path().join("w")).unwrap(), b"Written");
}

/// A file on an RO branch with `cow` moves on its first write, so its reads are served by
/// the daemon; after the copy-up it passes through. `nullrw` drops the data as without
/// passthrough.
#[test]
fn copy_on_write_and_nullrw_are_served_by_the_daemon() {
    let (a, b) = (Tmpfs::new("64M"), Tmpfs::new("64M"));
    fs::write(a.path().join("base"), b"on the RO branch").unwrap();
    let ro = format!("{}=RO", a.path().display());
    let m = mount(
        &[Path::new(&ro), b.path()],
        "passthrough.io=rw,cow=true,category.create=ff",
    );
    assert_eq!(
        fs::read(m.path().join("base")).unwrap(),
        b"on the RO branch"
    );
    assert!(served(&m, 15), "{}", m.log());
    assert!(m.log().contains("copy-on-write"), "{}", m.log());
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(m.path().join("base"))
        .unwrap();
    f.write_all(b"!").unwrap();
    drop(f);
    assert_eq!(
        fs::read(b.path().join("base")).unwrap(),
        b"on the RO branch!"
    );
    assert_eq!(
        fs::read(a.path().join("base")).unwrap(),
        b"on the RO branch"
    );
    drop(m);

    let c = Tmpfs::new("64M");
    let m = mount(&[c.path()], "passthrough.io=rw,nullrw=true");
    fs::write(m.path().join("dropped"), b"nothing of this lands").unwrap();
    assert!(served(&m, 16), "{}", m.log());
    assert!(m.log().contains("nullrw"), "{}", m.log());
    assert_eq!(fs::read(c.path().join("dropped")).unwrap(), b"");
}

#[test]
fn fsx_with_passthrough_ends_a_ok() {
    let a = Tmpfs::new("64M");
    let m = HostMount::new(&[a.path()], &["-o", "minfreespace=1M,passthrough.io=rw"]);
    let artifacts = tempfile::tempdir().unwrap();
    let all = Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu/fsx-all.toml");
    for (mix, config) in [("default", None), ("all", Some(&all))] {
        let mut cmd = Command::new(testkit::bin::tool("fsx"));
        cmd.args(["-N", crate::fsx::OPS, "-S", "7", "-q", "-P"])
            .arg(artifacts.path())
            .current_dir(m.path());
        if let Some(c) = config {
            cmd.arg("-f").arg(c);
        }
        let out = cmd.arg(format!("fsx-{mix}")).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("A-OK"),
            "fsx {mix} with passthrough: {}\n{text}\n{}",
            out.status,
            m.log()
        );
    }
    assert!(m.log().contains("FUSE passthrough on"), "{}", m.log());
}
