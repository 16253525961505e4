//! The workspace's shape, checked on every test run: no source file imports another that
//! imports it back (directly or around a longer circle), arbor-core's folders are layers
//! (no import against their order, [`LAYER_RULES`]), and files stay small (none over 600
//! lines, the median under 250).
//!
//! The import graph is read from the sources: every `crate::…` and `super::…` path (in `use`
//! lines and inline) is resolved to the deepest module file it reaches. Edges into a crate's
//! `lib.rs` or `main.rs` are not counted: those files only declare modules and re-export.
//! Test modules (`#[cfg(test)]` to the end of a file) and comments are not read.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    missing_docs
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Circles allowed to remain (none: the supervisor's types that refer to each other share
/// one file, `supervisor/runtime.rs`).
const ALLOWED_CIRCLES: &[&[&str]] = &[];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

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

/// The module path of `file` inside its crate's `src` (`["supervisor", "tools"]`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_owned());
    }
    parts
}

/// The file of module `path` in `src`, if there is one.
fn file_of(src: &Path, path: &[String]) -> Option<PathBuf> {
    if path.is_empty() {
        return None;
    }
    let joined: PathBuf = path.iter().collect();
    let flat = src.join(&joined).with_extension("rs");
    if flat.is_file() {
        return Some(flat);
    }
    let nested = src.join(&joined).join("mod.rs");
    nested.is_file().then_some(nested)
}

/// The paths a source text names: `crate::a::b` and `super::a`, with `use` groups
/// (`crate::{a, b::c}`) expanded one level.
fn named_paths(text: &str) -> Vec<(bool, Vec<String>)> {
    let mut out = Vec::new();
    for (start, prefix_len, is_crate) in text
        .match_indices("crate::")
        .map(|(i, _)| (i, 7, true))
        .chain(text.match_indices("super::").map(|(i, _)| (i, 7, false)))
    {
        // Not part of a longer identifier (`my_crate::`, `arbor_crate::`).
        if start > 0 {
            let before = text.as_bytes()[start - 1];
            if before.is_ascii_alphanumeric() || before == b'_' {
                continue;
            }
        }
        let rest = &text[start + prefix_len..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let segs = segments(item.trim());
                if !segs.is_empty() {
                    out.push((is_crate, segs));
                }
            }
        } else {
            let segs = segments(rest);
            if !segs.is_empty() {
                out.push((is_crate, segs));
            }
        }
    }
    out
}

fn segments(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        out.push(rest[..end].to_owned());
        match rest[end..].strip_prefix("::") {
            Some(r) if !r.starts_with('{') && !r.starts_with('*') => rest = r,
            _ => break,
        }
    }
    out
}

/// Import edges between the files of one crate.
fn edges(src: &Path, files: &[PathBuf]) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let text = match text.find("#[cfg(test)]") {
            Some(i) => &text[..i],
            None => &text[..],
        };
        // Comments (doc links included) name paths without importing them.
        let text: String = text
            .lines()
            .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
            .collect::<Vec<_>>()
            .join("\n");
        let here = module_of(src, file);
        let targets = graph.entry(file.clone()).or_default();
        for (is_crate, segs) in named_paths(&text) {
            let mut base: Vec<String> = if is_crate {
                Vec::new()
            } else {
                // `super` is the parent of this file's module (a `mod.rs` is its folder's).
                let mut b = here.clone();
                b.pop();
                b
            };
            let mut deepest = None;
            for seg in &segs {
                if seg == "super" {
                    base.pop();
                    continue;
                }
                base.push(seg.clone());
                match file_of(src, &base) {
                    Some(f) => deepest = Some(f),
                    None => break,
                }
            }
            if let Some(target) = deepest
                && &target != file
            {
                targets.insert(target);
            }
        }
    }
    graph
}

