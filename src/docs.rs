//! The man page and shell completions, generated from the clap definitions (so they never
//! drift from `--help`). Used by `examples/gen_docs.rs` and `scripts/install.sh`.

use clap::CommandFactory;
use clap_complete::Shell;

use crate::args::Args;

fn command() -> clap::Command {
    Args::command().after_help(crate::config::registry::help_text())
}

/// The man page (roff), section 1.
pub fn man_page() -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    clap_mangen::Man::new(command()).render(&mut out)?;
    Ok(out)
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command(), "union-virtiofsd", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn man_page_and_completions_name_the_options() {
        let man = String::from_utf8(man_page().unwrap()).unwrap();
        assert!(man.contains(".TH union-virtiofsd 1"), "{}", &man[..200]);
        for opt in [
            "readonly",
            "shared\\-dir",
            "socket\\-path",
            "print\\-capabilities",
        ] {
            assert!(man.contains(opt), "man page lacks {opt}");
        }
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let c = String::from_utf8(completions(shell)).unwrap();
            assert!(
                c.contains("readonly") && c.contains("shared-dir"),
                "{shell}"
            );
        }
    }
}
