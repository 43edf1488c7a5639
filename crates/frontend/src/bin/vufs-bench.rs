//! vufs-bench: drives vhost-user-fs backends through the vufs-frontend driver (no VM) and the same
//! workloads natively on the host directory, printing one table with ratios. Not a daemon part.
//!
//! `vufs-bench --dir D --backend 'NAME=CMD ... {socket} ... {dir}' [--backend ...] [--depth N]`

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vufs_frontend::process::{self as backend, BackendProcess};
use vufs_frontend::{ops, ConnectOptions, Device, Error, FuseRequest, Result};

/// How many times the readdir row lists the directory: enough requests (about 300 with the
/// default 10,000 entries) that one scheduling hiccup does not decide the row.
const LISTINGS: usize = 30;

/// Command-line options (hand-parsed to keep this test tool dependency-free).
struct Opts {
    dir: PathBuf,
    backends: Vec<(String, String)>,
    depth: usize,
    file_size: u64,
    rand_ops: usize,
    entries: usize,
    queue_size: u16,
    /// Workload keys to run (`--only lookup,lookup-missing`); empty: all.
    only: Vec<String>,
}

fn usage() -> ! {
    eprintln!(
        "usage: vufs-bench --dir DIR --backend NAME=CMD [--backend NAME=CMD ...]\n\
         \x20      [--depth 16] [--file-size-mib 64] [--rand-ops 20000] [--entries 10000]\n\
         \x20      [--queue-size 1024] [--only KEY,KEY (e.g. lookup,lookup-missing)]\n\
         CMD is split on spaces; {{socket}} and {{dir}} are substituted."
    );
    std::process::exit(2)
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        dir: PathBuf::new(),
        backends: Vec::new(),
        depth: 16,
        file_size: 64 << 20,
        rand_ops: 20_000,
        entries: 10_000,
        queue_size: 1024,
        only: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        let num = |s: String| s.parse::<u64>().unwrap_or_else(|_| usage());
        match a.as_str() {
            "--dir" => o.dir = PathBuf::from(val()),
            "--backend" => {
                let v = val();
                let (n, c) = v.split_once('=').unwrap_or_else(|| usage());
                o.backends.push((n.to_string(), c.to_string()));
            }
            "--depth" => o.depth = num(val()) as usize,
            "--file-size-mib" => o.file_size = num(val()) << 20,
            "--rand-ops" => o.rand_ops = num(val()) as usize,
            "--entries" => o.entries = num(val()) as usize,
            "--queue-size" => o.queue_size = num(val()) as u16,
            "--only" => o.only = val().split(',').map(str::to_owned).collect(),
            _ => usage(),
        }
    }
    if o.dir.as_os_str().is_empty() {
        usage()
    }
    o
}

/// One workload row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Wl {
    SeqWrite(u32),
    SeqRead(u32),
    RandWrite,
    RandRead,
    Create,
    Lookup,
    LookupMissing,
    Getattr,
    Readdir,
    Unlink,
}

impl Wl {
    fn label(self) -> String {
        let bs = |b: u32| {
            if b >= 1 << 20 && b % (1 << 20) == 0 {
                format!("{}M", b >> 20)
            } else {
                format!("{}K", b >> 10)
            }
        };
        match self {
            Wl::SeqWrite(b) => format!("seq write {}", bs(b)),
            Wl::SeqRead(b) => format!("seq read {}", bs(b)),
            Wl::RandWrite => "rand write 4K".into(),
            Wl::RandRead => "rand read 4K".into(),
            Wl::Create => "create".into(),
            Wl::Lookup => "lookup".into(),
            Wl::LookupMissing => "lookup (missing)".into(),
            Wl::Getattr => "getattr".into(),
            Wl::Readdir => "readdir (entries)".into(),
            Wl::Unlink => "unlink".into(),
        }
    }

    /// The label as one word, for `--only`.
    fn key(self) -> String {
        self.label().replace(' ', "-").replace(['(', ')'], "")
    }

    fn is_bytes(self) -> bool {
        matches!(
            self,
            Wl::SeqWrite(_) | Wl::SeqRead(_) | Wl::RandWrite | Wl::RandRead
        )
    }
}

