//! Runs the real-guest smoke scenario (create, write, read back, rename, unlink, readdir, a 4 MiB
//! dd round trip) against any vhost-user-fs backend serving one directory, e.g. the reference
//! virtiofsd, to validate the e2e harness or to compare backends. Not a test: it needs that backend.
//!
//! ```text
//! cargo run --example guest_backend -- virtiofsd --socket-path {socket} --shared-dir {dir} --cache never
//! ```
//! `{socket}` becomes the vhost-user socket, `{dir}` a fresh temporary directory to serve.

#[path = "../tests/support/guest.rs"]
mod guest;

use std::fs;
use std::process::ExitCode;

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
section ls ls -1
"#;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some((program, args)) = argv.split_first() else {
        eprintln!("usage: guest_backend PROGRAM ARGS... ({{socket}}, {{dir}} are substituted)");
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
