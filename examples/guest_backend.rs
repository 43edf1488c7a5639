//! Runs the real-guest smoke scenario (create, write, read back, rename, unlink, readdir, a 4 MiB
//! dd round trip) against any vhost-user-fs backend serving one directory, e.g. the reference
//! virtiofsd, to validate the e2e harness or to compare backends. Not a test: it needs that backend.
//!
//! ```text
//! cargo run --example guest_backend -- virtiofsd --socket-path {socket} --shared-dir {dir} --cache never
//! ```
//! `{socket}` becomes the vhost-user socket, `{dir}` a fresh temporary directory to serve.
//!
//! With `--mergerfs` first, it runs the union e2e scenario instead (crates/testkit/src/union_case.rs),
//! with `{dir}` a mergerfs mount of branch a (RW) and a read-only bind mount of branch b (RO): a
//! check that the e2e test's expectations are mergerfs's behaviour. Needs root, mergerfs, FUSE.

use std::fs;
use std::path::Path;
use std::process::{Command, ExitCode};

use testkit::{guest, union_case};

const SCENARIO: &str = r#"
expect_eq "$(cat hello.txt)" "from host" "read host file"
echo created > new.txt
expect_eq "$(cat new.txt)" "created" "read back"
mv new.txt renamed.txt
[ ! -e new.txt ] || fail "rename left the old name"
echo tmp > gone.txt; rm gone.txt
[ ! -e gone.txt ] || fail "unlink"
mkdir d; echo x > d/x
dd if=/dev/urandom of=/tmp/big bs=1M count=4 2>/dev/null
dd if=/tmp/big of=big.bin bs=1M 2>/dev/null
sync; echo 3 > /proc/sys/vm/drop_caches
cmp /tmp/big big.bin || fail "4 MiB round trip differs"
dd if=big.bin of=direct.bin bs=1M oflag=direct 2>/dev/null
dd if=direct.bin of=/tmp/big2 bs=1M iflag=direct 2>/dev/null
cmp /tmp/big /tmp/big2 || fail "4 MiB O_DIRECT round trip differs"
rm direct.bin
section ls ls -1
"#;

/// Runs `program args`, panicking unless it succeeds.
fn sh(program: &str, args: &[&str]) {
    let status = Command::new(program).args(args).status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "{program} {args:?} failed"
    );
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The union scenario against `backend` serving a mergerfs mount of the union-case branches.
fn mergerfs_reference(program: &str, args: &[String]) -> ExitCode {
    let br = union_case::branches();
    let b_before = testkit::tree::snapshot(br.b.path());
    let (b_ro, mnt) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // mergerfs's RO mode only keeps creates off a branch; a read-only bind mount makes writes to
    // existing files fail with EROFS too, which is what our RO mode promises.
    sh(
        "mount",
        &["--bind", path_str(br.b.path()), path_str(b_ro.path())],
    );
    sh("mount", &["-o", "remount,bind,ro", path_str(b_ro.path())]);
    let branches = format!("{}=RW:{}=RO", path_str(br.a.path()), path_str(b_ro.path()));
    sh(
        "mergerfs",
        &[
            "-o",
            "cache.files=off,category.create=epmfs",
            &branches,
            path_str(mnt.path()),
        ],
    );
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("{dir}", path_str(mnt.path())))
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = std::panic::catch_unwind(|| {
        guest::run_scenario(
            &guest::Backend::command(program, &args),
            &guest::Guest::default(),
            union_case::UNION_SCENARIO,
        )
    });
    sh("fusermount3", &["-u", path_str(mnt.path())]);
    sh("umount", &[path_str(b_ro.path())]);
    let run = run.unwrap_or_else(|e| std::panic::resume_unwind(e));
    println!("{}", run.console);
    union_case::check(&run, &br, &b_before);
    println!("guest_backend --mergerfs: PASS ({:.1?})", run.elapsed);
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--mergerfs") {
        argv.remove(0);
        if let Some((program, args)) = argv.split_first() {
            return mergerfs_reference(program, args);
        }
    }
    let Some((program, args)) = argv.split_first() else {
        eprintln!(
            "usage: guest_backend [--mergerfs] PROGRAM ARGS... ({{socket}}, {{dir}} are substituted)"
        );
        return ExitCode::from(2);
    };
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("hello.txt"), "from host\n").expect("write");
    let dir_str = dir.path().to_str().expect("utf-8");
    let args: Vec<String> = args.iter().map(|a| a.replace("{dir}", dir_str)).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let run = guest::run_scenario(
        &guest::Backend::command(program, &args),
        &guest::Guest::default(),
        SCENARIO,
    );
    println!("{}", run.console);
    println!("guest run took {:.1?}", run.elapsed);
    let listing = run.section("ls").unwrap_or_default();
    let host_ok = fs::read(dir.path().join("big.bin")).map_or(0, |b| b.len()) == 4 << 20
        && fs::read_to_string(dir.path().join("renamed.txt"))
            .ok()
            .as_deref()
            == Some("created\n")
        && listing == ["big.bin", "d", "hello.txt", "renamed.txt"];
    if run.exit_code == Some(0) && host_ok {
        println!("guest_backend: PASS");
        ExitCode::SUCCESS
    } else {
        println!(
            "guest_backend: FAIL (listing {listing:?}, host_ok={host_ok})\n{}",
            run.transcript()
        );
        ExitCode::FAILURE
    }
}
