#!/usr/bin/env bash
# Builds the documentation, an mdBook in docs/ (docs/src/SUMMARY.md lists its pages), outside
# the clone, and checks it; prints the directory of the built book.
#   scripts/build-docs.sh [OUT]        # default $UVFS_CACHE/book
# mdbook 0.4.52 (without its server and file watcher) is cargo install'ed into
# $UVFS_TOOLS/mdbook once, and again when this script's pinned version changes (cache_key).
# The checks, any of which fails the build (and .ci/run's "docs book" step):
#   - mdbook itself: a page SUMMARY.md names but docs/src lacks (book.toml: create-missing =
#     false), a page it cannot render;
#   - `cargo test --lib docs::`: every relative link and #anchor in docs/src/*.md and README.md
#     resolves, with mdBook's heading ids, and stays inside the book; external links are only
#     checked to look like links (no network); every page is in SUMMARY.md; the generated
#     option reference (docs/src/configuration/options.md) is what the code renders (else:
#     `cargo run --example gen_docs`); every policy has a row on the policies page. The quick
#     tier runs the same tests.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$UVFS_ROOT"

out=${1:-$UVFS_CACHE/book}
version=0.4.52
mdbook="$UVFS_TOOLS/mdbook/bin/mdbook"
key=$(cache_key mdbook "$version" no-default-features search)
if ! cache_fresh "$mdbook" "$key" || ! "$mdbook" --version | grep -qx "mdbook v$version"; then
    log "cargo install mdbook $version"
    cargo install --quiet --locked mdbook --version "$version" --no-default-features \
        --features search --root "$UVFS_TOOLS/mdbook" --force >&2
    cache_stamp "$mdbook" "$key"
fi

"$mdbook" build docs --dest-dir "$out" >&2
cargo test --quiet --lib docs:: >&2
log "book: $out/index.html"
echo "$out"