/// Outcome of one workload on one target.
#[derive(Clone, Copy, Debug, Default)]
struct Measure {
    ops: u64,
    bytes: u64,
    secs: f64,
    cpu: Option<f64>,
}

impl Measure {
    fn rate(&self, bytes: bool) -> f64 {
        let n = if bytes {
            self.bytes as f64 / (1 << 20) as f64
        } else {
            self.ops as f64
        };
        n / self.secs.max(1e-9)
    }
}

fn rand_offsets(n: usize, file_size: u64) -> Vec<u64> {
    // A fixed seed: every run and every backend gets the same offsets.
    let mut r = fastrand::Rng::with_seed(0x9E37_79B9_7F4A_7C15);
    let blocks = (file_size / 4096).max(1);
    (0..n).map(|_| r.u64(..blocks) * 4096).collect()
}

fn timed<F: FnOnce() -> Result<(u64, u64)>>(f: F) -> Result<Measure> {
    let t = Instant::now();
    let (ops, bytes) = f()?;
    Ok(Measure {
        ops,
        bytes,
        secs: t.elapsed().as_secs_f64(),
        cpu: None,
    })
}

fn workloads(max_ios: &[u32]) -> Vec<Wl> {
    let mut sizes = vec![4096, 128 << 10, 1 << 20];
    for &m in max_ios {
        if !sizes.contains(&m) {
            sizes.push(m);
        }
    }
    let mut w: Vec<Wl> = sizes
        .iter()
        .flat_map(|&b| [Wl::SeqWrite(b), Wl::SeqRead(b)])
        .collect();
    w.extend([
        Wl::RandWrite,
        Wl::RandRead,
        Wl::Create,
        Wl::Lookup,
        Wl::LookupMissing,
        Wl::Getattr,
        Wl::Readdir,
        Wl::Unlink,
    ]);
    w
}

/// `all` restricted to the workloads `--only` names (and the creates their lookups need).
fn selected(all: Vec<Wl>, only: &[String]) -> Vec<Wl> {
    if only.is_empty() {
        return all;
    }
    let wanted = |w: Wl| {
        only.contains(&w.key()) || (w == Wl::Create && only.iter().any(|k| k.starts_with("lookup")))
    };
    all.into_iter().filter(|&w| wanted(w)).collect()
}

fn name(i: usize) -> Vec<u8> {
    format!("f{i:06}").into_bytes()
}

/// A name no workload creates.
fn missing(i: usize) -> Vec<u8> {
    format!("m{i:06}").into_bytes()
}

/// Native (host syscalls, one at a time) run of every workload in `dir`.
fn run_native(o: &Opts, dir: &Path, wls: &[Wl]) -> Result<HashMap<Wl, Measure>> {
    let io = |e: std::io::Error| Error::Process(format!("native: {e}"));
    fs::create_dir_all(dir.join("meta")).map_err(io)?;
    let data = vec![0xA5u8; 4 << 20];
    let mut out = HashMap::new();
    for &w in wls {
        let file = dir.join("data");
        let m = timed(|| {
            let n = o.file_size;
            match w {
                Wl::SeqWrite(bs) => {
                    // No truncation: the FUSE side also overwrites one preallocated file.
                    let f = OpenOptions::new()
                        .create(true)
                        .truncate(false)
                        .write(true)
                        .open(&file)
                        .map_err(io)?;
                    let mut off = 0;
                    while off < n {
                        f.write_all_at(&data[..bs as usize], off).map_err(io)?;
                        off += u64::from(bs);
                    }
                    Ok((n / u64::from(bs), n))
                }
                Wl::SeqRead(bs) => {
                    let f = File::open(&file).map_err(io)?;
                    let mut buf = vec![0u8; bs as usize];
                    let mut off = 0;
                    while off < n {
                        f.read_exact_at(&mut buf, off).map_err(io)?;
                        off += u64::from(bs);
                    }
                    Ok((n / u64::from(bs), n))
                }
                Wl::RandWrite | Wl::RandRead => {
                    let f = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&file)
                        .map_err(io)?;
                    let mut buf = vec![0u8; 4096];
                    for off in rand_offsets(o.rand_ops, n) {
                        if w == Wl::RandWrite {
                            f.write_all_at(&data[..4096], off).map_err(io)?;
                        } else {
                            f.read_exact_at(&mut buf, off).map_err(io)?;
                        }
                    }
                    Ok((o.rand_ops as u64, o.rand_ops as u64 * 4096))
                }
                Wl::Create | Wl::Lookup | Wl::LookupMissing | Wl::Getattr | Wl::Unlink => {
                    for i in 0..o.entries {
                        let p = dir
                            .join("meta")
                            .join(String::from_utf8_lossy(&name(i)).as_ref());
                        match w {
                            Wl::Create => drop(File::create(&p).map_err(io)?),
                            Wl::Unlink => fs::remove_file(&p).map_err(io)?,
                            Wl::LookupMissing => {
                                let p =
                                    p.with_file_name(String::from_utf8_lossy(&missing(i)).as_ref());
                                if fs::symlink_metadata(&p).is_ok() {
                                    return Err(Error::Process(format!("{} exists", p.display())));
                                }
                            }
                            _ => {
                                fs::symlink_metadata(&p).map_err(io)?;
                            }
                        }
                    }
                    Ok((o.entries as u64, 0))
                }
                Wl::Readdir => {
                    let mut n = 0;
                    for _ in 0..LISTINGS {
                        n += fs::read_dir(dir.join("meta")).map_err(io)?.count() as u64;
                    }
                    Ok((n, 0))
                }
            }
        })?;
        out.insert(w, m);
    }
    Ok(out)
}

