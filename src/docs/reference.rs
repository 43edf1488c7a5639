//! The book's option reference (`docs/src/configuration/options.md`), rendered from what the
//! code already knows: clap's definitions of the command lines and the option registry with
//! its list of ignored names. A unit test compares the page in the repository with this
//! rendering, so the two never disagree. Pure rendering: nothing here reads or writes a file.

use std::fmt::Write as _;

use clap::{Arg, ArgAction, Args as _, Command, CommandFactory};

use crate::args::Args;
use crate::config::ignored::{Origin, IGNORED, IGNORED_PREFIXES};
use crate::config::registry::OPTIONS;
use crate::config::runtime;
use crate::fs::options::Func;

/// Where the rendered page lives, relative to the repository root.
pub const OPTIONS_PAGE: &str = "docs/src/configuration/options.md";

/// The one command that writes the page again (run in the repository root).
pub const REGENERATE: &str = "cargo run --example gen_docs";

/// The option reference page (markdown), as it must be in [`OPTIONS_PAGE`].
pub fn options_page() -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "# Option reference\n\n\
         <!-- Generated from src/args/, src/config/registry.rs and src/config/ignored.rs \
         by `{REGENERATE}`; do not edit by hand (a unit test compares this file with the \
         code). -->\n\n\
         Every option the daemon takes, generated from its definitions: the same text as \
         `union-virtiofsd --help` and the man page. How they combine (order, config files, \
         virtiofsd's legacy `-o` keys, exit status) is in \
         [Configuration](../configuration.md).\n\n"
    );
    let mut daemon = Args::command();
    daemon.build();
    out.push_str("## Command line\n\n`union-virtiofsd [OPTIONS]`\n\n");
    args_table(&daemon, &mut out);

    out.push_str(
        "\n## Union options (`-o`, `--config`, `ctl`)\n\n\
         mergerfs's names, given as `-o KEY=VALUE,…`, as `KEY=VALUE` lines of a `--config` \
         file, or to `union-virtiofsd ctl set` while the daemon runs (the last column: \
         \"fixed\" options answer EROFS there). `_` and `-` are interchangeable.\n\n\
         | key | meaning | `ctl set` |\n|---|---|---|\n",
    );
    for o in OPTIONS {
        let set = match o.name {
            "branches" | "srcmounts" => "yes",
            n => match runtime::settable(n) {
                Some(true) => "yes",
                Some(false) => "fixed",
                None => "no",
            },
        };
        let _ = writeln!(out, "| `{}` | {} | {set} |", cell(o.name), cell(o.help));
    }
    let funcs: Vec<&str> = Func::ALL.iter().map(|f| f.name()).collect();
    let _ = writeln!(
        out,
        "| `func.<name>` | POLICY for one function: {} | yes |",
        funcs.join(", ")
    );

    out.push_str(
        "\n## Accepted and ignored\n\n\
         Each is accepted so that an existing mergerfs configuration or fstab line works \
         unchanged, and logs this note once per start. Those mergerfs can change while \
         mounted are accepted, to no effect, by `ctl set` too.\n\n\
         | key | from | why |\n|---|---|---|\n",
    );
    for s in IGNORED {
        let from = match (s.origin, s.runtime) {
            (Origin::Mergerfs, true) => "mergerfs (also `ctl set`)",
            (Origin::Mergerfs, false) => "mergerfs",
            (Origin::Mount, _) => "mount option",
        };
        let _ = writeln!(out, "| `{}` | {from} | {} |", cell(s.name), cell(s.why));
    }
    for (prefix, why) in IGNORED_PREFIXES {
        let _ = writeln!(
            out,
            "| `{}*` | mount option | {} |",
            cell(prefix),
            cell(why)
        );
    }

    let ctl = daemon
        .find_subcommand("ctl")
        .expect("ctl is a command")
        .clone();
    let _ = write!(
        out,
        "\n## `union-virtiofsd ctl`\n\n{}\n\n`union-virtiofsd ctl --socket PATH COMMAND`\n\n",
        text(ctl.get_about())
    );
    args_table(&ctl, &mut out);
    out.push_str("\n| command | what it does |\n|---|---|\n");
    for sub in ctl.get_subcommands().filter(|s| s.get_name() != "help") {
        let mut usage = sub.get_name().to_owned();
        for a in sub.get_arguments().filter(|a| a.is_positional()) {
            let v = value_name(a);
            if a.is_required_set() {
                let _ = write!(usage, " {v}");
            } else {
                let _ = write!(usage, " [{v}]");
            }
        }
        let mut what = sentence(text(sub.get_long_about().or(sub.get_about())));
        for a in sub.get_arguments().filter(|a| a.is_positional()) {
            let values = possible_values(a);
            if !values.is_empty() {
                let _ = write!(what, " {}: {values}.", value_name(a));
            }
        }
        let _ = writeln!(out, "| `{}` | {} |", cell(&usage), cell(&what));
    }

    let mount = daemon.find_subcommand("mount").expect("mount is a command");
    let _ = write!(
        out,
        "\n## `union-virtiofsd mount`\n\n{}\n\n`union-virtiofsd mount MOUNTPOINT [OPTIONS]` takes \
         the options above except the vhost-user device's own (`--socket-path`, `--fd`, \
         `--socket-group`, `--tag`, queues, migration, upgrade, sandbox).\n",
        text(mount.get_long_about().or(mount.get_about()))
    );
    let fstab = crate::args::FstabArgs::augment_args(Command::new("fstab"));
    let branches = fstab
        .get_arguments()
        .find(|a| a.get_id() == "fstab_branches")
        .expect("BRANCHES is an argument");
    let _ = write!(
        out,
        "\n`union-virtiofsd BRANCHES MOUNTPOINT [OPTIONS]` (the options of `mount`): {}.\n",
        text(branches.get_help()).trim_end_matches('.')
    );

    out.push_str("\n## Documentation the binary prints\n\n| command | what it does |\n|---|---|\n");
    for sub in daemon
        .get_subcommands()
        .filter(|s| !["ctl", "mount"].contains(&s.get_name()))
    {
        let mut usage = format!("union-virtiofsd {}", sub.get_name());
        let mut what = text(sub.get_about());
        for a in sub.get_arguments().filter(|a| a.is_positional()) {
            let _ = write!(usage, " {}", value_name(a));
            let _ = write!(what, " ({}: {})", value_name(a), possible_values(a));
        }
        let _ = writeln!(out, "| `{}` | {} |", cell(&usage), cell(&what));
    }
    out
}

