//! What `--security-label` and `--posix-acl` change on the wire, driven over the vhost-user
//! socket by the vufs-frontend driver (no VM): INIT negotiation (`auto` and `always`),
//! security contexts sent as request extensions after create-like requests (set on the new
//! host object, through `--xattrmap`, before it has its name; refused, with nothing left
//! behind, where the host cannot keep them; malformed or unnegotiated extensions refused), and
//! SETXATTR's longer argument with FUSE_SETXATTR_EXT. The guest tests (`guest/posix_acl.rs`,
//! `guest/security_label.rs`) show the same from a real kernel.

use std::fs;
use std::path::Path;

use fuse_backend_rs::abi::fuse_abi::{MknodIn, Opcode};
use testkit::daemon::Daemon;
use vm_memory::ByteValued;
use vufs_frontend::{ops, Device, FuseRequest, RawSegment, REQUEST_QUEUE};

/// INIT flags (flags2 bits shifted up by 32).
const DONT_MASK: u64 = 1 << 6;
const POSIX_ACL: u64 = 1 << 20;
const SETXATTR_EXT: u64 = 1 << 29;
const SECURITY_CTX: u64 = 1 << 32;
const ACL: u64 = POSIX_ACL | DONT_MASK | SETXATTR_EXT;

/// The mapping virtiofsd documents for labels on a host without the guest's LSM: every
/// guest name under `user.virtiofs.`.
const MAP: &str = "--xattrmap=:map::user.virtiofs.:";

/// A security-context extension as the kernel builds it (`get_security_context`).
fn secctx_ext(ctx: Option<(&str, &[u8])>) -> Vec<u8> {
    let mut body = Vec::new();
    let n = u32::from(ctx.is_some());
    if let Some((name, value)) = ctx {
        body.extend_from_slice(&(value.len() as u32).to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        body.extend_from_slice(name.as_bytes());
        body.push(0);
        body.extend_from_slice(value);
    }
    let size = (8 + body.len()).next_multiple_of(8);
    let mut out = (size as u32).to_ne_bytes().to_vec();
    out.extend_from_slice(&n.to_ne_bytes());
    out.extend_from_slice(&body);
    out.resize(size, 0);
    out
}

/// Sends `req` with extension block `ext` after its arguments (`total_extlen` set); the
/// reply's errno, if any.
fn send_with_ext(dev: &mut Device, req: &FuseRequest, ext: &[u8], unique: u64) -> Option<i32> {
    assert_eq!(ext.len() % 8, 0);
    let mut bytes = req.head_bytes(unique);
    bytes.extend_from_slice(ext);
    let len = bytes.len() as u32;
    bytes[0..4].copy_from_slice(&len.to_ne_bytes());
    // total_extlen: the low half of the header's last word.
    bytes[36..38].copy_from_slice(&((ext.len() / 8) as u16).to_ne_bytes());
    let chain = [RawSegment::In(bytes), RawSegment::Out(req.reply_capacity)];
    let reply = dev
        .send_raw(REQUEST_QUEUE, &chain)
        .expect("a reply")
        .into_reply();
    assert!(reply.used_len >= 16, "no reply header");
    reply.errno()
}

fn mknod(parent: u64, name: &str, mode: u32) -> FuseRequest {
    let a = MknodIn {
        mode,
        rdev: 0,
        umask: 0o022,
        padding: 0,
    };
    let mut args = a.as_slice().to_vec();
    args.extend_from_slice(name.as_bytes());
    args.push(0);
    FuseRequest::new(Opcode::Mknod as u32, parent, args, 128)
}

fn symlink(parent: u64, name: &str, target: &str) -> FuseRequest {
    let mut args = name.as_bytes().to_vec();
    args.push(0);
    args.extend_from_slice(target.as_bytes());
    args.push(0);
    FuseRequest::new(Opcode::Symlink as u32, parent, args, 128)
}

fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let out = std::process::Command::new("getfattr")
        .args(["--only-values", "-h", "-n", name])
        .arg(p)
        .output()
        .expect("getfattr");
    out.status.success().then_some(out.stdout)
}