/// Strongly connected components with more than one file (Tarjan).
fn circles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<BTreeSet<PathBuf>> {
    struct State<'a> {
        graph: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        next: usize,
        out: Vec<BTreeSet<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a PathBuf) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(targets) = s.graph.get(v) {
            for w in targets {
                let Some((w, _)) = s.graph.get_key_value(w) else {
                    continue;
                };
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    let lv = s.low[v];
                    s.low.insert(v, lv.min(lw));
                } else if s.on_stack.contains(w) {
                    let iw = s.index[w];
                    let lv = s.low[v];
                    s.low.insert(v, lv.min(iw));
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.insert(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn crate_sources() -> Vec<(PathBuf, Vec<PathBuf>)> {
    let root = workspace();
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        if src.is_dir() {
            let mut files = Vec::new();
            rust_files(&src, &mut files);
            files.sort();
            out.push((src, files));
        }
    }
    out.sort();
    out
}

/// arbor-core's folders are layers: a file of the first may not import one of the second
/// (paths under `crates/arbor-core/src/`). In `supervisor/`: `config/` < `tree/` <
/// `delegation/` < `tools/`, and `runtime.rs` (the supervisor and its parts) sits below
/// `delegation/`; the run loop (`session/`) never reaches the supervisor. Files beside the
/// folders (`request.rs`, `lifecycle.rs`) may use any of them.
const LAYER_RULES: &[(&str, &str)] = &[
    ("supervisor/config/", "supervisor/tree/"),
    ("supervisor/config/", "supervisor/delegation/"),
    ("supervisor/config/", "supervisor/tools/"),
    ("supervisor/tree/", "supervisor/delegation/"),
    ("supervisor/tree/", "supervisor/tools/"),
    ("supervisor/delegation/", "supervisor/tools/"),
    ("supervisor/runtime.rs", "supervisor/delegation/"),
    ("supervisor/runtime.rs", "supervisor/tools/"),
    ("session/", "supervisor/"),
];

/// The imports that break a rule of [`LAYER_RULES`], as `from -> to`.
fn layer_breaks(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>, src: &Path) -> Vec<String> {
    let rel = |p: &Path| {
        p.strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/")
    };
    let mut out = Vec::new();
    for (from, tos) in graph {
        let from = rel(from);
        for to in tos {
            let to = rel(to);
            if LAYER_RULES
                .iter()
                .any(|(a, b)| from.starts_with(a) && to.starts_with(b))
            {
                out.push(format!("{from} -> {to}"));
            }
        }
    }
    out
}

#[test]
fn arbor_cores_folders_are_layers() {
    let (src, files) = crate_sources()
        .into_iter()
        .find(|(src, _)| src.ends_with("arbor-core/src"))
        .unwrap();
    let graph = edges(&src, &files);
    let breaks = layer_breaks(&graph, &src);
    assert!(
        breaks.is_empty(),
        "imports against the folders' order (see LAYER_RULES):\n{}",
        breaks.join("\n")
    );
    // The rules see the imports at all: delegation/ uses tree/ and runtime.rs.
    let seen = graph.iter().any(|(from, tos)| {
        from.to_string_lossy().contains("supervisor/delegation/")
            && tos
                .iter()
                .any(|t| t.to_string_lossy().contains("supervisor/tree/"))
    });
    assert!(
        seen,
        "no delegation/ -> tree/ import read: the reader is broken"
    );
}

/// arbor-cli's `commands/` is the top: each file there is a command's entry, and no other
/// file (but `lib.rs`, which declares the modules) imports one; what two commands share lives
/// beside the folder. `render/` (what is shown) reaches no command either.
#[test]
fn arbor_clis_commands_are_the_top() {
    let (src, files) = crate_sources()
        .into_iter()
        .find(|(src, _)| src.ends_with("arbor-cli/src"))
        .unwrap();
    let graph = edges(&src, &files);
    let rel = |p: &Path| {
        p.strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/")
    };
    let mut breaks = Vec::new();
    let mut commands_import = false;
    for (from, tos) in &graph {
        let from = rel(from);
        for to in tos {
            let to = rel(to);
            if from.starts_with("commands/") && !to.starts_with("commands/") {
                commands_import = true;
            }
            if to.starts_with("commands/") && !from.starts_with("commands/") && from != "lib.rs" {
                breaks.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(
        breaks.is_empty(),
        "files outside commands/ import a command:\n{}",
        breaks.join("\n")
    );
    assert!(
        commands_import,
        "no import from commands/ read: the reader is broken"
    );
}

#[test]
fn a_layer_break_is_found() {
    let src = PathBuf::from("/x/src");
    let mut graph = BTreeMap::new();
    graph.insert(
        src.join("supervisor/tree/live.rs"),
        BTreeSet::from([src.join("supervisor/delegation/slots.rs")]),
    );
    graph.insert(
        src.join("supervisor/tools/spawn_agent.rs"),
        BTreeSet::from([src.join("supervisor/delegation/delegate.rs")]),
    );
    assert_eq!(
        layer_breaks(&graph, &src),
        ["supervisor/tree/live.rs -> supervisor/delegation/slots.rs"]
    );
}

#[test]
fn no_source_file_imports_one_that_imports_it_back() {
    let root = workspace();
    let mut found = Vec::new();
    let mut edges_seen = 0;
    for (src, files) in crate_sources() {
        let graph = edges(&src, &files);
        edges_seen += graph.values().map(BTreeSet::len).sum::<usize>();
        for circle in circles(&graph) {
            let names: BTreeSet<String> = circle
                .iter()
                .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
                .collect();
            let allowed = ALLOWED_CIRCLES
                .iter()
                .any(|a| a.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>() == names);
            if !allowed {
                found.push(names);
            }
        }
    }
    // The reader must see the graph at all (a broken resolver would find no circle).
    assert!(edges_seen > 200, "only {edges_seen} import edges read");
    assert!(
        found.is_empty(),
        "files that import each other in a circle: {found:#?}"
    );
}

#[test]
fn the_reader_finds_a_circle_when_there_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::c::Thing;\n").unwrap();
    std::fs::write(src.join("b/mod.rs"), "pub(crate) mod c;\n").unwrap();
    std::fs::write(
        src.join("b/c.rs"),
        "pub(crate) struct Thing;\nfn f() { crate::a::g(); }\n#[cfg(test)]\nmod t { use super::*; }\n",
    )
    .unwrap();
    let files = vec![
        src.join("a.rs"),
        src.join("b/c.rs"),
        src.join("b/mod.rs"),
        src.join("lib.rs"),
    ];
    let found = circles(&edges(&src, &files));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0],
        BTreeSet::from([src.join("a.rs"), src.join("b/c.rs")])
    );
}

#[test]
fn source_files_stay_small() {
    let root = workspace();
    let mut lengths = Vec::new();
    let mut long = Vec::new();
    for (_, files) in crate_sources() {
        for file in files {
            let n = std::fs::read_to_string(&file).unwrap().lines().count();
            if n > 600 {
                long.push(format!(
                    "{} ({n} lines)",
                    file.strip_prefix(&root).unwrap().display()
                ));
            }
            lengths.push(n);
        }
    }
    lengths.sort_unstable();
    let median = lengths[lengths.len() / 2];
    eprintln!("{} source files, median {median} lines", lengths.len());
    assert!(long.is_empty(), "files over 600 lines: {long:?}");
    assert!(median < 250, "the median source file has {median} lines");
}
