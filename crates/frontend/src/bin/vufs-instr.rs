//! vufs-instr: one run of scripts/bench-instructions.sh. Lays out a row's files natively in DIR,
//! connects to a running backend, sends the row's set-up (sized by `--setup`, so it is the same
//! whatever the count), then `--count` requests of the row's kind one at a time (depth 1), and
//! disconnects. Measures nothing itself: the script counts the backend's instructions. Not a
//! daemon part.
//!
//! `vufs-instr --socket S --dir DIR --row ROW --setup M --count K [--pid PID]`
//!
//! With `--pid`, each request waits until every thread of the backend sleeps in a system call,
//! as a guest's next request finds it at depth 1. Without that, a backend slowed down by
//! valgrind sometimes finds the next request before it re-arms its notifications and sometimes
//! not, and its instruction count changes from run to run. After the last reply, once the
//! backend is idle again, it is ended with SIGUSR2 (which neither virtiofsd nor union-virtiofsd
//! catches) while still connected, so no disconnect handling or teardown runs: a count then
//! covers start-up, set-up and the requests, nothing after.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use vufs_frontend::{ops, ConnectOptions, Device, Error, Result};

/// The daemon answered STATX with ENOSYS: the stat row sends GETATTR from then on.
static NO_STATX: AtomicBool = AtomicBool::new(false);

/// Size of the file the read and write rows cycle over.
const FILE_SIZE: u64 = 16 << 20;
/// Names the lookup, getattr and setattr rows cycle over (the nodes stay known to the backend).
const NAMES: usize = 100;
/// Entries in the directory one readdirplus request lists.
const LISTING: usize = 1000;
/// A Linux guest's READDIRPLUS buffer: one page.
const DIR_PAGE: u32 = 4096;

/// The request kinds, one per table row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Row {
    Read(u32),
    Write(u32),
    Lookup,
    LookupMissing,
    Getattr,
    Setattr,
    Create,
    Unlink,
    Readdirplus,
    /// The same listing with READDIR (names only, no nodes), in 32 KiB buffers as
    /// `vufs-bench` reads it.
    Readdir,
    /// GETXATTR of `security.capability` (size only, none there: ENODATA), as a Linux guest
    /// asks before writing to a file whose attributes it refreshed.
    Getxattr,
    Fsync,
    /// FALLOCATE (mode 0) of 4 KiB inside the file.
    Fallocate,
    /// SETATTR of the size, alternately one page shorter and back.
    Truncate,
    /// OPEN, FLUSH and RELEASE: a guest's open(2) and close(2) (three requests).
    OpenClose,
    /// What a guest's fstat(2) sends after a write made the attributes stale: STATX (Linux
    /// 6.6+) with the handle, or, from a daemon that answered it ENOSYS (the guest's
    /// `no_statx`), GETATTR with the handle.
    Stat,
}

impl Row {
    /// Whether the row works on the one data file (opened O_RDWR) rather than a directory.
    fn on_file(self) -> bool {
        matches!(
            self,
            Row::Read(_)
                | Row::Write(_)
                | Row::Getxattr
                | Row::Fsync
                | Row::Fallocate
                | Row::Truncate
                | Row::OpenClose
                | Row::Stat
        )
    }

    fn parse(s: &str) -> Option<Row> {
        Some(match s {
            "read-4k" => Row::Read(4096),
            "read-1m" => Row::Read(1 << 20),
            "write-4k" => Row::Write(4096),
            "write-1m" => Row::Write(1 << 20),
            "lookup" => Row::Lookup,
            "lookup-missing" => Row::LookupMissing,
            "getattr" => Row::Getattr,
            "setattr" => Row::Setattr,
            "create" => Row::Create,
            "unlink" => Row::Unlink,
            "readdirplus" => Row::Readdirplus,
            "readdir" => Row::Readdir,
            "getxattr" => Row::Getxattr,
            "fsync" => Row::Fsync,
            "fallocate" => Row::Fallocate,
            "truncate" => Row::Truncate,
            "open-close" => Row::OpenClose,
            "stat" => Row::Stat,
            _ => return None,
        })
    }
}

struct Opts {
    socket: PathBuf,
    dir: PathBuf,
    row: Row,
    setup: usize,
    count: usize,
    pid: Option<u32>,
}

fn usage() -> ! {
    eprintln!(
        "usage: vufs-instr --socket SOCKET --dir DIR --row ROW --setup M --count K [--pid PID]\n\
         ROW: read-4k read-1m write-4k write-1m lookup lookup-missing getattr setattr create\n\
         \x20    unlink readdirplus (readdirplus: K listings of {LISTING} entries)"
    );
    std::process::exit(2)
}