/// The names in `dir`, sorted (hidden ones included).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn contexts_label_new_objects_and_failures_leave_nothing() {
    let d = Daemon::start(&["rw"], &["--security-label", MAP]);
    let mut dev = d.connect_with(1024);
    let init = dev
        .init(ops::DEFAULT_INIT_FLAGS | SECURITY_CTX)
        .expect("INIT");
    assert_ne!(init.flags2 & 1, 0, "SECURITY_CTX enabled");
    let root = &d.branches[0];
    let ctx = b"system_u:object_r:tmp_t:s0\0";

    // mkdir and create: labelled under the mapped name.
    let e = secctx_ext(Some(("security.selinux", ctx)));
    let mkdir = ops::mkdir(ops::ROOT_ID, b"d", 0o755);
    assert_eq!(send_with_ext(&mut dev, &mkdir, &e, 10), None);
    let create = ops::create(
        ops::ROOT_ID,
        b"f",
        0o644 | libc::S_IFREG,
        libc::O_RDWR as u32,
    );
    assert_eq!(send_with_ext(&mut dev, &create, &e, 11), None);
    for n in ["d", "f"] {
        assert_eq!(
            xattr(&root.join(n), "user.virtiofs.security.selinux").as_deref(),
            Some(&ctx[..]),
            "{n}"
        );
    }
    // A file the caller could not write to itself is labelled all the same.
    let ro = ops::create(
        ops::ROOT_ID,
        b"ro",
        0o444 | libc::S_IFREG,
        libc::O_RDONLY as u32,
    );
    let mut ro_as_user = ro.clone();
    ro_as_user.uid = 1000;
    ro_as_user.gid = 1000;
    fs::set_permissions(root, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    assert_eq!(send_with_ext(&mut dev, &ro_as_user, &e, 12), None);
    assert_eq!(
        xattr(&root.join("ro"), "user.virtiofs.security.selinux").as_deref(),
        Some(&ctx[..])
    );

    // The host keeps no user.* xattr on a FIFO or a symlink: refused, and nothing is left
    // under either name (no unlabelled object, no hidden one).
    let fifo = mknod(ops::ROOT_ID, "p", libc::S_IFIFO | 0o644);
    assert_eq!(send_with_ext(&mut dev, &fifo, &e, 13), Some(libc::EPERM));
    let link = symlink(ops::ROOT_ID, "l", "f");
    assert_eq!(send_with_ext(&mut dev, &link, &e, 14), Some(libc::EPERM));
    assert_eq!(names(root), ["d", "f", "ro"]);

    // No context (the guest's LSM had none): made as usual, with no label.
    let plain = ops::mkdir(ops::ROOT_ID, b"plain", 0o755);
    assert_eq!(send_with_ext(&mut dev, &plain, &secctx_ext(None), 15), None);
    assert_eq!(
        xattr(&root.join("plain"), "user.virtiofs.security.selinux"),
        None
    );
    let fifo = mknod(ops::ROOT_ID, "p2", libc::S_IFIFO | 0o644);
    assert_eq!(send_with_ext(&mut dev, &fifo, &secctx_ext(None), 16), None);

    // Malformed extensions: EINVAL and nothing made. A value longer than its block; two
    // contexts; the groups extension (not negotiated); a block longer than the request.
    let mut long = e.clone();
    long[8..12].copy_from_slice(&4096u32.to_ne_bytes());
    let mut two = e.clone();
    two[4..8].copy_from_slice(&2u32.to_ne_bytes());
    let mut groups = secctx_ext(None);
    groups[4..8].copy_from_slice(&32u32.to_ne_bytes());
    for (i, bad) in [long, two, groups].iter().enumerate() {
        let m = ops::mkdir(ops::ROOT_ID, b"bad", 0o755);
        assert_eq!(
            send_with_ext(&mut dev, &m, bad, 20 + i as u64),
            Some(libc::EINVAL),
            "case {i}"
        );
    }
    let m = ops::mkdir(ops::ROOT_ID, b"bad", 0o755);
    let mut bytes = m.head_bytes(30);
    bytes[36..38].copy_from_slice(&100u16.to_ne_bytes());
    let r = dev
        .send_raw(
            REQUEST_QUEUE,
            &[RawSegment::In(bytes), RawSegment::Out(128)],
        )
        .expect("reply")
        .into_reply();
    assert_eq!(
        r.errno(),
        Some(libc::EINVAL),
        "extension longer than the request"
    );
    assert!(!root.join("bad").exists());
    dev.getattr(ops::ROOT_ID).expect("still serving");
}

