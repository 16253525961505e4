//! What a command reads besides the store: a spec file, standard input (at most 1 MiB of
//! UTF-8 text), and the root's task (`--task TEXT`, `--task -`, or the spec's).

use crate::fail::Fail;
use crate::store::io_reason;

/// The most text read from standard input may hold (a task, a message).
const MAX_STDIN_BYTES: u64 = 1 << 20;

/// A spec file's path as shown and its text; a usage error naming it when it cannot be read.
pub(crate) fn read_spec(spec: &std::path::Path) -> Result<(String, String), Fail> {
    let path = spec.display().to_string();
    let text = std::fs::read_to_string(spec)
        .map_err(|e| Fail::usage(format!("cannot read {path}: {}", io_reason(&e))))?;
    Ok((path, text))
}

/// Standard input to its end, as UTF-8 text of at most 1 MiB; `what` names it in errors.
pub(crate) fn read_stdin(what: &str) -> Result<String, Fail> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(MAX_STDIN_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            Fail::usage(format!(
                "{what}: cannot read standard input: {}",
                io_reason(&e)
            ))
        })?;
    if bytes.len() as u64 > MAX_STDIN_BYTES {
        return Err(Fail::usage(format!(
            "{what}: standard input holds more than {MAX_STDIN_BYTES} bytes"
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| Fail::usage(format!("{what}: standard input is not UTF-8 text")))
}

/// The root's task: `--task TEXT`, `--task -` (standard input, to its end), or the spec's.
/// Refused (as bad usage, before anything is stored) when it is empty.
pub(crate) fn task(path: &str, given: Option<&str>, spec_task: &str) -> Result<String, Fail> {
    let task = match given {
        Some("-") => read_stdin("--task -")?,
        Some(text) => text.to_owned(),
        None => spec_task.to_owned(),
    };
    if task.trim().is_empty() {
        return Err(Fail::usage(match given {
            Some(_) => "--task: the task is empty".to_owned(),
            None => format!(
                "{path}: no task: give one with --task TEXT (or --task - to read it from \
                 standard input), or task = \"...\" in the spec"
            ),
        }));
    }
    Ok(task)
}
