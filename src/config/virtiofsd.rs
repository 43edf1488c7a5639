//! virtiofsd's legacy `-o` keys (`-o source=DIR,cache=none,xattr,no_flock,…`, as libvirt and
//! older launchers write them), accepted in the same `-o` strings as the mergerfs options, and
//! the notes logged for virtiofsd settings this daemon cannot honour. Where a name means
//! something to both (only `xattr`), a bare `xattr` is virtiofsd's "enable" and `xattr=VALUE`
//! is mergerfs's mode. Pure parsing: nothing here acts.

use std::path::PathBuf;
use std::time::Duration;

use log::LevelFilter;

use crate::args::{CachePolicy, SandboxMode};

/// What the legacy keys set, kept until `config` merges it with the typed flags.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Legacy {
    /// `source=DIR`: the shared directory (first, read-write branch).
    pub source: Option<PathBuf>,
    /// `cache=auto|always|metadata|none`.
    pub cache: Option<CachePolicy>,
    /// `sandbox=namespace|chroot`.
    pub sandbox: Option<SandboxMode>,
    /// `loglevel=debug|info|warn|err`.
    pub log_level: Option<LevelFilter>,
    /// `timeout=SECS`: the cache timeout of old virtiofsd.
    pub timeout: Option<Duration>,
    /// `modcaps=…`.
    pub modcaps: Option<String>,
    /// `xattrmap=…`.
    pub xattrmap: Option<String>,
    /// `posix_acl` / `no_posix_acl`.
    pub posix_acl: Option<bool>,
    /// `security_label` / `no_security_label`.
    pub security_label: Option<bool>,
    /// `writeback` / `no_writeback`.
    pub writeback: Option<bool>,
    /// `flock`, `posix_lock` (host-side locks asked for) / `no_flock`, `no_posix_lock`.
    pub locks: Option<bool>,
    /// `announce_submounts`.
    pub announce_submounts: Option<bool>,
    /// `killpriv_v2` / `no_killpriv_v2`.
    pub killpriv_v2: Option<bool>,
    /// `readdirplus` / `no_readdirplus`.
    pub readdirplus: Option<bool>,
}

/// Applies legacy key `name` (normalized: `_` as `-`) with `value`; `None` if it is not one.
pub(crate) fn apply(l: &mut Legacy, name: &str, value: &str) -> Option<Result<(), &'static str>> {
    let flag = |slot: &mut Option<bool>, on: bool| {
        if value.is_empty() {
            *slot = Some(on);
            Ok(())
        } else {
            Err("no value")
        }
    };
    Some(match name {
        "source" if !value.is_empty() => {
            l.source = Some(PathBuf::from(value));
            Ok(())
        }
        "source" => Err("a directory"),
        "cache" => match value {
            "auto" => set(&mut l.cache, CachePolicy::Auto),
            "always" => set(&mut l.cache, CachePolicy::Always),
            "metadata" => set(&mut l.cache, CachePolicy::Metadata),
            "none" | "never" => set(&mut l.cache, CachePolicy::Never),
            _ => Err("auto, always, metadata or none"),
        },
        "sandbox" => match value {
            "namespace" => set(&mut l.sandbox, SandboxMode::Namespace),
            "chroot" => set(&mut l.sandbox, SandboxMode::Chroot),
            "none" => set(&mut l.sandbox, SandboxMode::None),
            _ => Err("namespace, chroot or none"),
        },
        "loglevel" => match value {
            "debug" => set(&mut l.log_level, LevelFilter::Debug),
            "info" => set(&mut l.log_level, LevelFilter::Info),
            "warn" => set(&mut l.log_level, LevelFilter::Warn),
            "err" | "error" => set(&mut l.log_level, LevelFilter::Error),
            _ => Err("debug, info, warn or err"),
        },
        "timeout" => match value
            .parse::<f64>()
            .ok()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
        {
            Some(d) => set(&mut l.timeout, d),
            None => Err("a number of seconds"),
        },
        "modcaps" => set(&mut l.modcaps, value.to_string()),
        "xattrmap" => set(&mut l.xattrmap, value.to_string()),
        "posix-acl" => flag(&mut l.posix_acl, true),
        "no-posix-acl" => flag(&mut l.posix_acl, false),
        "security-label" => flag(&mut l.security_label, true),
        "no-security-label" => flag(&mut l.security_label, false),
        "writeback" => flag(&mut l.writeback, true),
        "no-writeback" => flag(&mut l.writeback, false),
        "flock" | "posix-lock" => flag(&mut l.locks, true),
        "no-flock" | "no-posix-lock" => flag(&mut l.locks, false),
        "announce-submounts" => flag(&mut l.announce_submounts, true),
        "killpriv-v2" => flag(&mut l.killpriv_v2, true),
        "no-killpriv-v2" => flag(&mut l.killpriv_v2, false),
        "readdirplus" => flag(&mut l.readdirplus, true),
        "no-readdirplus" => flag(&mut l.readdirplus, false),
        // Old virtiofsd/libvirt spellings with no effect on a vhost-user device.
        "norace" | "no-norace" | "allow-direct-io" | "no-allow-direct-io" => Ok(()),
        _ => return None,
    })
}

fn set<T>(slot: &mut Option<T>, v: T) -> Result<(), &'static str> {
    *slot = Some(v);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libvirt_legacy_strings() {
        let mut l = Legacy::default();
        for (k, v) in [
            ("source", "/srv"),
            ("cache", "none"),
            ("sandbox", "chroot"),
            ("xattrmap", ":map::user.virtiofs.:"),
            ("no-flock", ""),
            ("posix-lock", ""),
            ("loglevel", "debug"),
        ] {
            apply(&mut l, k, v).unwrap().unwrap();
        }
        assert_eq!(l.source, Some(PathBuf::from("/srv")));
        assert_eq!(l.cache, Some(CachePolicy::Never));
        assert_eq!(l.sandbox, Some(SandboxMode::Chroot));
        assert_eq!(l.locks, Some(true));
        assert_eq!(l.log_level, Some(LevelFilter::Debug));
        assert!(apply(&mut l, "cache", "sometimes").unwrap().is_err());
        assert!(apply(&mut l, "writeback", "yes").unwrap().is_err());
        assert!(apply(&mut l, "category.create", "ff").is_none());
    }
}
