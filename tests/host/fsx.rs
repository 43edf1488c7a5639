//! Data integrity on the host mount: fsx (`cargo install fsx`, scripts/lib.sh's install_fsx),
//! its default mix and qemu/fsx-all.toml (every operation it has: mmap reads and writes,
//! fallocate, punch hole, copy_file_range…), each on its own file over one branch. Each run
//! must end "A-OK", as in the guest (tests/guest/integrity.rs).

use std::path::Path;
use std::process::Command;

use testkit::hostmount::HostMount;
use testkit::tmpfs::Tmpfs;

/// Operations per fsx run.
pub const OPS: &str = "10000";

#[test]
fn fsx_both_mixes_end_a_ok() {
    let a = Tmpfs::new("64M");
    let m = HostMount::new(&[a.path()], crate::ops::SMALL);
    let artifacts = tempfile::tempdir().unwrap();
    let all = Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu/fsx-all.toml");
    for (mix, config) in [("default", None), ("all", Some(&all))] {
        let mut cmd = Command::new(testkit::bin::tool("fsx"));
        cmd.args(["-N", OPS, "-S", "7", "-q", "-P"])
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
            "fsx {mix}: {}\n{text}\n{}",
            out.status,
            m.log()
        );
    }
}
