//! The built-in `append_line` tool: appends a line to a file under the current directory.
//!
//! It is a side effect the runtime must never repeat, and says so
//! ([`ToolEffect::Idempotent`]): with the store's effect records (every tree the CLI builds
//! keeps them), a call recorded done is not run again when its run is continued after a
//! crash or taken over by another worker, and a call that was in flight is reported
//! interrupted instead of being run twice. Paths are relative, inside the current
//! directory (no `..`, no absolute path); the file is created when missing.

use std::io::Write;
use std::path::{Component, Path, PathBuf};

use arbor_core::{Tool, ToolContext, ToolEffect, ToolError, async_trait};
use schemars::JsonSchema;
use serde::Deserialize;

/// Appends a line to a file.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AppendLine;

/// Arguments of [`AppendLine`].
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AppendArgs {
    /// The file, relative to the current directory.
    pub(crate) path: String,
    /// The line to append (without its newline; it may not hold one).
    pub(crate) text: String,
}

/// The file `path` names under the current directory, or why it may not be written.
fn confined(path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    if path.is_empty() {
        return Err("path: empty".to_owned());
    }
    if p.components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "path: {path:?} must stay inside the current directory (relative, without ..)"
        ));
    }
    Ok(p.to_path_buf())
}

#[async_trait]
impl Tool for AppendLine {
    type Args = AppendArgs;
    type Output = String;

    fn name(&self) -> &str {
        "append_line"
    }

    fn description(&self) -> &str {
        "Appends one line of text to a file under the current directory (created if missing). \
         Never repeated for the same call."
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Idempotent
    }

    async fn call(&self, args: AppendArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        let path = confined(&args.path).map_err(ToolError::ToModel)?;
        if args.text.contains(['\n', '\r']) {
            return Err(ToolError::ToModel(
                "text: one line, without a line break".to_owned(),
            ));
        }
        let line = format!("{}\n", args.text);
        let shown = args.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            file.write_all(line.as_bytes())?;
            file.sync_data()
        })
        .await
        .map_err(|e| ToolError::ToModel(format!("append_line: {e}")))?
        .map_err(|e| ToolError::ToModel(format!("{shown}: {}", crate::store::io_reason(&e))))?;
        Ok(format!("appended a line to {shown}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_current_directory() {
        assert!(confined("notes/out.txt").is_ok());
        assert!(confined("./out.txt").is_ok());
        for bad in ["", "/etc/passwd", "../out.txt", "a/../../b"] {
            assert!(confined(bad).is_err(), "{bad}");
        }
        assert_eq!(
            confined("../x").unwrap_err(),
            "path: \"../x\" must stay inside the current directory (relative, without ..)"
        );
    }
}
