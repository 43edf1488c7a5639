//! The book's and README's links, checked on every quick test run: each relative link names a
//! file that exists (for a page of the book, one inside `docs/src`, which is all mdBook
//! publishes) and each `#anchor` a heading of its page, with the ids mdBook gives headings;
//! external links must only look like links (no network here). Also: every page of
//! `docs/src` is in `SUMMARY.md`, and every policy the code has is on the policies page.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use crate::union::policy::Policy;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.md` file under `dir`.
fn pages(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            pages(&p, out);
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
}

/// The lines of `text` outside fenced code blocks, with inline code spans removed.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        // Empty lines in their place, so that a line's index is its number in the file.
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push(String::new());
            continue;
        }
        if fenced {
            out.push(String::new());
            continue;
        }
        let mut kept = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                kept.push_str(part);
            }
        }
        out.push(kept);
    }
    out
}

/// mdBook's id for a heading's text (`normalize_id` after `id_from_content`): markup and
/// entities dropped, letters, digits, `_` and `-` kept (lower case), white space made `-`.
fn heading_id(text: &str) -> String {
    let mut plain = String::new();
    let mut in_tag = false;
    // Links keep their text only; code spans their content.
    let text = strip_link_targets(text).replace('`', "");
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if !in_tag => plain.push(c),
            _ => {}
        }
    }
    plain
        .trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_ascii_lowercase())
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// `[text](target)` → `text`.
fn strip_link_targets(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("](") {
        let Some(end) = rest[i..].find(')') else {
            break;
        };
        out.push_str(&rest[..i].replace('[', ""));
        rest = &rest[i + end + 1..];
    }
    out.push_str(&rest.replace(['[', ']'], ""));
    out
}

/// The ids of `text`'s headings, as mdBook numbers repeated ones (`-1`, `-2`, …).
fn heading_ids(text: &str) -> HashSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut ids = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !line[hashes..].starts_with(' ') {
            continue;
        }
        let id = heading_id(line[hashes..].trim().trim_end_matches('#'));
        let n = seen.entry(id.clone()).or_insert(0);
        ids.insert(if *n == 0 { id } else { format!("{id}-{n}") });
        *n += 1;
    }
    ids
}

/// The targets of the inline links and images on `line`.
fn targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        // `[text](target "title")`
        let t = rest[..end].split_whitespace().next().unwrap_or("");
        out.push(t.trim_matches(['<', '>']).to_owned());
        rest = &rest[end..];
    }
    out
}

/// `path` with `.` and `..` resolved (without touching the filesystem).
fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// What is wrong with `target`, a link on the page `page`; `inside` is the directory the
/// link must stay in.
fn check(page: &Path, target: &str, inside: &Path) -> Option<String> {
    if let Some(rest) = target
        .strip_prefix("https://")
        .or(target.strip_prefix("http://"))
    {
        let host = rest.split('/').next().unwrap_or("");
        return (host.is_empty() || !host.contains('.') || target.contains(char::is_whitespace))
            .then(|| "not a well-formed URL".to_owned());
    }
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        clean(&page.parent().unwrap().join(path))
    };
    if !file.starts_with(inside) {
        return Some(format!(
            "{} is outside {}",
            file.display(),
            inside.display()
        ));
    }
    if !file.exists() {
        return Some(format!("{} does not exist", file.display()));
    }
    if anchor.is_empty() {
        return None;
    }
    if file.extension().is_none_or(|x| x != "md") {
        return Some("an anchor into a file that is not a page".to_owned());
    }
    let ids = heading_ids(&std::fs::read_to_string(&file).unwrap());
    (!ids.contains(anchor))
        .then(|| format!("no heading of {} has the id #{anchor}", file.display()))
}

#[test]
fn every_link_of_the_book_and_the_readme_resolves() {
    let root = root();
    let book = root.join("docs/src");
    let mut files = Vec::new();
    pages(&book, &mut files);
    files.push(root.join("README.md"));
    let mut broken = Vec::new();
    let mut count = 0;
    for page in &files {
        let inside = if page.starts_with(&book) {
            &book
        } else {
            &root
        };
        let text = std::fs::read_to_string(page).unwrap();
        for (n, line) in prose(&text).iter().enumerate() {
            for t in targets(line) {
                count += 1;
                if let Some(why) = check(page, &t, inside) {
                    let at = page.strip_prefix(&root).unwrap().display();
                    broken.push(format!("{at}:{}: ({t}): {why}", n + 1));
                }
            }
        }
    }
    assert!(count > 50, "only {count} links found: is the parser blind?");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_is_in_the_summary() {
    let book = root().join("docs/src");
    let summary = std::fs::read_to_string(book.join("SUMMARY.md")).unwrap();
    let listed: HashSet<PathBuf> = prose(&summary)
        .iter()
        .flat_map(|l| targets(l))
        .map(|t| book.join(t))
        .collect();
    let mut files = Vec::new();
    pages(&book, &mut files);
    let missing: Vec<_> = files
        .iter()
        .filter(|p| !p.ends_with("SUMMARY.md") && !listed.contains(*p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(missing.is_empty(), "pages not in SUMMARY.md: {missing:?}");
}

#[test]
fn every_policy_is_on_the_policies_page() {
    let page = std::fs::read_to_string(root().join("docs/src/policies.md")).unwrap();
    for p in Policy::ALL {
        assert!(
            page.contains(&format!("| `{}` |", p.name())),
            "docs/src/policies.md has no row for {}",
            p.name()
        );
    }
}

#[test]
fn heading_ids_are_mdbooks() {
    assert_eq!(
        heading_id("Union options (`-o`, `--config`, `ctl`)"),
        "union-options--o---config-ctl"
    );
    assert_eq!(
        heading_id("virtiofsd's legacy `-o` keys"),
        "virtiofsds-legacy--o-keys"
    );
    assert_eq!(
        heading_id("Request size (max_pages)"),
        "request-size-max_pages"
    );
    assert_eq!(heading_id("[Memory](x.md) use"), "memory-use");
    let ids = heading_ids("# A\n## A\n```\n# B\n```\n");
    assert_eq!(ids, HashSet::from(["a".to_owned(), "a-1".to_owned()]));
    assert_eq!(
        targets("see [a](b.md#c) and ![i](p.png \"t\")"),
        ["b.md#c", "p.png"]
    );
}