#[test]
fn extensions_are_refused_unless_negotiated() {
    let d = Daemon::start(&["rw"], &[]);
    let mut dev = d.session();
    let e = secctx_ext(Some(("security.selinux", b"x\0")));
    let mkdir = ops::mkdir(ops::ROOT_ID, b"d", 0o755);
    assert_eq!(send_with_ext(&mut dev, &mkdir, &e, 10), Some(libc::EINVAL));
    assert!(!d.branches[0].join("d").exists());
    // The same daemon with --security-label, but a guest that did not offer it.
    let d = Daemon::start(&["rw"], &["--security-label=auto"]);
    let mut dev = d.session();
    assert_eq!(send_with_ext(&mut dev, &mkdir, &e, 10), Some(libc::EINVAL));
    assert!(!d.branches[0].join("d").exists());
}

#[test]
fn init_takes_auto_and_refuses_an_always_the_guest_cannot_meet() {
    for (extra, offered, ok, flags, flags2) in [
        ("--posix-acl=always", ACL, true, ACL, 0),
        ("--posix-acl=always", POSIX_ACL | DONT_MASK, false, 0, 0),
        ("--posix-acl=auto", POSIX_ACL | DONT_MASK, true, 0, 0),
        ("--posix-acl=auto", ACL, true, ACL, 0),
        ("--posix-acl=never", ACL, true, 0, 0),
        ("--security-label", SECURITY_CTX, true, 0, 1),
        ("--security-label", 0, false, 0, 0),
        ("--security-label=auto", 0, true, 0, 0),
    ] {
        let d = Daemon::start(&["rw"], &[extra]);
        let mut dev = d.connect_with(1024);
        match dev.init(ops::DEFAULT_INIT_FLAGS | offered) {
            Ok(init) => {
                assert!(ok, "{extra} with {offered:#x}: INIT should fail");
                assert_eq!(u64::from(init.flags) & ACL, flags, "{extra} {offered:#x}");
                assert_eq!(init.flags2 & 1, flags2, "{extra} {offered:#x}");
            }
            Err(e) => {
                assert!(!ok, "{extra} with {offered:#x}: {e}");
                assert_eq!(e.errno(), Some(libc::EPROTO), "{extra}");
                assert!(d.log().contains("INIT refused"), "{}", d.log());
            }
        }
    }
}

