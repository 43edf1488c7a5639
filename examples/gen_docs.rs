//! Writes the book's generated page, the option reference (`docs/src/configuration/options.md`),
//! from the code: `cargo run --example gen_docs` after adding or changing an option. A unit
//! test (`docs::reference`) fails until the page in the repository is the rendered one.

use std::path::Path;

use union_virtiofsd::docs::reference::{options_page, OPTIONS_PAGE};

fn main() -> std::io::Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(OPTIONS_PAGE);
    std::fs::create_dir_all(path.parent().expect("the page is in a directory"))?;
    std::fs::write(&path, options_page())?;
    println!("wrote {}", path.display());
    Ok(())
}