fn parse_opts() -> Opts {
    let (mut socket, mut dir, mut row, mut setup, mut count) = (None, None, None, 0, None);
    let mut pid = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let val = args.next().unwrap_or_else(|| usage());
        let num = |s: &str| s.parse::<usize>().unwrap_or_else(|_| usage());
        match a.as_str() {
            "--socket" => socket = Some(PathBuf::from(val)),
            "--dir" => dir = Some(PathBuf::from(val)),
            "--row" => row = Some(Row::parse(&val).unwrap_or_else(|| usage())),
            "--setup" => setup = num(&val),
            "--count" => count = Some(num(&val)),
            "--pid" => pid = Some(num(&val) as u32),
            _ => usage(),
        }
    }
    match (socket, dir, row, count) {
        (Some(socket), Some(dir), Some(row), Some(count)) => Opts {
            socket,
            dir,
            row,
            setup: setup.max(count),
            count,
            pid,
        },
        _ => usage(),
    }
}

fn name(i: usize) -> Vec<u8> {
    format!("f{i:06}").into_bytes()
}

/// The row's host files: `data` for I/O rows, otherwise directory `d` holding what the row needs.
fn layout(dir: &Path, row: Row, setup: usize) -> Result<()> {
    let io = |e: std::io::Error| Error::Process(format!("layout in {}: {e}", dir.display()));
    if row.on_file() {
        let chunk = vec![0xA5u8; 1 << 20];
        let mut f = File::create(dir.join("data")).map_err(io)?;
        for _ in 0..FILE_SIZE / chunk.len() as u64 {
            std::io::Write::write_all(&mut f, &chunk).map_err(io)?;
        }
        return Ok(());
    }
    let d = dir.join("d");
    fs::create_dir(&d).map_err(io)?;
    let files = match row {
        Row::Lookup | Row::Getattr | Row::Setattr => NAMES,
        Row::Unlink => setup,
        Row::Readdirplus | Row::Readdir => LISTING,
        _ => 0,
    };
    for i in 0..files {
        File::create(d.join(String::from_utf8_lossy(&name(i)).as_ref())).map_err(io)?;
    }
    Ok(())
}

/// The device, handed out for each request once the backend is idle (see the file header).
struct Paced {
    dev: Device,
    pid: Option<u32>,
}

impl Paced {
    /// The device, once every thread of the backend has been seen asleep twice in a row.
    fn next(&mut self) -> Result<&mut Device> {
        let Some(pid) = self.pid else {
            return Ok(&mut self.dev);
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut calm = 0;
        while calm < 2 {
            calm = if all_asleep(pid)? { calm + 1 } else { 0 };
            if Instant::now() > deadline {
                return Err(Error::Process(format!("backend {pid} never went idle")));
            }
            sleep(Duration::from_micros(200));
        }
        Ok(&mut self.dev)
    }
}

/// Kill `pid` with SIGUSR2 and wait until it is gone (or a zombie), before the frontend hangs up.
fn end(pid: u32) -> Result<()> {
    let st = std::process::Command::new("kill")
        .args(["-USR2", &pid.to_string()])
        .status()
        .map_err(|e| Error::Process(format!("kill: {e}")))?;
    if !st.success() {
        return Err(Error::Process(format!("kill -USR2 {pid}: {st}")));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat)
                if !stat
                    .rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z')) => {}
            _ => return Ok(()),
        }
        if Instant::now() > deadline {
            return Err(Error::Process(format!("backend {pid} outlived SIGUSR2")));
        }
        sleep(Duration::from_millis(5));
    }
}

