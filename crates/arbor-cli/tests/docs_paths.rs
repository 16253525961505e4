//! Docs that stay true: every Rust file a doc names in backticks exists. Read are docs/*.md,
//! the README, CONTRIBUTING.md (a path from the workspace root, from `crates/`, or the tail
//! of a file's path: `owner.rs`, `delegation/remote.rs`), and the doc comments of every
//! crate's sources (a bare file name there is looked for in its own crate). A name may carry
//! a test or item after `::` or `#` (`registry.rs::a_test`); globs (`examples/*.rs`) are not
//! checked.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Every `.rs` file under `dir`, relative to `root`, with `/` separators.
fn rust_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "node_modules" | ".arbor") {
                rust_files(root, &path, out);
            }
        } else if name.ends_with(".rs") {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.push(rel);
        }
    }
}

/// The file names in backticks in `text`: `….rs`, cut before a `::` or `#` that follows.
fn named_files(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|span| {
            let span = span.trim();
            let end = span.find(".rs")? + 3;
            let (name, rest) = span.split_at(end);
            let tail_ok = rest.is_empty() || rest.starts_with("::") || rest.starts_with('#');
            let chars_ok = name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-./*".contains(c));
            (tail_ok && chars_ok && !name.starts_with('.')).then(|| name.to_owned())
        })
        .collect()
}

/// Whether `name` names a file of `files`: the whole path from the root or from `crates/`,
/// or the tail of one within `scope` (a path prefix; empty for all).
fn resolves(name: &str, files: &[String], scope: &str) -> bool {
    if name.contains('*') {
        return true;
    }
    files.iter().any(|f| {
        f == name
            || f.strip_prefix("crates/") == Some(name)
            || (f.starts_with(scope) && f.ends_with(&format!("/{name}")))
    })
}

#[test]
fn every_rust_file_a_doc_names_exists() {
    let root = workspace();
    let mut files = Vec::new();
    rust_files(&root, &root, &mut files);
    let mut missing = Vec::new();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.push(root.join("README.md"));
    docs.push(root.join("CONTRIBUTING.md"));
    let mut named = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        for name in named_files(&text) {
            named += 1;
            if !resolves(&name, &files, "") {
                missing.push(format!("{}: `{name}`", doc.display()));
            }
        }
    }
    for file in files
        .iter()
        .filter(|f| f.starts_with("crates/") && f.contains("/src/"))
    {
        let scope = format!("{}/", file.split("/src/").next().unwrap());
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let comments: String = text
            .lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with("//!") || l.starts_with("///"))
            .collect::<Vec<_>>()
            .join("\n");
        for name in named_files(&comments) {
            named += 1;
            // A bare name is its own crate's file; a path may be any crate's.
            let ok = if name.contains('/') {
                resolves(&name, &files, "")
            } else {
                resolves(&name, &files, &scope)
            };
            if !ok {
                missing.push(format!("{file}: `{name}`"));
            }
        }
    }
    assert!(
        named > 100,
        "only {named} file names read: the reader is broken"
    );
    assert!(
        missing.is_empty(),
        "docs name files that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_reader_takes_names_with_a_test_after_them_and_skips_code() {
    let text = "see `owner.rs`, `registry.rs::a_test`, `ARCH.md#x`, `a.rs#L3`, \
                `let x = y.rs`, `examples/*.rs` and `crates/arbor-core/src/lib.rs`";
    assert_eq!(
        named_files(text),
        [
            "owner.rs",
            "registry.rs",
            "a.rs",
            "examples/*.rs",
            "crates/arbor-core/src/lib.rs"
        ]
    );
    let files = vec!["crates/arbor-cli/src/owner.rs".to_owned()];
    assert!(resolves("owner.rs", &files, ""));
    assert!(resolves("arbor-cli/src/owner.rs", &files, ""));
    assert!(!resolves("owner.rs", &files, "crates/arbor-core/"));
    assert!(!resolves("wner.rs", &files, ""));
}
