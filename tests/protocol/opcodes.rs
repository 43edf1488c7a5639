//! The opcodes the daemon serves itself beyond fuse-backend-rs, through its socket: SYNCFS,
//! STATX (birth time, the attributes GETATTR gives, and the open-file form) and
//! COPY_FILE_RANGE (within a branch, and from a read-only tmpfs branch to a read-write one,
//! which the host kernel cannot copy between).

use std::mem::size_of;

use testkit::daemon::Daemon;
use testkit::tmpfs;
use union_virtiofsd::sys::abi::fuse::{StatxIn, StatxOut, SyncfsIn};
use vm_memory::ByteValued;
use vufs_frontend::fuse_abi::{CopyFileRangeIn, Opcode, WriteOut, GETATTR_FH};
use vufs_frontend::{ops, Device, FuseRequest};

const SYNCFS: u32 = 50;
const STATX: u32 = 52;

fn statx(dev: &mut Device, node: u64, fh: Option<u64>) -> StatxOut {
    let a = StatxIn {
        getattr_flags: if fh.is_some() { GETATTR_FH } else { 0 },
        fh: fh.unwrap_or(0),
        sx_mask: (libc::STATX_BASIC_STATS | libc::STATX_BTIME),
        ..Default::default()
    };
    let req = FuseRequest::new(STATX, node, a.as_slice().to_vec(), size_of::<StatxOut>());
    dev.send(&req).unwrap().parse::<StatxOut>().unwrap()
}

#[test]
fn syncfs_and_statx() {
    let d = Daemon::start(&["a"], &[]);
    std::fs::write(d.branches[0].join("f"), "hello").unwrap();
    let mut dev = d.session();
    let req = FuseRequest::new(
        SYNCFS,
        ops::ROOT_ID,
        SyncfsIn::default().as_slice().to_vec(),
        0,
    );
    assert_eq!(dev.send(&req).unwrap().errno(), None);
    // A SYNCFS without its argument is malformed: an errno, and the daemon serves on.
    let short = FuseRequest::new(SYNCFS, ops::ROOT_ID, Vec::new(), 0);
    assert!(dev.send(&short).unwrap().errno().is_some());

    let e = dev.lookup(ops::ROOT_ID, b"f").unwrap();
    let sx = statx(&mut dev, e.nodeid, None).stat;
    assert_eq!(sx.size, 5);
    assert_eq!(
        u64::from(sx.mode) & u64::from(libc::S_IFMT),
        u64::from(libc::S_IFREG)
    );
    assert_eq!(sx.ino, e.attr.ino);
    assert_eq!(sx.nlink, 1);
    assert_eq!(
        (sx.mtime.tv_sec, sx.mtime.tv_nsec),
        (e.attr.mtime as i64, e.attr.mtimensec)
    );
    // The host's birth time of the file, where its filesystem records one.
    let host = std::fs::metadata(d.branches[0].join("f")).unwrap();
    match host.created() {
        Ok(t) => {
            let t = t.duration_since(std::time::UNIX_EPOCH).unwrap();
            assert_ne!(sx.mask & libc::STATX_BTIME, 0);
            assert_eq!(
                (sx.btime.tv_sec as u64, sx.btime.tv_nsec),
                (t.as_secs(), t.subsec_nanos())
            );
        }
        Err(_) => assert_eq!(sx.mask & libc::STATX_BTIME, 0),
    }
    // Through an open file; and an unknown node is an error, not a crash.
    let o = dev.open(e.nodeid, libc::O_RDONLY as u32).unwrap();
    assert_eq!(statx(&mut dev, e.nodeid, Some(o.fh)).stat.size, 5);
    let a = StatxIn::default();
    let req = FuseRequest::new(
        STATX,
        0xdead_beef,
        a.as_slice().to_vec(),
        size_of::<StatxOut>(),
    );
    assert!(dev.send(&req).unwrap().errno().is_some());
}

