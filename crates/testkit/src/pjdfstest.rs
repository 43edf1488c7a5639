//! pjdfstest (the Rust port of the POSIX conformance suite) as the tests run it: where its
//! binary is (installed by scripts/build-pjdfstest-initrd.sh or scripts/test.sh), and its
//! output read back as counts, failures and skips. Runs nothing itself.

use std::path::PathBuf;

/// The suite's binary: `$PJDFSTEST`, else `$UVFS_TOOLS/pjdfstest/bin/pjdfstest` as
/// scripts/lib.sh's `install_pjdfstest` installs it.
pub fn binary() -> PathBuf {
    crate::bin::tool("pjdfstest")
}

/// What one suite run reported.
#[derive(Debug)]
pub struct Summary {
    /// Cases failed.
    pub failed: u32,
    /// Cases skipped.
    pub skipped: u32,
    /// Cases passed.
    pub passed: u32,
    /// Cases in all.
    pub total: u32,
    /// `name (why)` of each failed case.
    pub failures: Vec<String>,
    /// `name: why` of each skipped case.
    pub skips: Vec<String>,
}

/// `line` without ANSI colour sequences (the suite colours its output).
pub fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ params letter
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The suite's output `lines` read back (panics without its summary line).
pub fn parse(lines: &[String]) -> Summary {
    let lines: Vec<String> = lines.iter().map(|l| plain(l)).collect();
    let num = |line: &str, word: &str| -> u32 {
        line.split(',')
            .find_map(|part| {
                part.trim()
                    .strip_suffix(word)?
                    .trim()
                    .rsplit(' ')
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no '{word}' count in {line:?}"))
    };
    let summary = lines
        .iter()
        .find(|l| l.starts_with("Summary:"))
        .unwrap_or_else(|| {
            panic!(
                "no summary line in the suite's output:\n{}",
                lines.join("\n")
            )
        });
    let mut failures = Vec::new();
    let mut skips = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let l = l.trim_end();
        if l.ends_with("FAILED") {
            let why = lines.get(i + 1).map(|s| s.trim()).unwrap_or_default();
            failures.push(format!(
                "{} ({why})",
                l.split_whitespace().next().unwrap_or(l)
            ));
        } else if l.ends_with("skipped") {
            let why = lines.get(i + 1).map(|s| s.trim()).unwrap_or_default();
            skips.push(format!(
                "{}: {why}",
                l.split_whitespace().next().unwrap_or(l)
            ));
        }
    }
    Summary {
        failed: num(summary, "failed"),
        skipped: num(summary, "skipped"),
        passed: num(summary, "passed"),
        total: num(summary, "total"),
        failures,
        skips,
    }
}

/// The one case the suite may skip on a FUSE filesystem, and why: `link_count_max` needs a
/// LINK_MAX that FUSE does not report.
pub const EXPECTED_SKIPS: &[(&str, &str)] = &[("link::link_count_max", "LINK_MAX")];

/// Asserts that a run of the whole suite (at least 398 cases) failed nothing and skipped
/// nothing but [`EXPECTED_SKIPS`].
pub fn check(s: &Summary) {
    assert_eq!(
        s.failed,
        0,
        "{} failing cases:\n  {}",
        s.failures.len(),
        s.failures.join("\n  ")
    );
    assert!(s.total >= 398 && s.passed + s.skipped == s.total, "{s:?}");
    let unexpected: Vec<_> = s
        .skips
        .iter()
        .filter(|k| {
            !EXPECTED_SKIPS
                .iter()
                .any(|(name, why)| k.contains(name) && k.contains(why))
        })
        .collect();
    assert!(unexpected.is_empty(), "unexpected skips: {unexpected:#?}");
}