#[test]
fn setxattr_ext_is_parsed_and_kill_sgid_clears_set_group_id() {
    let d = Daemon::start(&["rw"], &["--posix-acl"]);
    let mut dev = d.connect_with(1024);
    dev.init(ops::DEFAULT_INIT_FLAGS | ACL).expect("INIT");
    let root = &d.branches[0];
    fs::write(root.join("f"), b"x").unwrap();
    fs::set_permissions(
        root.join("f"),
        std::os::unix::fs::PermissionsExt::from_mode(0o2775),
    )
    .unwrap();
    let node = dev.lookup(ops::ROOT_ID, b"f").expect("LOOKUP").nodeid;
    let setxattr = |name: &str, value: &[u8], setxattr_flags: u32| {
        let mut args = Vec::new();
        for v in [value.len() as u32, 0, setxattr_flags, 0] {
            args.extend_from_slice(&v.to_ne_bytes());
        }
        args.extend_from_slice(name.as_bytes());
        args.push(0);
        args.extend_from_slice(value);
        FuseRequest::new(Opcode::Setxattr as u32, node, args, 0)
    };
    let r = dev.send(&setxattr("user.k", b"v", 0)).expect("SETXATTR");
    assert_eq!(r.errno(), None);
    assert_eq!(xattr(&root.join("f"), "user.k").as_deref(), Some(&b"v"[..]));

    // An access ACL (u::rwx g::rwx o::r-x, the minimal one), first as a member of the
    // group would set it (set-group-ID stays), then with KILL_SGID (it goes).
    let mut acl = vec![2, 0, 0, 0];
    for (tag, perm) in [(1u16, 7u16), (4, 7), (0x20, 5)] {
        acl.extend_from_slice(&tag.to_ne_bytes());
        acl.extend_from_slice(&perm.to_ne_bytes());
        acl.extend_from_slice(&u32::MAX.to_ne_bytes());
    }
    let mode = |p: &Path| {
        std::os::unix::fs::PermissionsExt::mode(&fs::metadata(p).unwrap().permissions()) & 0o7777
    };
    let r = dev
        .send(&setxattr("system.posix_acl_access", &acl, 0))
        .expect("SETXATTR");
    assert_eq!(r.errno(), None);
    assert_eq!(mode(&root.join("f")), 0o2775);
    let r = dev
        .send(&setxattr("system.posix_acl_access", &acl, 1))
        .expect("SETXATTR");
    assert_eq!(r.errno(), None);
    assert_eq!(mode(&root.join("f")), 0o0775);

    // A value shorter than its declared size: EINVAL, the daemon keeps serving.
    let mut bad = setxattr("user.k", b"v", 0);
    bad.args[0..4].copy_from_slice(&9u32.to_ne_bytes());
    assert_eq!(dev.send(&bad).expect("reply").errno(), Some(libc::EINVAL));
    dev.getattr(ops::ROOT_ID).expect("still serving");
}

#[test]
fn with_allow_idmap_a_request_without_caller_is_served_as_guest_root() {
    const ALLOW_IDMAP: u64 = 1 << 40;
    for allow in [true, false] {
        let extra: &[&str] = if allow { &["--allow-idmap"] } else { &[] };
        let d = Daemon::start(&["rw"], extra);
        let mut dev = d.connect_with(1024);
        let init = dev
            .init(ops::DEFAULT_INIT_FLAGS | ALLOW_IDMAP)
            .expect("INIT");
        assert_eq!(init.flags2 & (1 << 8) != 0, allow, "ALLOW_IDMAP enabled");
        // A root-owned file in a root-owned 0755 directory: only guest root may unlink it.
        let root = &d.branches[0];
        fs::write(root.join("f"), b"x").unwrap();
        let mut unlink = FuseRequest::new(Opcode::Unlink as u32, ops::ROOT_ID, b"f\0".to_vec(), 0);
        unlink.uid = u32::MAX;
        unlink.gid = u32::MAX;
        let r = dev.send(&unlink).expect("UNLINK");
        if allow {
            assert_eq!(r.errno(), None, "served as guest root");
            assert!(!root.join("f").exists());
        } else {
            // Without ALLOW_IDMAP, uid -1 is a caller no host id stands for.
            assert_eq!(r.errno(), Some(libc::EOVERFLOW));
            assert!(root.join("f").exists());
        }
        // A real caller is still that caller: user 1000 may not unlink root's file.
        fs::write(root.join("g"), b"x").unwrap();
        let mut unlink = FuseRequest::new(Opcode::Unlink as u32, ops::ROOT_ID, b"g\0".to_vec(), 0);
        unlink.uid = 1000;
        unlink.gid = 1000;
        let r = dev.send(&unlink).expect("UNLINK");
        assert_eq!(r.errno(), Some(libc::EACCES), "allow {allow}");
    }
}
