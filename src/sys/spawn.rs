//! Children started with signals ignored from their first instruction on: the disposition is
//! set between fork and exec, and an ignored signal stays ignored across exec. Knows nothing
//! of what the child is.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes `cmd`'s child ignore `signals` (SIG_IGN) from before it runs its program, so that no
/// signal sent to it as soon as it exists can end it before it installs handlers of its own.
pub fn ignoring<'c>(cmd: &'c mut Command, signals: &'static [i32]) -> &'c mut Command {
    // SAFETY: the closure runs in the forked child before exec and calls only signal(2),
    // which is async-signal-safe; it touches no memory of the parent's.
    unsafe {
        cmd.pre_exec(move || {
            for &sig in signals {
                if libc::signal(sig, libc::SIG_IGN) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_starts_with_the_signals_ignored() {
        let out = ignoring(
            Command::new("sh").args(["-c", "grep SigIgn /proc/self/status"]),
            &[libc::SIGTERM, libc::SIGHUP],
        )
        .output()
        .unwrap();
        let line = String::from_utf8(out.stdout).unwrap();
        let mask = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
        for sig in [libc::SIGTERM, libc::SIGHUP] {
            assert_ne!(mask & (1 << (sig - 1)), 0, "{sig} ignored: {line}");
        }
        assert_eq!(mask & (1 << (libc::SIGINT - 1)), 0, "SIGINT not: {line}");
    }
}
