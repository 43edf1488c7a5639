//! Writes the man page and the bash, zsh and fish completions into a directory:
//! `cargo run --example gen_docs -- OUTDIR` (scripts/install.sh does this).

use std::path::PathBuf;

use clap_complete::Shell;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| ".".into()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("union-virtiofsd.1"),
        union_virtiofsd::docs::man_page()?,
    )?;
    for (shell, name) in [
        (Shell::Bash, "union-virtiofsd.bash"),
        (Shell::Zsh, "_union-virtiofsd"),
        (Shell::Fish, "union-virtiofsd.fish"),
    ] {
        std::fs::write(dir.join(name), union_virtiofsd::docs::completions(shell))?;
    }
    Ok(())
}
