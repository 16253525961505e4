//! Error text never steers code: no source file decides what to do by reading an error's
//! message (`e.to_string().contains(…)`, `message.starts_with(…)`, `fail.message == …`).
//! Errors carry what code needs as types (`CoreErrorKind`, `DenyReason`, `CoreError::field`,
//! `SpecError::table`). Test modules (`#[cfg(test)]` to the end of a file, `tests.rs`) may
//! read messages: they assert what a person reads.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};

/// What reads an error's text.
const PATTERNS: [&str; 9] = [
    ".to_string().contains(",
    ".to_string().starts_with(",
    ".to_string().ends_with(",
    ".to_string().to_lowercase()",
    ".to_string() ==",
    "message.starts_with(",
    "message.contains(",
    "message.strip_prefix(",
    "message ==",
];

/// Where reading text is the point: a provider's own error body (its wire format, not
/// arbor's messages), classified into arbor's typed errors.
const ALLOWED: [&str; 1] = ["crates/arbor-model/src/http/mod.rs"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines of `text` outside its test module, with their numbers.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .take_while(|(_, l)| l.trim() != "#[cfg(test)]")
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
}

fn offenders(text: &str) -> Vec<(usize, String)> {
    code_lines(text)
        .filter(|(_, l)| PATTERNS.iter().any(|p| l.contains(p)))
        .map(|(n, l)| (n, l.trim().to_owned()))
        .collect()
}

#[test]
fn no_source_file_decides_by_an_errors_message() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 100, "only {} files read", files.len());
    let mut found = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if ALLOWED.contains(&rel.as_str()) || rel.ends_with("/tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in offenders(&text) {
            found.push(format!("{rel}:{n}: {line}"));
        }
    }
    assert!(
        found.is_empty(),
        "code reads error text (give the error a type instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_reader_finds_text_matching_outside_tests_only() {
    let text = "fn f(e: E) {\n    if e.to_string().contains(\"gone\") {}\n    // message == x\n}\n\
                #[cfg(test)]\nmod tests {\n    fn g() { assert!(e.to_string().contains(\"x\")); }\n}\n";
    let found = offenders(text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, 2);
}