fn copy_range(
    dev: &mut Device,
    src: (u64, u64, u64),
    dst: (u64, u64, u64),
    len: u64,
) -> Result<u32, i32> {
    let a = CopyFileRangeIn {
        fh_in: src.1,
        offset_in: src.2,
        nodeid_out: dst.0,
        fh_out: dst.1,
        offset_out: dst.2,
        len,
        flags: 0,
    };
    let req = FuseRequest::new(
        Opcode::CopyFileRange as u32,
        src.0,
        a.as_slice().to_vec(),
        size_of::<WriteOut>(),
    );
    let r = dev.send(&req).unwrap();
    match r.errno() {
        Some(e) => Err(e),
        None => Ok(r.parse::<WriteOut>().unwrap().size),
    }
}

#[test]
fn copy_file_range_within_and_across_branch_filesystems() {
    let (ro, rw) = (tmpfs::Tmpfs::new("16M"), tmpfs::Tmpfs::new("16M"));
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(ro.path().join("src"), &data).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let specs = [
        format!("{}=RW", rw.path().display()),
        format!("{}=RO", ro.path().display()),
    ];
    let d = Daemon::start_in(
        tmp,
        vec![rw.path().to_owned(), ro.path().to_owned()],
        &specs,
        &["-o", "minfreespace=1M"],
    );
    let mut dev = d.session();
    let src = dev.lookup(ops::ROOT_ID, b"src").unwrap();
    let sfh = dev.open(src.nodeid, libc::O_RDONLY as u32).unwrap().fh;
    let (dst, o) = dev
        .create(ops::ROOT_ID, b"dst", 0o644, libc::O_RDWR as u32)
        .unwrap();
    // Across the two tmpfs mounts (the host kernel answers EXDEV: the daemon copies).
    let n = copy_range(
        &mut dev,
        (src.nodeid, sfh, 0),
        (dst.nodeid, o.fh, 0),
        data.len() as u64,
    )
    .unwrap();
    assert_eq!(n as usize, data.len());
    assert_eq!(std::fs::read(rw.path().join("dst")).unwrap(), data);
    // Within one filesystem, at offsets, past the end of the source (short copy).
    let n = copy_range(
        &mut dev,
        (dst.nodeid, o.fh, 1000),
        (dst.nodeid, o.fh, 3_000_000),
        5000,
    )
    .unwrap();
    assert_eq!(n, 5000);
    let got = std::fs::read(rw.path().join("dst")).unwrap();
    assert_eq!(&got[3_000_000..], &data[1000..6000]);
    let n = copy_range(
        &mut dev,
        (src.nodeid, sfh, 2_999_990),
        (dst.nodeid, o.fh, 0),
        100,
    )
    .unwrap();
    assert_eq!(n, 10);
    // Into a read-only handle, or with a handle of another node: errors.
    assert_eq!(
        copy_range(&mut dev, (dst.nodeid, o.fh, 0), (src.nodeid, sfh, 0), 10),
        Err(libc::EBADF)
    );
    assert_eq!(
        copy_range(&mut dev, (src.nodeid, o.fh, 0), (dst.nodeid, o.fh, 0), 10),
        Err(libc::EBADF)
    );
    // The read-only branch is untouched.
    assert_eq!(std::fs::read(ro.path().join("src")).unwrap(), data);
}

const TMPFILE: u32 = 51;

