//! Fuzz-style properties of the spec parser, on stable Rust so CI always runs them (the
//! coverage-guided target is `fuzz/fuzz_targets/spec.rs`): the repository's example specs
//! with bytes edited, lines dropped or repeated, and values replaced by hostile ones, and
//! token soup, all go through `check_spec` (what `arbor run` does before it opens a store):
//! it returns a spec or a one-line error naming the file, never panics.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use proptest::prelude::*;

const EXAMPLES: [&str; 5] = [
    include_str!("../../../examples/approvals.toml"),
    include_str!("../../../examples/coding-loop.toml"),
    include_str!("../../../examples/replies.toml"),
    include_str!("../../../examples/review.toml"),
    include_str!("../../../examples/tools.toml"),
];

/// Values that break arithmetic, limits and lookups when they replace one in a spec.
const HOSTILE: [&str; 16] = [
    "-1",
    "0",
    "18446744073709551615",
    "9223372036854775807",
    "1e308",
    "nan",
    "inf",
    "\"\"",
    "[]",
    "{}",
    "\"../../etc\"",
    "\"openai\"",
    "\"anthropic\"",
    "true",
    "[\"spawn_agent\", \"spawn_agent\"]",
    "{ max_active_children = 0 }",
];

const TOKENS: [&str; 14] = [
    "[agents.a]",
    "[[agents.a.turns]]",
    "task = \"t\"",
    "text = \"x\"",
    "provider = ",
    "\"openai\"",
    "children = [\"a\"]",
    "root = \"a\"",
    "\n",
    "=",
    "[",
    "]",
    "{",
    "}",
];

fn check(text: &str) {
    if let Err(e) = arbor_cli::check_spec("spec.toml", text) {
        assert!(e.starts_with("spec.toml"), "{e}");
        assert!(!e.contains('\n'), "errors are one line: {e:?}");
    }
}

fn edited(seed: &str, edits: &[(usize, u8, u8)]) -> String {
    let mut b = seed.as_bytes().to_vec();
    for &(pos, op, byte) in edits {
        let at = if b.is_empty() { 0 } else { pos % b.len() };
        match op % 3 {
            0 if !b.is_empty() => b[at] = byte,
            1 => b.insert(at, byte),
            _ if !b.is_empty() => {
                b.remove(at);
            }
            _ => b.push(byte),
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// Lines dropped (`op` 0), repeated (1) or given a hostile value after their `=` (2).
fn lines_damaged(seed: &str, edits: &[(usize, u8, usize)]) -> String {
    let mut lines: Vec<String> = seed.lines().map(str::to_owned).collect();
    for &(line, op, value) in edits {
        if lines.is_empty() {
            break;
        }
        let at = line % lines.len();
        match op % 3 {
            0 => {
                lines.remove(at);
            }
            1 => {
                let l = lines[at].clone();
                lines.insert(at, l);
            }
            _ => {
                if let Some(eq) = lines[at].find('=') {
                    let head = lines[at][..=eq].to_owned();
                    lines[at] = format!("{head} {}", HOSTILE[value % HOSTILE.len()]);
                }
            }
        }
    }
    lines.join("\n")
}

#[test]
fn every_example_parses() {
    for text in EXAMPLES {
        arbor_cli::check_spec("spec.toml", text).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn examples_with_bytes_edited_never_panic(
        seed in 0..EXAMPLES.len(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..6),
    ) {
        check(&edited(EXAMPLES[seed], &edits));
    }

    #[test]
    fn examples_with_lines_damaged_never_panic(
        seed in 0..EXAMPLES.len(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<usize>()), 1..6),
    ) {
        check(&lines_damaged(EXAMPLES[seed], &edits));
    }

    #[test]
    fn token_soup_never_panics(tokens in proptest::collection::vec(0..TOKENS.len(), 0..30)) {
        let text: String = tokens.iter().map(|&t| TOKENS[t]).collect::<Vec<_>>().join(" ");
        check(&text);
    }
}