/// Pipeline `reqs`, failing on the first error reply; keeps payloads only when `keep`.
fn pipeline(
    dev: &mut Device,
    reqs: Vec<FuseRequest>,
    depth: usize,
    keep: bool,
) -> Result<Vec<Vec<u8>>> {
    let mut replies = vec![Vec::new(); if keep { reqs.len() } else { 0 }];
    dev.submit_many(reqs, depth, |i, r| {
        r.payload()?;
        if keep {
            replies[i] = r.bytes[vufs_frontend::request::OUT_HEADER_LEN..].to_vec();
        }
        Ok(())
    })?;
    Ok(replies)
}

fn parse<T: vm_memory::ByteValued>(b: &[u8]) -> Result<T> {
    b.get(..std::mem::size_of::<T>())
        .and_then(T::from_slice)
        .copied()
        .ok_or_else(|| Error::BadReply("short reply".into()))
}

/// Run every workload through a backend, below directory `fuse/` of its share.
fn run_fuse(o: &Opts, be: &BackendProcess) -> Result<(HashMap<Wl, Measure>, u32, Option<u64>)> {
    let copts = ConnectOptions {
        queue_size: o.queue_size,
        memory_size: 512 << 20,
        ..Default::default()
    };
    let mut dev = Device::connect(be.socket(), &copts)?;
    let init = dev.init(ops::DEFAULT_INIT_FLAGS)?;
    // The largest READ the backend takes; a write larger than its max_write goes as WRITEs of
    // max_write bytes, as a guest sends it.
    let max_io = u32::from(init.max_pages) * 4096;
    let wls = selected(workloads(&[max_io]), &o.only);
    let bench = dev.mkdir(ops::ROOT_ID, b"fuse", 0o755)?.nodeid;
    let meta = dev.mkdir(bench, b"meta", 0o755)?.nodeid;
    let data: Arc<[u8]> = Arc::from(vec![0xA5u8; max_io.max(1 << 20) as usize]);
    let (file, _) = dev.create(bench, b"data", 0o644, libc::O_RDWR as u32)?;
    let (nid, d) = (file.nodeid, o.depth);
    let mut nodes = Vec::new();
    let mut out = HashMap::new();
    for &w in &wls {
        let cpu0 = be.cpu_seconds()?;
        let m = timed(|| {
            let n = o.file_size;
            match w {
                Wl::SeqWrite(bs) | Wl::SeqRead(bs) => {
                    let fh = dev.open(nid, libc::O_RDWR as u32)?.fh;
                    let offs = (0..n / u64::from(bs)).map(|i| i * u64::from(bs));
                    let reqs: Vec<_> = if matches!(w, Wl::SeqWrite(_)) {
                        // Pieces of max_write bytes, the last one what is left of the block.
                        let piece = bs.min(init.max_write);
                        let n = bs.div_ceil(piece);
                        let full: Arc<[u8]> = Arc::from(&data[..piece as usize]);
                        let tail: Arc<[u8]> = Arc::from(&data[..(bs - piece * (n - 1)) as usize]);
                        offs.flat_map(|off| {
                            let (full, tail) = (full.clone(), tail.clone());
                            (0..n).map(move |k| {
                                let chunk = if k + 1 == n {
                                    tail.clone()
                                } else {
                                    full.clone()
                                };
                                ops::write(nid, fh, off + u64::from(k * piece), chunk)
                            })
                        })
                        .collect()
                    } else {
                        offs.map(|off| ops::read(nid, fh, off, bs)).collect()
                    };
                    let cnt = reqs.len() as u64;
                    pipeline(&mut dev, reqs, d, false)?;
                    dev.release(nid, fh)?;
                    Ok((cnt, n))
                }
                Wl::RandWrite | Wl::RandRead => {
                    let fh = dev.open(nid, libc::O_RDWR as u32)?.fh;
                    let chunk: Arc<[u8]> = Arc::from(&data[..4096]);
                    let reqs = rand_offsets(o.rand_ops, n)
                        .into_iter()
                        .map(|off| match w {
                            Wl::RandWrite => ops::write(nid, fh, off, chunk.clone()),
                            _ => ops::read(nid, fh, off, 4096),
                        })
                        .collect();
                    pipeline(&mut dev, reqs, d, false)?;
                    dev.release(nid, fh)?;
                    Ok((o.rand_ops as u64, o.rand_ops as u64 * 4096))
                }
                Wl::Create => {
                    let flags = (libc::O_WRONLY | libc::O_CREAT) as u32;
                    let reqs = (0..o.entries)
                        .map(|i| ops::create(meta, &name(i), 0o644, flags))
                        .collect();
                    let created = pipeline(&mut dev, reqs, d, true)?;
                    let mut rel = Vec::new();
                    for r in created {
                        let e: fuse_backend_rs::abi::fuse_abi::EntryOut = parse(&r)?;
                        let off = std::mem::size_of_val(&e);
                        let oo: fuse_backend_rs::abi::fuse_abi::OpenOut = parse(&r[off..])?;
                        nodes.push(e.nodeid);
                        rel.push(ops::release(e.nodeid, oo.fh));
                    }
                    pipeline(&mut dev, rel, d, false)?;
                    Ok((o.entries as u64, 0))
                }
                Wl::Lookup => {
                    let reqs = (0..o.entries)
                        .map(|i| ops::lookup(meta, &name(i)))
                        .collect();
                    pipeline(&mut dev, reqs, d, false)?;
                    Ok((o.entries as u64, 0))
                }
                Wl::LookupMissing => {
                    let reqs: Vec<_> = (0..o.entries)
                        .map(|i| ops::lookup(meta, &missing(i)))
                        .collect();
                    dev.submit_many(reqs, d, |_, r| match r.errno() {
                        Some(libc::ENOENT) => Ok(()),
                        e => Err(Error::BadReply(format!("lookup of a missing name: {e:?}"))),
                    })?;
                    Ok((o.entries as u64, 0))
                }
                Wl::Getattr => {
                    let reqs = nodes.iter().map(|&n| ops::getattr(n, None)).collect();
                    pipeline(&mut dev, reqs, d, false)?;
                    Ok((nodes.len() as u64, 0))
                }
                Wl::Readdir => {
                    let mut n = 0;
                    for _ in 0..LISTINGS {
                        let fh = dev.opendir(meta)?.fh;
                        let mut off = 0;
                        loop {
                            let page = dev.readdir(meta, fh, off, 32 * 1024)?;
                            let Some(last) = page.last() else { break };
                            off = last.off;
                            n += page
                                .iter()
                                .filter(|e| e.name != b"." && e.name != b"..")
                                .count();
                        }
                        dev.releasedir(meta, fh)?;
                    }
                    Ok((n as u64, 0))
                }
                Wl::Unlink => {
                    let reqs = (0..o.entries)
                        .map(|i| ops::unlink(meta, &name(i)))
                        .collect();
                    pipeline(&mut dev, reqs, d, false)?;
                    Ok((o.entries as u64, 0))
                }
            }
        })?;
        let cpu = be.cpu_seconds()? - cpu0;
        out.insert(
            w,
            Measure {
                cpu: Some(cpu),
                ..m
            },
        );
        if w == Wl::Unlink {
            // Drop the lookup references taken by CREATE and LOOKUP (untimed).
            let forgets = nodes.iter().map(|&n| ops::forget(n, 2)).collect::<Vec<_>>();
            dev.submit_many(forgets, d, |_, _| Ok(()))?;
        }
    }
    // Read the peak RSS while connected: a backend may exit as soon as the frontend leaves.
    let rss = be.peak_rss_kib().ok();
    drop(dev);
    Ok((out, max_io, rss))
}

