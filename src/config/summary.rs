//! The one line a start logs at info: what this daemon serves and how (version, socket,
//! branches, policies, cache, sandbox), so that a log says which run it is. Reads the checked
//! `Config`; decides nothing.

use std::fmt::Write;

use crate::vhost::Listen;

use super::Config;

impl Config {
    /// The start line: `union-virtiofsd 0.2.0 on socket S (control S.ctl): branches
    /// /a=RW:/b=RO; category.create=… category.search=… category.action=…; cache.files=…
    /// cache.attr=… cache.entry=…; xattr=…; sandbox namespace, seccomp kill`.
    pub fn summary(&self) -> String {
        let mut s = format!("union-virtiofsd {}", env!("CARGO_PKG_VERSION"));
        match &self.daemon.listen {
            Listen::Path(p) => {
                let _ = write!(s, " on socket {}", p.display());
            }
            Listen::Fd(fd) => {
                let _ = write!(s, " on --fd {fd}");
            }
        }
        // The control socket: --ctl-socket, else `S.ctl` beside the socket, none with --fd
        // alone.
        match self.daemon.ctl_path() {
            Some(c) => {
                let _ = write!(s, " (control {})", c.display());
            }
            None => s.push_str(" (no control socket)"),
        }
        let branches: Vec<String> = self
            .fs
            .branches
            .iter()
            .map(|b| format!("{}={}", b.path.display(), b.mode))
            .collect();
        let _ = write!(s, ": branches {}", branches.join(":"));
        let show = |keys: &[&str]| -> String {
            keys.iter()
                .filter_map(|k| super::runtime::show(&self.fs.opts, k).map(|v| format!("{k}={v}")))
                .collect::<Vec<_>>()
                .join(" ")
        };
        for group in [
            &["category.create", "category.search", "category.action"][..],
            &["cache.files", "cache.attr", "cache.entry"],
            &["xattr"],
        ] {
            let _ = write!(s, "; {}", show(group));
        }
        let name = |v: &dyn std::fmt::Debug| format!("{v:?}").to_ascii_lowercase();
        let _ = write!(
            s,
            "; sandbox {}, seccomp {}",
            name(&self.confinement.sandbox),
            name(&self.confinement.seccomp)
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[test]
    fn the_start_line_names_what_is_served() {
        let args = crate::args::Args::try_parse_from([
            "x",
            "--socket-path=/run/s",
            "--branches=/a=RW:/b=RO",
            "--branch=/c=NC",
            "--sandbox=none",
            "-o",
            "category.create=mfs",
        ])
        .unwrap();
        let c = super::Config::try_from(args).unwrap();
        assert_eq!(
            c.summary(),
            format!(
                "union-virtiofsd {} on socket /run/s (control /run/s.ctl): branches \
                 /a=RW:/b=RO:/c=NC; category.create=mfs category.search=ff \
                 category.action=epall; cache.files=libfuse cache.attr=1 cache.entry=1; \
                 xattr=nosys; sandbox none, seccomp kill",
                env!("CARGO_PKG_VERSION")
            )
        );
    }
}
