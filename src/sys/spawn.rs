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

    /// The ignored-signal mask of a `sh` started by `cmd` (or of this process, `None`).
    fn ignored_mask(cmd: Option<&mut Command>) -> u64 {
        let text = match cmd {
            Some(c) => String::from_utf8(c.output().unwrap().stdout).unwrap(),
            None => std::fs::read_to_string("/proc/self/status").unwrap(),
        };
        let line = text.lines().find(|l| l.starts_with("SigIgn:")).unwrap();
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    }

    #[test]
    fn the_child_starts_with_the_signals_ignored() {
        // SIGUSR1 and SIGUSR2: a shell or nohup the tests run under may ignore SIGINT,
        // SIGHUP or SIGTERM already, and a child inherits that either way.
        let bit = |sig: i32| 1u64 << (sig - 1);
        let sh = || {
            let mut c = Command::new("sh");
            c.args(["-c", "grep SigIgn /proc/self/status"]);
            c
        };
        let ours = ignored_mask(None);
        let with = ignored_mask(Some(ignoring(&mut sh(), &[libc::SIGUSR1])));
        let without = ignored_mask(Some(&mut sh()));
        assert_ne!(with & bit(libc::SIGUSR1), 0, "SIGUSR1 ignored: {with:#x}");
        assert_eq!(
            without & bit(libc::SIGUSR1),
            ours & bit(libc::SIGUSR1),
            "without it, as this process"
        );
        assert_eq!(
            with & bit(libc::SIGUSR2),
            ours & bit(libc::SIGUSR2),
            "only the signals named: {with:#x}"
        );
    }
}