fn spawn(o: &Opts, cmd: &str, sock: &Path) -> Result<BackendProcess> {
    let words: Vec<String> = cmd
        .split_whitespace()
        .map(|w| {
            w.replace("{socket}", &sock.to_string_lossy())
                .replace("{dir}", &o.dir.to_string_lossy())
        })
        .collect();
    let (prog, args) = words
        .split_first()
        .ok_or_else(|| Error::Process("empty command".into()))?;
    let mut c = Command::new(prog);
    c.args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    BackendProcess::spawn(c, sock, Duration::from_secs(20))
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vufs-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Per-target columns: name, results, peak RSS.
type Column = (String, HashMap<Wl, Measure>, Option<u64>);

fn run() -> Result<()> {
    let o = parse_opts();
    let mut cols: Vec<Column> = Vec::new();
    let mut max_ios = Vec::new();
    for (name, cmd) in &o.backends {
        let sock =
            std::env::temp_dir().join(format!("vufs-bench-{}-{name}.sock", std::process::id()));
        let _ = fs::remove_file(&sock);
        let be = spawn(&o, cmd, &sock)?;
        let (res, max_io, rss) = run_fuse(&o, &be)?;
        max_ios.push(max_io);
        drop(be);
        let _ = fs::remove_dir_all(o.dir.join("fuse"));
        backend::remove_socket_files(&sock);
        eprintln!("{name}: done (largest READ {max_io})");
        cols.push((name.clone(), res, rss));
    }
    let wls = selected(workloads(&max_ios), &o.only);
    let native_dir = o.dir.join("native");
    let native = run_native(&o, &native_dir, &wls)?;
    let _ = fs::remove_dir_all(&native_dir);
    print_table(&o, &wls, &native, &cols);
    Ok(())
}

fn print_table(o: &Opts, wls: &[Wl], native: &HashMap<Wl, Measure>, cols: &[Column]) {
    println!(
        "vufs-bench: depth {}, file {} MiB, {} random ops, {} entries, queue size {}",
        o.depth,
        o.file_size >> 20,
        o.rand_ops,
        o.entries,
        o.queue_size
    );
    print!("{:<20} {:>7} {:>12}", "workload", "unit", "native");
    for (n, _, _) in cols {
        print!(" | {:>12} {:>7} {:>7}", n, "x nat", "cpu s");
    }
    println!();
    for &w in wls {
        let bytes = w.is_bytes();
        let nat = native.get(&w).map(|m| m.rate(bytes)).unwrap_or(0.0);
        let unit = if bytes { "MiB/s" } else { "ops/s" };
        print!("{:<20} {:>7} {:>12.1}", w.label(), unit, nat);
        for (_, res, _) in cols {
            match res.get(&w) {
                Some(m) => print!(
                    " | {:>12.1} {:>7.2} {:>7.2}",
                    m.rate(bytes),
                    m.rate(bytes) / nat.max(1e-9),
                    m.cpu.unwrap_or(0.0)
                ),
                None => print!(" | {:>12} {:>7} {:>7}", "-", "-", "-"),
            }
        }
        println!();
    }
    print!("{:<20} {:>7} {:>12}", "backend peak RSS", "MiB", "-");
    for (_, _, rss) in cols {
        let r = rss.map_or("?".to_string(), |k| format!("{:.1}", k as f64 / 1024.0));
        print!(" | {:>12} {:>7} {:>7}", r, "", "");
    }
    println!();
}
