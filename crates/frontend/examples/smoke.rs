//! Hand-run smoke check of the driver against any running vhost-user-fs backend:
//! `cargo run -p vufs-frontend --example smoke -- SOCKET`. Exercises the common ops once each.

use std::time::Instant;

use vufs_frontend::{ops, ConnectOptions, Device};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sock = std::env::args().nth(1).ok_or("usage: smoke SOCKET")?;
    let mut dev = Device::connect(sock.as_ref(), &ConnectOptions::default())?;
    println!("negotiated: {:?}", dev.negotiated());
    let init = dev.init(ops::DEFAULT_INIT_FLAGS)?;
    println!(
        "init: {}.{} flags={:#x} max_write={} max_pages={}",
        init.major, init.minor, init.flags, init.max_write, init.max_pages
    );
    let (e, o) = dev.create(ops::ROOT_ID, b"smoke.txt", 0o644, libc::O_RDWR as u32)?;
    println!("create: nodeid={} fh={}", e.nodeid, o.fh);
    println!(
        "write: {}",
        dev.write(e.nodeid, o.fh, 0, b"hello virtio-fs")?
    );
    let got = dev.read(e.nodeid, o.fh, 0, 4096)?;
    println!("read: {:?}", String::from_utf8_lossy(&got));
    dev.release(e.nodeid, o.fh)?;
    let a = dev.getattr(e.nodeid)?;
    println!("getattr: size={} mode={:o}", a.attr.size, a.attr.mode);
    let d = dev.opendir(ops::ROOT_ID)?;
    let names: Vec<String> = dev
        .readdir_all(ops::ROOT_ID, d.fh)?
        .iter()
        .map(|x| String::from_utf8_lossy(&x.name).into_owned())
        .collect();
    println!("readdir: {names:?}");
    let plus = dev.readdirplus(ops::ROOT_ID, d.fh, 0, 65536)?;
    println!("readdirplus: {} entries", plus.len());
    dev.releasedir(ops::ROOT_ID, d.fh)?;
    println!(
        "lookup missing: {:?}",
        dev.lookup(ops::ROOT_ID, b"nope").map(|e| e.nodeid)
    );
    dev.unlink(ops::ROOT_ID, b"smoke.txt")?;
    dev.forget(e.nodeid, 1)?;
    let st = dev.statfs(ops::ROOT_ID)?;
    println!("statfs: bsize={} blocks={}", st.bsize, st.blocks);
    let t = Instant::now();
    let n = 20_000;
    let mut ok = 0;
    dev.submit_many(
        (0..n).map(|_| ops::getattr(ops::ROOT_ID, None)),
        64,
        |_, r| {
            ok += usize::from(r.errno().is_none());
            Ok(())
        },
    )?;
    let dt = t.elapsed().as_secs_f64();
    println!(
        "{ok}/{n} pipelined getattr in {dt:.3}s = {:.0} ops/s",
        n as f64 / dt
    );
    Ok(())
}
