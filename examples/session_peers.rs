//! Sessions moved between daemon builds without a VM, through the vufs-frontend driver: makes
//! a busy session on any daemon binary (nodes, a hard-linked file reached by both names and
//! copied up under `cow=true`, a file open read-write with a POSIX lock, one open read-only with
//! an flock, a directory open and half read; with `--v2` also POSIX ACLs, security contexts and
//! idmapped mounts negotiated, and the branch set edited through the control socket), then:
//!
//! ```text
//! session_peers golden BIN OUTDIR TAG [--v2]  writes OUTDIR/device-state-TAG.bin (SET_DEVICE_STATE_FD),
//!                                             upgrade-handover-TAG.bin (what BIN hands a new daemon),
//!                                             upgrade-refused-TAG.bin (its refusal of channel 99),
//!                                             upgrade-hello-TAG.bin (what BIN says as a new daemon)
//! session_peers migrate SRC DST [--v2]        saves on SRC, loads on DST, goes on on DST
//! session_peers upgrade OLD NEW [--v2]        NEW --upgrade OLD's pid file, goes on through NEW
//!                                             (or, if NEW refuses, through OLD)
//! ```
//!
//! `--v2` is `--flags` (the negotiated extras, which a daemon of 1e60aa4 does not offer) and
//! `--edit` (the branch edit, which needs a control socket: 8e7487e on); either makes a
//! session only version 2 can carry.
//!
//! Going on checks the session came whole: the open file reads, the locks hold (a host flock
//! fails), the directory listing resumes at its offset, the second name is the same node.
//! `scripts/make-golden-session.sh` runs it; never part of the daemon.

use std::error::Error;
use std::fs;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use union_virtiofsd::ctl::client::Client;
use union_virtiofsd::sys::uds;
use vufs_frontend::ops::{self, DirEntry};
use vufs_frontend::process::BackendProcess;
use vufs_frontend::{ConnectOptions, Device};

type Res<T> = Result<T, Box<dyn Error>>;

/// INIT flags `--v2` offers besides the defaults: POSIX_ACL, DONT_MASK, SETXATTR_EXT,
/// SECURITY_CTX, ALLOW_IDMAP.
const V2_INIT: u64 = (1 << 20) | (1 << 6) | (1 << 29) | (1 << 32) | (1 << 40);
/// Daemon options `--v2` adds, to match.
const V2_ARGS: &[&str] = &["--posix-acl", "--security-label", "--allow-idmap"];
/// The POSIX lock's owner.
const OWNER: u64 = 0xa11ce;
/// Bytes read of the directory listing before the move (two or three entries).
const FIRST_PAGE: u32 = 80;

/// The branches: `lower` (RO) under `upper` (RW) with `cow=true`; `extra` is added by `--edit`.
struct Tree {
    tmp: tempfile::TempDir,
    /// `--v2` or `--flags`: POSIX ACLs, security contexts and idmap negotiated.
    flags: bool,
    /// `--v2` or `--edit`: the branch set edited (a daemon of 1e60aa4 can serve the result,
    /// not read it from a session).
    edit: bool,
}