#[test]
fn tmpfile_then_link_names_it() {
    use vufs_frontend::fuse_abi::{CreateIn, EntryOut, LinkIn, OpenOut};
    let d = Daemon::start(&["a"], &[]);
    let mut dev = d.session();
    let a = CreateIn {
        flags: libc::O_RDWR as u32,
        mode: 0o640,
        umask: 0,
        fuse_flags: 0,
    };
    let mut args = a.as_slice().to_vec();
    args.extend_from_slice(b"/\0");
    let req = FuseRequest::new(
        TMPFILE,
        ops::ROOT_ID,
        args,
        size_of::<EntryOut>() + size_of::<OpenOut>(),
    );
    let reply = dev.send(&req).unwrap();
    let e: EntryOut = reply.parse().unwrap();
    let o = OpenOut::from_slice(&reply.payload().unwrap()[size_of::<EntryOut>()..])
        .copied()
        .unwrap();
    assert_eq!(e.attr.nlink, 0, "unnamed");
    assert_eq!(e.attr.mode & 0o7777, 0o640);
    // Nothing in the branch yet; written through its handle.
    assert_eq!(std::fs::read_dir(&d.branches[0]).unwrap().count(), 0);
    dev.write(e.nodeid, o.fh, 0, b"made unnamed").unwrap();
    // linkat(fd, "", dir, "named", AT_EMPTY_PATH) in the guest is a LINK of its node.
    let l = LinkIn {
        oldnodeid: e.nodeid,
    };
    let mut args = l.as_slice().to_vec();
    args.extend_from_slice(b"named\0");
    let req = FuseRequest::new(
        Opcode::Link as u32,
        ops::ROOT_ID,
        args,
        size_of::<EntryOut>(),
    );
    let linked: EntryOut = dev.send(&req).unwrap().parse().unwrap();
    assert_eq!(linked.nodeid, e.nodeid, "the same node, now named");
    assert_eq!(linked.attr.nlink, 1);
    assert_eq!(
        std::fs::read(d.branches[0].join("named")).unwrap(),
        b"made unnamed"
    );
    // A read-only TMPFILE is refused, as O_TMPFILE without write access is.
    let ro = CreateIn {
        flags: libc::O_RDONLY as u32,
        ..a
    };
    let mut args = ro.as_slice().to_vec();
    args.extend_from_slice(b"/\0");
    let req = FuseRequest::new(TMPFILE, ops::ROOT_ID, args, 256);
    assert_eq!(dev.send(&req).unwrap().errno(), Some(libc::EINVAL));
}

#[test]
fn ioctl_reads_and_sets_inode_flags_only() {
    use vufs_frontend::fuse_abi::{IoctlIn, IoctlOut};
    const GETFLAGS: u32 = 0x8008_6601;
    const SETFLAGS: u32 = 0x4008_6602;
    const NODUMP: u32 = 0x40;
    let t = tmpfs::Tmpfs::new("8M");
    std::fs::write(t.path().join("f"), "x").unwrap();
    let d = Daemon::start_in(
        tempfile::tempdir().unwrap(),
        vec![t.path().to_owned()],
        &[t.path().display().to_string()],
        &["-o", "minfreespace=1M"],
    );
    let mut dev = d.session();
    let e = dev.lookup(ops::ROOT_ID, b"f").unwrap();
    let fh = dev.open(e.nodeid, libc::O_RDONLY as u32).unwrap().fh;
    let mut ioctl = |cmd: u32, input: &[u8], out_size: u32, flags: u32| {
        let a = IoctlIn {
            fh,
            flags,
            cmd,
            arg: 0,
            in_size: input.len() as u32,
            out_size,
        };
        let mut args = a.as_slice().to_vec();
        args.extend_from_slice(input);
        let req = FuseRequest::new(
            Opcode::Ioctl as u32,
            e.nodeid,
            args,
            size_of::<IoctlOut>() + out_size as usize,
        );
        dev.send(&req).unwrap()
    };
    ioctl(SETFLAGS, &NODUMP.to_ne_bytes(), 0, 0)
        .payload()
        .unwrap();
    let r = ioctl(GETFLAGS, &[], 4, 0);
    let p = r.payload().unwrap();
    let flags = u32::from_ne_bytes(p[size_of::<IoctlOut>()..][..4].try_into().unwrap());
    assert_ne!(flags & NODUMP, 0);
    // The host file has it.
    let out = std::process::Command::new("lsattr")
        .arg(t.path().join("f"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("------d"));
    // Other commands, unrestricted ioctls: ENOTTY.
    assert_eq!(ioctl(0x5401, &[], 0, 0).errno(), Some(libc::ENOTTY));
    assert_eq!(ioctl(GETFLAGS, &[], 4, 2).errno(), Some(libc::ENOTTY));
}
