//! virtiofsd's legacy `-o` keys (`-o source=DIR,cache=none,xattr,no_flock,…`, as libvirt and
//! older launchers write them), accepted in the same `-o` strings as the mergerfs options, and
//! the notes logged for virtiofsd settings this daemon cannot honour. The rule where a name
//! means something to both: a bare key is virtiofsd's switch, `key=VALUE` is mergerfs's option
//! (`xattr` = `xattr=passthrough`, while `xattr=nosys` is mergerfs's mode; `posix_acl` =
//! `posix_acl=true`, mergerfs's boolean). Pure parsing: nothing here acts.

use std::path::PathBuf;
use std::time::Duration;

use log::LevelFilter;

use crate::args::{CachePolicy, CapChanges, NegotiationMode, SandboxMode};

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
    /// `modcaps=+cap:-cap…`.
    pub modcaps: Option<CapChanges>,
    /// `xattrmap=…`.
    pub xattrmap: Option<String>,
    /// `posix_acl` / `no_posix_acl` (always / never).
    pub posix_acl: Option<NegotiationMode>,
    /// `security_label` / `no_security_label` (always / never).
    pub security_label: Option<NegotiationMode>,
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
    // A switch takes no value; its positive form also takes a mergerfs boolean.
    let switch = |on: bool| match (value, on) {
        ("", _) => Ok(on),
        ("true" | "1" | "yes" | "on", true) => Ok(true),
        ("false" | "0" | "no" | "off", true) => Ok(false),
        (_, true) => Err("no value, true or false"),
        (_, false) => Err("no value"),
    };
    let flag = |slot: &mut Option<bool>, on: bool| switch(on).map(|v| *slot = Some(v));
    let mode = |slot: &mut Option<NegotiationMode>, on: bool| {
        switch(on).map(|v| {
            *slot = Some(if v {
                NegotiationMode::Always
            } else {
                NegotiationMode::Never
            })
        })
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
        "modcaps" => match value.parse() {
            Ok(c) => set(&mut l.modcaps, c),
            Err(_) => Err("(+|-)CAPABILITY:… such as +sys_admin:-chown"),
        },
        "xattrmap" => set(&mut l.xattrmap, value.to_string()),
        "posix-acl" => mode(&mut l.posix_acl, true),
        "no-posix-acl" => mode(&mut l.posix_acl, false),
        "security-label" => mode(&mut l.security_label, true),
        "no-security-label" => mode(&mut l.security_label, false),
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
        assert!(apply(&mut l, "writeback", "maybe").unwrap().is_err());
        assert!(apply(&mut l, "no-writeback", "true").unwrap().is_err());
        assert!(apply(&mut l, "category.create", "ff").is_none());
        assert!(apply(&mut l, "modcaps", "+sys_admin:chown")
            .unwrap()
            .is_err());
        assert!(apply(&mut l, "modcaps", "+no_such_cap").unwrap().is_err());
    }

    #[test]
    fn switches_take_mergerfs_booleans() {
        // mergerfs's `posix_acl=BOOL` and virtiofsd's bare `posix_acl` mean the same.
        let mut l = Legacy::default();
        apply(&mut l, "posix-acl", "").unwrap().unwrap();
        assert_eq!(l.posix_acl, Some(NegotiationMode::Always));
        apply(&mut l, "posix-acl", "false").unwrap().unwrap();
        assert_eq!(l.posix_acl, Some(NegotiationMode::Never));
        apply(&mut l, "no-security-label", "").unwrap().unwrap();
        assert_eq!(l.security_label, Some(NegotiationMode::Never));
        apply(&mut l, "writeback", "true").unwrap().unwrap();
        assert_eq!(l.writeback, Some(true));
        apply(&mut l, "modcaps", "+SYS_ADMIN:-cap_chown")
            .unwrap()
            .unwrap();
        assert_eq!(
            l.modcaps.map(|c| c.to_string()).as_deref(),
            Some("+sys_admin:-chown")
        );
    }
}