impl Tree {
    fn new(flags: bool, edit: bool) -> Res<Tree> {
        let tmp = tempfile::Builder::new().prefix("session-peers").tempdir()?;
        let p = tmp.path();
        for d in ["upper", "lower/dir/sub", "extra", "run"] {
            fs::create_dir_all(p.join(d))?;
        }
        fs::write(p.join("lower/dir/a"), b"alpha\n")?;
        fs::write(p.join("lower/dir/b"), b"beta\n")?;
        fs::write(p.join("lower/dir/hl"), b"hard\n")?;
        fs::hard_link(p.join("lower/dir/hl"), p.join("lower/dir/hl2"))?;
        Ok(Tree { tmp, flags, edit })
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// The daemon's arguments over this tree, listening on `sock`: the branches at start, or
    /// (`edited`) the session's branch set after `--v2`'s edit, which the destination of a
    /// move must serve.
    fn args(&self, sock: &Path, edited: bool) -> Vec<String> {
        let mut a = vec!["--socket-path".to_string(), sock.display().to_string()];
        let mut branches = vec![
            format!("{}=RW", self.path("upper").display()),
            format!("{}=RO", self.path("lower").display()),
        ];
        if self.edit && edited {
            branches.push(format!("{}=RO", self.path("extra").display()));
        }
        for b in branches {
            a.extend(["--branch".to_string(), b]);
        }
        a.extend(["-o".into(), "cow=true".into()]);
        if self.flags {
            a.extend(V2_ARGS.iter().map(|s| s.to_string()));
        }
        a
    }
}

/// Starts `bin` over `tree` on `run/NAME.sock`, its stderr in `run/NAME.log`; `edited`: with
/// the session's edited branch set (a destination).
fn start(bin: &Path, tree: &Tree, name: &str, edited: bool) -> Res<BackendProcess> {
    let sock = tree.path(&format!("run/{name}.sock"));
    let log = fs::File::create(tree.path(&format!("run/{name}.log")))?;
    let mut cmd = Command::new(bin);
    cmd.args(tree.args(&sock, edited))
        .stdout(Stdio::null())
        .stderr(log);
    Ok(BackendProcess::spawn(cmd, &sock, Duration::from_secs(20))?)
}

fn log_of(tree: &Tree, name: &str) -> String {
    fs::read_to_string(tree.path(&format!("run/{name}.log"))).unwrap_or_default()
}

fn connect(sock: &Path) -> Res<Device> {
    let opts = ConnectOptions {
        device_state: true,
        ..Default::default()
    };
    Ok(Device::connect(sock, &opts)?)
}

/// What the busy session holds.
struct Busy {
    dir: u64,
    hl: u64,
    a: u64,
    fh_hl: u64,
    fh_a: u64,
    fh_dir: u64,
    first_page: Vec<DirEntry>,
}

/// Makes the session busy (see the file's text).
fn make_busy(dev: &mut Device, tree: &Tree, sock: &Path) -> Res<Busy> {
    let flags = ops::DEFAULT_INIT_FLAGS | if tree.flags { V2_INIT } else { 0 };
    dev.init(flags)?;
    let dir = dev.lookup(ops::ROOT_ID, b"dir")?.nodeid;
    let a = dev.lookup(dir, b"a")?.nodeid;
    dev.lookup(dir, b"b")?;
    dev.lookup(dir, b"sub")?;
    let hl = dev.lookup(dir, b"hl")?.nodeid;
    let hl2 = dev.lookup(dir, b"hl2")?.nodeid;
    if hl2 != hl {
        return Err(format!("hl is node {hl}, hl2 node {hl2}: not one node").into());
    }
    // Opening for write copies the hard-linked file up (cow=true): copied-up state.
    let fh_hl = dev.open(hl, libc::O_RDWR as u32)?.fh;
    dev.write(hl, fh_hl, 0, b"HARD")?;
    let lk = ops::file_lock(0, 99, libc::F_WRLCK);
    answer(dev.send(&ops::setlk(hl, fh_hl, OWNER, lk, false, false))?)?;
    let fh_a = dev.open(a, libc::O_RDONLY as u32)?.fh;
    let lk = ops::file_lock(0, u64::MAX, libc::F_WRLCK);
    answer(dev.send(&ops::setlk(a, fh_a, fh_a, lk, true, false))?)?;
    let fh_dir = dev.opendir(dir)?.fh;
    let first_page = dev.readdir(dir, fh_dir, 0, FIRST_PAGE)?;
    if first_page.is_empty() {
        return Err("an empty first page of the listing".into());
    }
    if tree.edit {
        let ctl = union_virtiofsd::ctl::client::ctl_socket(sock);
        let extra = format!("+>{}=RO", tree.path("extra").display());
        Client::connect(&ctl)?.set("branches", &extra)?;
    }
    Ok(Busy {
        dir,
        hl,
        a,
        fh_hl,
        fh_a,
        fh_dir,
        first_page,
    })
}

fn answer(r: vufs_frontend::FuseReply) -> Res<()> {
    match r.errno() {
        None => Ok(()),
        Some(e) => Err(format!("errno {e}").into()),
    }
}

/// Checks, through `dev` (connected to whichever daemon now has the session), that the
/// session came whole.
fn go_on(dev: &mut Device, tree: &Tree, b: &Busy) -> Res<()> {
    let data = dev.read(b.hl, b.fh_hl, 0, 16)?;
    if data != b"HARD\n" {
        return Err(format!("the open file reads {data:?}").into());
    }
    if dev.lookup(b.dir, b"hl2")?.nodeid != b.hl {
        return Err("hl2 is no longer hl's node".into());
    }
    // Another owner's lock conflicts with the one moved.
    let lk = ops::file_lock(0, 0, libc::F_WRLCK);
    let r = dev.send(&ops::setlk(b.hl, b.fh_hl, OWNER + 1, lk, false, false))?;
    if r.errno() != Some(libc::EAGAIN) {
        return Err(format!("another owner's SETLK answered {:?}", r.errno()).into());
    }
    // The host sees the flock held.
    let host = fs::File::open(tree.path("lower/dir/a"))?;
    match rustix::fs::flock(
        host.as_fd(),
        rustix::fs::FlockOperation::NonBlockingLockShared,
    ) {
        Err(rustix::io::Errno::WOULDBLOCK) => {}
        other => return Err(format!("a host flock on a: {other:?}, not EWOULDBLOCK").into()),
    }
    let last = b.first_page.last().expect("a first page").off;
    let mut rest = Vec::new();
    let mut off = last;
    loop {
        let page = dev.readdir(b.dir, b.fh_dir, off, 4096)?;
        match page.last() {
            None => break,
            Some(e) => off = e.off,
        }
        rest.extend(page);
    }
    let mut names: Vec<_> = b
        .first_page
        .iter()
        .chain(&rest)
        .map(|e| e.name.clone())
        .collect();
    names.sort();
    let want: Vec<&[u8]> = vec![b".", b"..", b"a", b"b", b"hl", b"hl2", b"sub"];
    if names != want {
        let shown: Vec<_> = names.iter().map(|n| String::from_utf8_lossy(n)).collect();
        return Err(format!("the listing resumed as {shown:?}").into());
    }
    dev.release(b.a, b.fh_a)?;
    dev.release(b.hl, b.fh_hl)?;
    dev.releasedir(b.dir, b.fh_dir)?;
    Ok(())
}

/// Reads one upgrade-channel frame: its body and descriptors (closed when dropped).
fn read_frame(s: &UnixStream) -> Res<Vec<u8>> {
    let mut len = [0u8; 4];
    uds::recv_exact_with_fds(s, &mut len)?.ok_or("the daemon hung up")?;
    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
    uds::recv_exact_with_fds(s, &mut body)?.ok_or("the daemon hung up mid-frame")?;
    Ok(body)
}

fn write_frame(s: &UnixStream, body: &[u8]) -> Res<()> {
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(body);
    (&*s).write_all(&frame)?;
    Ok(())
}

/// The daemon's refusal of a hello in channel version 99.
fn capture_refused(sock: &Path) -> Res<Vec<u8>> {
    let s = UnixStream::connect(upgrade_path(sock))?;
    // postcard: ToOld::Hello (variant 0) { version: 99, pid: 1 }.
    write_frame(&s, &[0, 99, 1])?;
    read_frame(&s)
}

/// What the daemon hands a new daemon (the session included); then hangs up, so that it
/// takes the session back.
fn capture_handover(sock: &Path) -> Res<Vec<u8>> {
    let s = UnixStream::connect(upgrade_path(sock))?;
    // ToOld::Hello { version: 1, pid: 1 } and this build's HelloExt: reads 1 to 2, speaks 1.
    write_frame(&s, &[0, 1, 1, 1, 2, 1, 1])?;
    read_frame(&s)
}

/// What `bin`, started with `--upgrade`, says to a running daemon (a listener here).
fn capture_hello(bin: &Path, tree: &Tree) -> Res<Vec<u8>> {
    let sock = tree.path("run/fake.sock");
    let listener = UnixListener::bind(upgrade_path(&sock))?;
    let pid_file = tree.path("run/fake.sock.pid");
    fs::write(&pid_file, b"1\n")?;
    let mut cmd = Command::new(bin);
    cmd.args(tree.args(&sock, true))
        .arg("--upgrade")
        .arg(&pid_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn()?;
    let (s, _) = listener.accept()?;
    let hello = read_frame(&s)?;
    // ToNew::Refused (variant 0) "golden".
    write_frame(&s, b"\x00\x06golden")?;
    drop(s);
    child.wait()?;
    Ok(hello)
}

fn upgrade_path(sock: &Path) -> PathBuf {
    let mut p = sock.as_os_str().to_owned();
    p.push(".upgrade");
    PathBuf::from(p)
}

/// Waits up to 20 s for `text` in daemon `name`'s log.
fn wait_log(tree: &Tree, name: &str, text: &str) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log_of(tree, name).contains(text) {
        if Instant::now() > deadline {
            return Err(format!("no '{text}' in {name}'s log:\n{}", log_of(tree, name)).into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn golden(bin: &Path, out: &Path, tag: &str, tree: &Tree) -> Res<()> {
    let mut d = start(bin, tree, "src", false)?;
    let sock = d.socket().to_path_buf();
    let mut dev = connect(&sock)?;
    let busy = make_busy(&mut dev, tree, &sock)?;
    let write = |what: &str, bytes: &[u8]| -> Res<()> {
        let p = out.join(format!("{what}-{tag}.bin"));
        fs::write(&p, bytes)?;
        println!("{}: {} bytes", p.display(), bytes.len());
        Ok(())
    };
    write("upgrade-refused", &capture_refused(&sock)?)?;
    write("upgrade-handover", &capture_handover(&sock)?)?;
    // The daemon took its session back and serves on.
    wait_log(tree, "src", "serving on")?;
    dev.getattr(busy.hl)?;
    dev.stop_rings()?;
    write("device-state", &dev.save_state()?)?;
    drop(dev);
    if !d.is_alive() {
        return Err(format!("the daemon died:\n{}", log_of(tree, "src")).into());
    }
    drop(d);
    write("upgrade-hello", &capture_hello(bin, tree)?)?;
    println!(
        "nodes: dir {} a {} hl=hl2 {}; fh: hl {} (O_RDWR, POSIX lock owner {OWNER:#x} 0..=99), a {} (flock), dir {} (read up to offset {})",
        busy.dir,
        busy.a,
        busy.hl,
        busy.fh_hl,
        busy.fh_a,
        busy.fh_dir,
        busy.first_page.last().map_or(0, |e| e.off)
    );
    Ok(())
}

fn migrate(src: &Path, dst: &Path, tree: &Tree) -> Res<()> {
    let s = start(src, tree, "src", false)?;
    let sock = s.socket().to_path_buf();
    let mut dev = connect(&sock)?;
    let busy = make_busy(&mut dev, tree, &sock)?;
    dev.stop_rings()?;
    let state = dev.save_state()?;
    println!("saved {} bytes on {}", state.len(), src.display());
    let d = start(dst, tree, "dst", true)?;
    let mut dev2 = connect(d.socket())?;
    if let Err(e) = dev2.load_state(&state) {
        return Err(format!("load: {e}\n{}", log_of(tree, "dst")).into());
    }
    drop(dev);
    drop(s);
    go_on(&mut dev2, tree, &busy).map_err(|e| format!("{e}\n{}", log_of(tree, "dst")))?;
    println!(
        "migrated: {}",
        last_line(&log_of(tree, "dst"), "device state loaded")
    );
    Ok(())
}

fn upgrade(old: &Path, new: &Path, tree: &Tree) -> Res<()> {
    let mut o = start(old, tree, "src", false)?;
    let sock = o.socket().to_path_buf();
    let mut dev = connect(&sock)?;
    let busy = make_busy(&mut dev, tree, &sock)?;
    let log = fs::File::create(tree.path("run/new.log"))?;
    let mut pid_file = sock.as_os_str().to_owned();
    pid_file.push(".pid");
    let mut n = Command::new(new)
        .args(tree.args(&sock, true))
        .arg("--upgrade")
        .arg(&pid_file)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log_of(tree, "new").contains("upgrade: serving the session") {
        if let Some(st) = n.try_wait()? {
            // Refused: the old daemon must serve on, the session whole.
            println!(
                "new daemon exited ({st}): {}",
                last_line(&log_of(tree, "new"), "")
            );
            println!(
                "old daemon: {}",
                last_line(&log_of(tree, "src"), "upgrade refused")
            );
            go_on(&mut dev, tree, &busy)?;
            println!("the old daemon serves on, the session whole");
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("no takeover:\n{}", log_of(tree, "new")).into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = go_on(&mut dev, tree, &busy);
    let old_exit = o.wait_exit(Duration::from_secs(20))?;
    println!(
        "upgraded: {}",
        last_line(&log_of(tree, "new"), "serving the session")
    );
    println!(
        "old daemon: {old_exit:?}; {}",
        last_line(&log_of(tree, "src"), "took the session")
    );
    drop(dev);
    let _ = n.kill();
    let _ = n.wait();
    r.map_err(|e| format!("{e}\n{}", log_of(tree, "new")).into())
}

fn last_line(log: &str, text: &str) -> String {
    log.lines()
        .rev()
        .find(|l| l.contains(text))
        .unwrap_or("")
        .to_string()
}

fn main() {
    if let Err(e) = run() {
        eprintln!("session_peers: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let pos: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(|s| s.as_str())
        .collect();
    let tree = Tree::new(
        flag("--v2") || flag("--flags"),
        flag("--v2") || flag("--edit"),
    )?;
    match pos.as_slice() {
        ["golden", bin, out, tag] => golden(Path::new(bin), Path::new(out), tag, &tree),
        ["migrate", src, dst] => migrate(Path::new(src), Path::new(dst), &tree),
        ["upgrade", old, new] => upgrade(Path::new(old), Path::new(new), &tree),
        _ => Err("usage: session_peers golden BIN OUTDIR TAG | migrate SRC DST | upgrade OLD NEW [--v2 | --flags | --edit]".into()),
    }
}
