//! Coding tools confined to a child's worktree: read, write and list files, apply an edit,
//! and run a command ([`crate::run`]). Every path is relative to the worktree
//! ([`Workdir::resolve`]); a path that leads out, or into the repository's git data, is a
//! tool error the model reads.

use std::sync::Arc;

use arbor_core::{DynTool, Tool, ToolContext, ToolError, Typed};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use crate::paths::Workdir;
pub use crate::run::{DEFAULT_TIMEOUT_MS, MAX_OUTPUT_BYTES, MAX_TIMEOUT_MS, RunArgs, RunCommand};

/// Bytes `read_file` returns at most.
pub const MAX_READ_BYTES: usize = 256 * 1024;
/// Bytes `write_file` and `edit_file` write at most.
pub const MAX_WRITE_BYTES: usize = 1024 * 1024;
/// Entries `list_dir` shows at most.
pub const MAX_LIST_ENTRIES: usize = 1000;

fn to_model(e: impl std::fmt::Display) -> ToolError {
    ToolError::ToModel(e.to_string())
}

/// How a host sets up the coding tools.
#[derive(Debug, Clone)]
pub struct ToolOptions {
    protect_host: bool,
}

impl Default for ToolOptions {
    fn default() -> Self {
        Self { protect_host: true }
    }
}

impl ToolOptions {
    /// The defaults: the host is protected from the commands `run_command` starts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `run_command` makes the host unreadable by its commands (default: yes; see
    /// [`crate::host`]). Turn it off only for a host that must stay debuggable (ptrace,
    /// core dumps) and trusts the commands with its environment.
    pub fn protect_host(mut self, on: bool) -> Self {
        self.protect_host = on;
        self
    }
}

/// All five tools, confined to `dir`, with the default [`ToolOptions`].
pub fn coding_tools(dir: &Workdir) -> Vec<Arc<dyn DynTool>> {
    coding_tools_with(dir, &ToolOptions::default())
}

/// All five tools, confined to `dir`, set up by `options`.
pub fn coding_tools_with(dir: &Workdir, options: &ToolOptions) -> Vec<Arc<dyn DynTool>> {
    vec![
        Arc::new(Typed::new(ReadFile(dir.clone()))),
        Arc::new(Typed::new(WriteFile(dir.clone()))),
        Arc::new(Typed::new(ListDir(dir.clone()))),
        Arc::new(Typed::new(EditFile(dir.clone()))),
        Arc::new(Typed::new(
            RunCommand::new(dir.clone()).protect_host(options.protect_host),
        )),
    ]
}

/// The names of [`coding_tools`].
pub const CODING_TOOL_NAMES: [&str; 5] = [
    "read_file",
    "write_file",
    "list_dir",
    "edit_file",
    "run_command",
];

/// The one named `name`, confined to `dir`, with the default [`ToolOptions`].
pub fn coding_tool(dir: &Workdir, name: &str) -> Option<Arc<dyn DynTool>> {
    coding_tool_with(dir, name, &ToolOptions::default())
}

/// The one named `name`, confined to `dir`, set up by `options`.
pub fn coding_tool_with(
    dir: &Workdir,
    name: &str,
    options: &ToolOptions,
) -> Option<Arc<dyn DynTool>> {
    let i = CODING_TOOL_NAMES.iter().position(|n| *n == name)?;
    coding_tools_with(dir, options).into_iter().nth(i)
}

/// Arguments naming one path.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathArgs {
    /// A path relative to the worktree.
    pub path: String,
}

/// `read_file`: a text file's content (at most 256 KiB, cut on a character boundary).
#[derive(Debug, Clone)]
pub struct ReadFile(pub Workdir);

#[async_trait]
impl Tool for ReadFile {
    type Args = PathArgs;
    type Output = String;
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "Read a text file of the worktree (path relative to it)."
    }
    async fn call(&self, args: PathArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        let path = self.0.resolve(&args.path).map_err(to_model)?;
        let total = regular_file(&path, &args.path).await?;
        let mut bytes = Vec::new();
        let file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| to_model(format!("cannot read {}: {e}", args.path)))?;
        file.take(MAX_READ_BYTES as u64 + 4)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| to_model(format!("cannot read {}: {e}", args.path)))?;
        let total = total as usize;
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if text.len() > MAX_READ_BYTES {
            let mut cut = MAX_READ_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str(&format!(
                "\n[truncated: {total} bytes, showing the first {cut}]"
            ));
        }
        Ok(text)
    }
}

/// The size of the regular file at `path`; anything else (a folder, a FIFO, a device) is
/// refused, so a read never blocks.
async fn regular_file(path: &std::path::Path, shown: &str) -> Result<u64, ToolError> {
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|e| to_model(format!("cannot read {shown}: {e}")))?;
    if !meta.is_file() {
        return Err(to_model(format!("{shown} is not a regular file")));
    }
    Ok(meta.len())
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// A path relative to the worktree; missing folders are made.
    pub path: String,
    /// The whole new content.
    pub content: String,
}