/// One row per visible option of `cmd`: how it is written, its default, what it does.
fn args_table(cmd: &Command, out: &mut String) {
    out.push_str("| option | default | meaning |\n|---|---|---|\n");
    for a in cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
    {
        let takes = a.get_action().takes_values();
        let default: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = if takes && !default.is_empty() {
            format!("`{}`", cell(&default.join(",")))
        } else {
            String::new()
        };
        let mut meaning = sentence(text(a.get_long_help().or(a.get_help())));
        let values = possible_values(a);
        if !values.is_empty() {
            let _ = write!(meaning, " Values: {values}.");
        }
        if matches!(a.get_action(), ArgAction::Append) && !meaning.contains("repeatable") {
            meaning.push_str(" Repeatable.");
        }
        let _ = writeln!(
            out,
            "| `{}` | {default} | {} |",
            cell(&syntax(a)),
            cell(&meaning)
        );
    }
}

/// How an option is written: `-o, --option KEY=VALUE,...`, `--posix-acl[=MODE]`.
fn syntax(a: &Arg) -> String {
    let mut names = Vec::new();
    if let Some(s) = a.get_short() {
        names.push(format!("-{s}"));
    }
    if let Some(l) = a.get_long() {
        names.push(format!("--{l}"));
    }
    names.extend(
        a.get_visible_aliases()
            .unwrap_or_default()
            .into_iter()
            .map(|l| format!("--{l}")),
    );
    let mut s = names.join(", ");
    if a.get_action().takes_values() {
        let v = value_name(a);
        if a.get_num_args().is_some_and(|n| n.min_values() == 0) {
            let _ = write!(s, "[={v}]");
        } else if a.is_require_equals_set() {
            let _ = write!(s, "={v}");
        } else {
            let _ = write!(s, " {v}");
        }
    }
    s
}

/// An argument's value name (`PATH`), or its id in capitals.
fn value_name(a: &Arg) -> String {
    a.get_value_names()
        .map(|v| v.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| a.get_id().as_str().to_ascii_uppercase())
}

/// The visible values of an enumerated argument, each with its meaning: "`a` (…), `b` (…)".
fn possible_values(a: &Arg) -> String {
    a.get_possible_values()
        .iter()
        .filter(|p| !p.is_hide_set())
        .map(|p| match p.get_help() {
            Some(h) => format!(
                "`{}` ({})",
                p.get_name(),
                text(Some(h)).trim_end_matches('.')
            ),
            None => format!("`{}`", p.get_name()),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `s` ending with a full stop (clap's help lines have none), unless it is empty.
fn sentence(mut s: String) -> String {
    if !s.is_empty() && !s.ends_with('.') {
        s.push('.');
    }
    s
}

/// A help text as one line.
fn text(s: Option<&clap::builder::StyledStr>) -> String {
    let s = s.map(|s| s.to_string()).unwrap_or_default();
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `s` made safe for a markdown table cell: pipes escaped (in code spans too, as tables
/// require), and outside code spans `<` escaped so that `<name>` is not taken for HTML.
fn cell(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut code = false;
    for c in s.chars() {
        match c {
            '`' => {
                code = !code;
                out.push(c);
            }
            '|' => out.push_str("\\|"),
            '<' if !code => out.push_str("&lt;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_page_is_the_rendered_one() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(OPTIONS_PAGE);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == options_page(),
            "{OPTIONS_PAGE} differs from the options in the code: run `{REGENERATE}` \
             and commit the result"
        );
    }

    #[test]
    fn every_visible_option_and_key_is_on_the_page() {
        let page = options_page();
        for a in Args::command().get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(l) = a.get_long() {
                assert!(page.contains(&format!("--{l}")), "--{l}");
            }
        }
        for o in OPTIONS {
            assert!(page.contains(&format!("`{}`", o.name)), "{}", o.name);
        }
        assert!(!page.contains("test-panic-on-lookup"));
    }

    #[test]
    fn cells_escape_pipes_and_tags() {
        assert_eq!(cell("a|b `x|y` <s> `<s>`"), "a\\|b `x\\|y` &lt;s> `<s>`");
    }
}
