//! What the merge reads of git, parsed: a child's files and patch (NUL-separated, never
//! through the user's external diff or text conversion), a page of a patch, and the
//! conflicts a merge would have (`git merge-tree`, without touching the checkout).

use std::path::Path;

use crate::error::{CodingError, CodingResult};
use crate::git;

/// One file a change touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// Its path in the repository.
    pub path: String,
    /// Lines added (`None` for a binary file).
    pub added: Option<u64>,
    /// Lines removed (`None` for a binary file).
    pub removed: Option<u64>,
}

/// A file a merge would conflict on, with its conflicting hunks (capped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// Its path.
    pub path: String,
    /// The conflicting hunks, with git's markers.
    pub hunks: String,
}

/// The most of a conflict's hunks returned per file, in bytes.
const MAX_HUNK_BYTES: usize = 8 * 1024;
/// The most files with conflicts returned.
const MAX_CONFLICTS: usize = 50;

/// A command whose whole stdout is wanted (a patch: not trimmed), or its error.
pub(super) async fn checked(g: &Path, repo: &Path, args: &[&str]) -> CodingResult<String> {
    let (code, out, err) = git::run(g, repo, args).await?;
    if code == Some(0) {
        Ok(out)
    } else {
        Err(CodingError::Git {
            args: args.join(" "),
            stderr: err,
        })
    }
}

/// The conflicts a merge of `tip` into HEAD would have, found without touching the checkout
/// (`git merge-tree --write-tree`); empty when it merges cleanly.
pub(super) async fn dry_run(g: &Path, repo: &Path, tip: &str) -> CodingResult<Vec<Conflict>> {
    let (code, out, err) = git::run(
        g,
        repo,
        &[
            "merge-tree",
            "--write-tree",
            "-z",
            "--name-only",
            "--no-messages",
            "HEAD",
            tip,
        ],
    )
    .await?;
    match code {
        Some(0) => return Ok(Vec::new()),
        Some(1) => {}
        _ => {
            return Err(CodingError::Git {
                args: format!("merge-tree HEAD {tip}"),
                stderr: err,
            });
        }
    }
    // `<tree>NUL<path>NUL…NUL` (the file list ends with an empty entry).
    let mut parts = out.split('\0');
    let tree = parts.next().unwrap_or_default().trim().to_owned();
    let paths: Vec<&str> = parts.take_while(|p| !p.is_empty()).collect();
    let mut conflicts = Vec::new();
    for path in paths.iter().take(MAX_CONFLICTS) {
        let spec = format!("{tree}:{path}");
        let (code, content, _) = git::run(g, repo, &["cat-file", "-p", &spec]).await?;
        let hunks = if code == Some(0) {
            hunks_of(&content)
        } else {
            String::new()
        };
        conflicts.push(Conflict {
            path: (*path).to_owned(),
            hunks: if hunks.is_empty() {
                "(no text hunks: a binary file, or one deleted or renamed on one side)".to_owned()
            } else {
                hunks
            },
        });
    }
    if paths.len() > MAX_CONFLICTS {
        conflicts.push(Conflict {
            path: String::new(),
            hunks: format!("… and {} more files", paths.len() - MAX_CONFLICTS),
        });
    }
    if conflicts.is_empty() {
        // git says it conflicts without naming a file: a conflict all the same.
        conflicts.push(Conflict {
            path: String::new(),
            hunks: "the merge conflicts (git named no file)".to_owned(),
        });
    }
    Ok(conflicts)
}

/// The conflicting hunks of a file holding git's markers, capped at [`MAX_HUNK_BYTES`].
fn hunks_of(content: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in content.lines() {
        if line.starts_with("<<<<<<<") {
            inside = true;
        }
        if inside {
            if out.len() + line.len() + 1 > MAX_HUNK_BYTES {
                out.push_str("… (cut)\n");
                break;
            }
            out.push_str(line);
            out.push('\n');
        }
        if line.starts_with(">>>>>>>") {
            inside = false;
        }
    }
    out
}

/// The files changed from `base` to `tip`, with their lines added and removed (renames as a
/// deletion and an addition; paths as they are, NUL-separated).
pub(super) async fn numstat(
    g: &Path,
    repo: &Path,
    base: &str,
    tip: &str,
) -> CodingResult<Vec<FileChange>> {
    let out = checked(
        g,
        repo,
        &[
            "diff",
            "--numstat",
            "-z",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            base,
            tip,
        ],
    )
    .await?;
    Ok(out
        .split('\0')
        .filter_map(|l| {
            let mut parts = l.splitn(3, '\t');
            let added = parts.next()?;
            let removed = parts.next()?;
            let path = parts.next()?;
            Some(FileChange {
                path: path.trim_start_matches('\n').to_owned(),
                added: added.trim_start_matches('\n').parse().ok(),
                removed: removed.parse().ok(),
            })
        })
        .collect())
}

/// At most `max` bytes of `text` from `offset`, cut at a line's end when one fits (else at
/// a character boundary, and never nothing: a page holds at least one character), and where
/// the next page starts.
pub(super) fn page_of(text: &str, offset: usize, max: usize) -> (String, Option<usize>) {
    let mut start = offset.min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let rest = &text[start..];
    if rest.len() <= max {
        return (rest.to_owned(), None);
    }
    let mut end = max.max(1).min(rest.len());
    while end > 0 && !rest.is_char_boundary(end) {
        end -= 1;
    }
    if end == 0 {
        end = rest.chars().next().map_or(rest.len(), char::len_utf8);
    }
    if let Some(nl) = rest[..end].rfind('\n') {
        end = nl + 1;
    }
    (
        rest[..end].to_owned(),
        (start + end < text.len()).then_some(start + end),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cut_at_line_ends_and_chain() {
        let text = "one\ntwo\nthree\n";
        assert_eq!(page_of(text, 0, 100), (text.to_owned(), None));
        assert_eq!(page_of(text, 0, 9), ("one\ntwo\n".to_owned(), Some(8)));
        assert_eq!(page_of(text, 8, 9), ("three\n".to_owned(), None));
        // No line end in reach: cut at a character boundary; never an empty page.
        assert_eq!(page_of("ééé", 0, 3), ("é".to_owned(), Some(2)));
        assert_eq!(page_of("ééé", 0, 1), ("é".to_owned(), Some(2)));
        assert_eq!(page_of(text, 99, 5), (String::new(), None));
    }

    #[test]
    fn hunks_keep_the_markers_and_what_is_between() {
        let file = "a\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> b\nz\n";
        assert_eq!(
            hunks_of(file),
            "<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> b\n"
        );
    }
}