/// Every thread of `pid` is in state S (sleeping in a system call).
fn all_asleep(pid: u32) -> Result<bool> {
    let io = |e: std::io::Error| Error::Process(format!("/proc/{pid}/task: {e}"));
    for t in fs::read_dir(format!("/proc/{pid}/task")).map_err(io)? {
        // A thread that just exited has no stat any more: it is not running either.
        let Ok(stat) = fs::read_to_string(t.map_err(io)?.path().join("stat")) else {
            continue;
        };
        // The state follows the parenthesised command name, which may hold spaces.
        let state = stat.rsplit_once(')').map(|(_, r)| r.trim_start());
        if !state.is_some_and(|r| r.starts_with('S')) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Set-up (`setup` sized), then `count` requests of the row's kind, one at a time.
fn drive(dev: &mut Paced, o: &Opts) -> Result<()> {
    dev.next()?.init(ops::DEFAULT_INIT_FLAGS)?;
    if o.row.on_file() {
        let nid = dev.next()?.lookup(ops::ROOT_ID, b"data")?.nodeid;
        let fh = dev.next()?.open(nid, libc::O_RDWR as u32)?.fh;
        for i in 0..o.count as u64 {
            on_file(dev, o.row, nid, fh, i)?;
        }
        return dev.next()?.release(nid, fh);
    }
    let d = dev.next()?.lookup(ops::ROOT_ID, b"d")?.nodeid;
    let known = match o.row {
        Row::Lookup | Row::Getattr | Row::Setattr => NAMES,
        Row::Unlink => o.setup,
        _ => 0,
    };
    let nodes = (0..known)
        .map(|i| dev.next()?.lookup(d, &name(i)).map(|e| e.nodeid))
        .collect::<Result<Vec<_>>>()?;
    for i in 0..o.count {
        match o.row {
            Row::Lookup => drop(dev.next()?.lookup(d, &name(i % NAMES))?),
            Row::LookupMissing => {
                let r = dev
                    .next()?
                    .send(&ops::lookup(d, format!("m{i:06}").as_bytes()))?;
                if r.errno() != Some(libc::ENOENT) {
                    return Err(Error::BadReply(format!("missing name: {:?}", r.errno())));
                }
            }
            Row::Getattr => drop(dev.next()?.getattr(nodes[i % NAMES])?),
            Row::Setattr => {
                let mode = if (i / NAMES) % 2 == 0 { 0o600 } else { 0o644 };
                dev.next()?
                    .send(&ops::chmod(nodes[i % NAMES], mode))?
                    .payload()?;
            }
            Row::Create => {
                let flags = (libc::O_WRONLY | libc::O_CREAT) as u32;
                dev.next()?.create(d, &name(i), 0o644, flags)?;
            }
            Row::Unlink => dev.next()?.unlink(d, &name(i))?,
            Row::Readdirplus => list(dev, d, true)?,
            Row::Readdir => list(dev, d, false)?,
            _ => unreachable!("served above"),
        }
    }
    Ok(())
}

/// The `i`-th request of a file row on node `nid`, open as handle `fh`.
fn on_file(dev: &mut Paced, row: Row, nid: u64, fh: u64, i: u64) -> Result<()> {
    let expect = |what: &str, got: Option<i32>, want: Option<i32>| {
        if got == want {
            Ok(())
        } else {
            Err(Error::BadReply(format!("{what}: errno {got:?}")))
        }
    };
    match row {
        Row::Read(bs) | Row::Write(bs) => {
            let off = i * u64::from(bs) % FILE_SIZE;
            let done = match row {
                Row::Read(_) => dev.next()?.read(nid, fh, off, bs)?.len(),
                _ => {
                    let data = vec![0x5Au8; bs as usize];
                    dev.next()?.write(nid, fh, off, &data)? as usize
                }
            };
            if done != bs as usize {
                return Err(Error::BadReply(format!("{done} bytes at {off}")));
            }
        }
        Row::Getxattr => {
            let r = dev
                .next()?
                .send(&ops::getxattr(nid, b"security.capability", 0))?;
            expect("getxattr", r.errno(), Some(libc::ENODATA))?;
        }
        Row::Fsync => {
            let r = dev.next()?.send(&ops::fsync(nid, fh, false))?;
            expect("fsync", r.errno(), None)?;
        }
        Row::Fallocate => {
            let off = i * 4096 % FILE_SIZE;
            let r = dev.next()?.send(&ops::fallocate(nid, fh, off, 4096, 0))?;
            expect("fallocate", r.errno(), None)?;
        }
        Row::Truncate => {
            let size = FILE_SIZE - 4096 * (i % 2);
            dev.next()?.send(&ops::truncate(nid, size))?.payload()?;
        }
        Row::Stat => {
            if !NO_STATX.load(Ordering::Relaxed) {
                let r = dev.next()?.send(&ops::statx(nid, Some(fh)))?;
                if r.errno() != Some(libc::ENOSYS) {
                    r.payload()?;
                    return Ok(());
                }
                // As the guest: STATX is never sent again; this request becomes a GETATTR.
                NO_STATX.store(true, Ordering::Relaxed);
            }
            let r = dev.next()?.send(&ops::getattr(nid, Some(fh)))?;
            r.payload()?;
        }
        Row::OpenClose => {
            let h = dev.next()?.open(nid, libc::O_RDWR as u32)?.fh;
            let r = dev.next()?.send(&ops::flush(nid, h, 1))?;
            expect("flush", r.errno(), None)?;
            dev.next()?.release(nid, h)?;
        }
        _ => unreachable!("not a file row"),
    }
    Ok(())
}

/// One listing of directory `d`: OPENDIR, READDIRPLUS page by page as a Linux guest does it
/// (`plus`), or READDIR in 32 KiB buffers as `vufs-bench` reads it, then RELEASEDIR.
fn list(dev: &mut Paced, d: u64, plus: bool) -> Result<()> {
    let fh = dev.next()?.opendir(d)?.fh;
    let (mut off, mut n) = (0, 0);
    loop {
        let page = match plus {
            true => dev.next()?.readdirplus(d, fh, off, DIR_PAGE)?,
            false => dev.next()?.readdir(d, fh, off, 32 * 1024)?,
        };
        let Some(last) = page.last() else { break };
        off = last.off;
        n += page
            .iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .count();
    }
    if n != LISTING {
        return Err(Error::BadReply(format!("listed {n} of {LISTING} entries")));
    }
    dev.next()?.releasedir(d, fh)
}

fn run() -> Result<()> {
    let o = parse_opts();
    layout(&o.dir, o.row, o.setup)?;
    let copts = ConnectOptions {
        // Under valgrind a first request can take seconds.
        timeout: Duration::from_secs(300),
        // Descriptors as a Linux guest lays them out (a 1 MiB READ is 258 of them).
        linux_layout: true,
        ..Default::default()
    };
    let mut paced = Paced {
        dev: Device::connect(&o.socket, &copts)?,
        pid: o.pid,
    };
    drive(&mut paced, &o)?;
    if let Some(pid) = o.pid {
        paced.next()?;
        end(pid)?;
    }
    paced.dev.disconnect();
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vufs-instr: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
