//! The `options` target: command lines and `-o` option strings through the config layer,
//! clap's `Args::try_parse_from` then `Config::try_from`, and the option registry
//! (`Settings::apply_list`, `Settings::apply_file`) on its own. Every outcome must be a value:
//! no panic, and every error displays.
//!
//! Input: NUL-separated fields. The first is a config file's text (used when the command line
//! names `--config`, and given to `apply_file`); the rest are the arguments after the program
//! name. Inputs that would make the config layer walk the host's tree (a glob pattern with an
//! absolute or `..` path) are skipped: expanding `/**` is slow, not wrong.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

use clap::Parser;
use rustix::mount::{MountFlags, UnmountFlags};
use union_virtiofsd::args::Args;
use union_virtiofsd::config::registry::Settings;
use union_virtiofsd::config::{early_log_level, Config};

/// Makes a scratch directory the process's working directory, with a few subdirectories for
/// relative branch paths and globs and room for the config file `--config` is pointed at: a
/// small tmpfs, detached at once so that it goes with the process (without the right to
/// mount, a temporary directory that stays behind).
fn scratch() {
    static DIR: OnceLock<Option<tempfile::TempDir>> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::Builder::new()
            .prefix("uvfs-fuzz-options-")
            .tempdir()
            .expect("temporary directory");
        let flags = MountFlags::NODEV | MountFlags::NOSUID | MountFlags::NOEXEC;
        let mounted = rustix::mount::mount("tmpfs", d.path(), "tmpfs", flags, c"size=1m").is_ok();
        for sub in ["a", "b", "b/c", "ro"] {
            std::fs::create_dir(d.path().join(sub)).expect("subdirectory");
        }
        std::env::set_current_dir(d.path()).expect("chdir");
        if mounted {
            rustix::mount::unmount(d.path(), UnmountFlags::DETACH).expect("detach tmpfs");
            None
        } else {
            Some(d)
        }
    });
}

/// Whether `data` holds a glob that could reach beyond the scratch directory.
fn walks_host(data: &[u8]) -> bool {
    if !data.iter().any(|c| b"*?[".contains(c)) {
        return false;
    }
    let absolute = data
        .iter()
        .enumerate()
        .any(|(i, &c)| c == b'/' && (i == 0 || b"\0=:,\n \t".contains(&data[i - 1])));
    absolute || data.windows(2).any(|w| w == b"..") || data.contains(&b'~')
}

/// Runs the `options` target on `data`.
pub fn run(data: &[u8]) {
    scratch();
    if walks_host(data) {
        return;
    }
    let mut fields = data.split(|&c| c == 0);
    let config_text = fields.next().unwrap_or_default();
    let argv: Vec<&OsStr> = std::iter::once(OsStr::new("union-virtiofsd"))
        .chain(fields.map(OsStr::from_bytes))
        .collect();

    // The registry alone: each field as an `-o` list, the first as a config file.
    let mut s = Settings::default();
    for a in &argv[1..] {
        if let Err(e) = s.apply_list(&a.to_string_lossy()) {
            let _ = e.to_string();
        }
    }
    let text = String::from_utf8_lossy(config_text);
    if let Err(e) = Settings::default().apply_file("fuzz.conf", &text) {
        let _ = e.to_string();
    }

    // The command line, as `main` parses it.
    let mut args = match Args::try_parse_from(&argv) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.render().to_string();
            return;
        }
    };
    if args.config.is_some() {
        let mut f = std::fs::File::create("fuzz.conf").expect("config file");
        f.write_all(config_text).expect("write config file");
        args.config = Some("fuzz.conf".into());
    }
    let _ = early_log_level(&args);
    match Config::try_from(args) {
        Ok(c) => {
            let _ = format!("{c:?}");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}