/// `write_file`: creates or replaces a file. An artifact.
#[derive(Debug, Clone)]
pub struct WriteFile(pub Workdir);

#[async_trait]
impl Tool for WriteFile {
    type Args = WriteArgs;
    type Output = String;
    fn name(&self) -> &str {
        "write_file"
    }
    fn description(&self) -> &str {
        "Create or replace a file of the worktree with the given content."
    }
    fn writes_artifact(&self) -> bool {
        true
    }
    async fn call(&self, args: WriteArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        if args.content.len() > MAX_WRITE_BYTES {
            return Err(to_model(format!(
                "content is {} bytes; write at most {MAX_WRITE_BYTES}",
                args.content.len()
            )));
        }
        let path = self.0.resolve(&args.path).map_err(to_model)?;
        if path == self.0.root() {
            return Err(to_model("a file path is required"));
        }
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| to_model(format!("cannot create folders for {}: {e}", args.path)))?;
        }
        tokio::fs::write(&path, args.content.as_bytes())
            .await
            .map_err(|e| to_model(format!("cannot write {}: {e}", args.path)))?;
        Ok(format!(
            "wrote {} ({} bytes)",
            self.0.display(&path),
            args.content.len()
        ))
    }
}

/// Arguments of `list_dir`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// A folder relative to the worktree (default: its top).
    #[serde(default)]
    pub path: Option<String>,
}

/// `list_dir`: a folder's entries, sorted, folders ending in `/` (at most 1000).
#[derive(Debug, Clone)]
pub struct ListDir(pub Workdir);

#[async_trait]
impl Tool for ListDir {
    type Args = ListArgs;
    type Output = String;
    fn name(&self) -> &str {
        "list_dir"
    }
    fn description(&self) -> &str {
        "List a folder of the worktree (default: its top); folders end in '/'."
    }
    async fn call(&self, args: ListArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        let shown = args.path.unwrap_or_default();
        let path = self.0.resolve(&shown).map_err(to_model)?;
        let mut dir = tokio::fs::read_dir(&path)
            .await
            .map_err(|e| to_model(format!("cannot list {shown:?}: {e}")))?;
        let mut names = Vec::new();
        while let Some(entry) = dir
            .next_entry()
            .await
            .map_err(|e| to_model(format!("cannot list {shown:?}: {e}")))?
        {
            let mut name = entry.file_name().to_string_lossy().into_owned();
            if name == ".git" {
                continue;
            }
            if entry.file_type().await.is_ok_and(|t| t.is_dir()) {
                name.push('/');
            }
            names.push(name);
        }
        names.sort();
        let total = names.len();
        names.truncate(MAX_LIST_ENTRIES);
        let mut out = names.join("\n");
        if total > MAX_LIST_ENTRIES {
            out.push_str(&format!("\n[{} more entries]", total - MAX_LIST_ENTRIES));
        }
        Ok(out)
    }
}

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// A path relative to the worktree.
    pub path: String,
    /// Text that occurs exactly once in the file.
    pub old: String,
    /// What replaces it.
    pub new: String,
}

/// `edit_file`: replaces one exact, unique occurrence of `old` with `new`. An artifact.
#[derive(Debug, Clone)]
pub struct EditFile(pub Workdir);

#[async_trait]
impl Tool for EditFile {
    type Args = EditArgs;
    type Output = String;
    fn name(&self) -> &str {
        "edit_file"
    }
    fn description(&self) -> &str {
        "Replace one exact, unique occurrence of `old` with `new` in a file of the worktree."
    }
    fn writes_artifact(&self) -> bool {
        true
    }
    async fn call(&self, args: EditArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        if args.old.is_empty() {
            return Err(to_model("`old` must not be empty"));
        }
        let path = self.0.resolve(&args.path).map_err(to_model)?;
        let size = regular_file(&path, &args.path).await?;
        if size > MAX_WRITE_BYTES as u64 {
            return Err(to_model(format!(
                "{} is {size} bytes; edit files of at most {MAX_WRITE_BYTES}",
                args.path
            )));
        }
        let text = tokio::fs::read_to_string(&path)
            .await
            .map_err(|e| to_model(format!("cannot read {}: {e}", args.path)))?;
        let found = text.matches(&args.old).count();
        if found != 1 {
            return Err(to_model(format!(
                "`old` occurs {found} times in {}; it must occur exactly once",
                args.path
            )));
        }
        let edited = text.replacen(&args.old, &args.new, 1);
        if edited.len() > MAX_WRITE_BYTES {
            return Err(to_model(format!(
                "the edited file would be {} bytes; at most {MAX_WRITE_BYTES}",
                edited.len()
            )));
        }
        tokio::fs::write(&path, edited.as_bytes())
            .await
            .map_err(|e| to_model(format!("cannot write {}: {e}", args.path)))?;
        Ok(format!("edited {}", self.0.display(&path)))
    }
}
