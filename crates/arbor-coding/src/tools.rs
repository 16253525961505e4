//! Coding tools confined to a child's worktree: read, write and list files, apply an edit,
//! and run a command with a timeout and bounded output. Every path is relative to the
//! worktree ([`Workdir::resolve`]); a path that leads out is a tool error the model reads.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use arbor_core::{DynTool, Tool, ToolContext, ToolError, Typed};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::paths::Workdir;

/// Bytes `read_file` returns at most.
pub const MAX_READ_BYTES: usize = 256 * 1024;
/// Bytes `write_file` and `edit_file` write at most.
pub const MAX_WRITE_BYTES: usize = 1024 * 1024;
/// Entries `list_dir` shows at most.
pub const MAX_LIST_ENTRIES: usize = 1000;
/// Bytes of stdout and of stderr `run_command` keeps.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// `run_command`'s default timeout.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// The longest timeout `run_command` accepts.
pub const MAX_TIMEOUT_MS: u64 = 10 * 60 * 1000;

fn to_model(e: impl std::fmt::Display) -> ToolError {
    ToolError::ToModel(e.to_string())
}

/// All five tools, confined to `dir`.
pub fn coding_tools(dir: &Workdir) -> Vec<Arc<dyn DynTool>> {
    vec![
        Arc::new(Typed::new(ReadFile(dir.clone()))),
        Arc::new(Typed::new(WriteFile(dir.clone()))),
        Arc::new(Typed::new(ListDir(dir.clone()))),
        Arc::new(Typed::new(EditFile(dir.clone()))),
        Arc::new(Typed::new(RunCommand(dir.clone()))),
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

/// The one named `name`, confined to `dir`.
pub fn coding_tool(dir: &Workdir, name: &str) -> Option<Arc<dyn DynTool>> {
    let i = CODING_TOOL_NAMES.iter().position(|n| *n == name)?;
    coding_tools(dir).into_iter().nth(i)
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

/// Arguments of `run_command`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunArgs {
    /// The program and its arguments (no shell).
    pub argv: Vec<String>,
    /// Milliseconds before it is killed (default 30,000; at most 600,000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// `run_command`: runs a program in the worktree (no shell), killed at its timeout or when
/// the run is cancelled; each of stdout and stderr is kept up to 64 KiB.
#[derive(Debug, Clone)]
pub struct RunCommand(pub Workdir);

/// What a stream of the command printed so far (at most 64 KiB) and whether more was cut.
#[derive(Debug, Default)]
struct Captured {
    bytes: Vec<u8>,
    cut: bool,
}

type Shared = std::sync::Arc<std::sync::Mutex<Captured>>;

fn lock(c: &Shared) -> std::sync::MutexGuard<'_, Captured> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads `r` into `into` until it ends; what was read stays there even if this is stopped.
async fn capture(mut r: impl tokio::io::AsyncRead + Unpin, into: Shared) {
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let mut c = lock(&into);
                let room = MAX_OUTPUT_BYTES.saturating_sub(c.bytes.len());
                c.bytes.extend_from_slice(&buf[..n.min(room)]);
                c.cut |= n > room;
            }
        }
    }
}

/// How long the output may go on after the program exited (something it started in the
/// background may hold the pipes open).
const OUTPUT_GRACE: Duration = Duration::from_millis(500);

/// Kills the command's whole process group: the program and whatever it started.
fn kill_group(pid: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = pid {
        let _ = std::process::Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{pid}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    #[cfg(not(unix))]
    let _ = pid;
}

#[async_trait]
impl Tool for RunCommand {
    type Args = RunArgs;
    type Output = serde_json::Value;
    fn name(&self) -> &str {
        "run_command"
    }
    fn description(&self) -> &str {
        "Run a program in the worktree (argv, no shell) with a timeout; returns its exit code \
         and output."
    }
    async fn call(&self, args: RunArgs, ctx: ToolContext) -> Result<serde_json::Value, ToolError> {
        let Some((program, rest)) = args.argv.split_first() else {
            return Err(to_model("argv must name a program"));
        };
        let timeout = args.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
        if timeout == 0 || timeout > MAX_TIMEOUT_MS {
            return Err(to_model(format!(
                "timeout_ms must be between 1 and {MAX_TIMEOUT_MS}"
            )));
        }
        let mut command = Command::new(program);
        // Only what a build needs from the environment: never the host's credentials (a
        // provider key, say) nor a GIT_* variable that would redirect git.
        command.env_clear();
        for key in ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TERM", "USER"] {
            if let Some(v) = std::env::var_os(key) {
                command.env(key, v);
            }
        }
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command
            .args(rest)
            .current_dir(self.0.root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| to_model(format!("cannot run {program}: {e}")))?;
        let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(ToolError::Fatal(
                "the command's output could not be read".into(),
            ));
        };
        let pid = child.id();
        let (stdout, stderr) = (Shared::default(), Shared::default());
        // The pipes are drained while the program runs (a full pipe would stall it).
        let readers = tokio::spawn({
            let (o, e) = (stdout.clone(), stderr.clone());
            async move {
                tokio::join!(capture(out, o), capture(err, e));
            }
        });
        let abort = readers.abort_handle();
        let waited = tokio::select! {
            r = tokio::time::timeout(Duration::from_millis(timeout), child.wait()) => r,
            () = ctx.cancel.cancelled() => {
                kill_group(pid);
                abort.abort();
                return Err(ToolError::ToModel("the command was cancelled".into()));
            }
        };
        // The program ended (or timed out): the output may trail a moment, then whatever
        // it left running is killed with it.
        let _ = tokio::time::timeout(OUTPUT_GRACE, readers).await;
        kill_group(pid);
        abort.abort();
        let outcome = waited.map(|status| status.map_err(|e| to_model(format!("{program}: {e}"))));
        let (stdout, stderr) = (
            std::mem::take(&mut *lock(&stdout)),
            std::mem::take(&mut *lock(&stderr)),
        );
        match outcome {
            Err(_) => Ok(serde_json::json!({
                "exit_code": null,
                "timed_out": true,
                "stdout": String::from_utf8_lossy(&stdout.bytes),
                "stderr": format!("{}[killed after {timeout} ms]", String::from_utf8_lossy(&stderr.bytes)),
                "truncated": stdout.cut || stderr.cut,
            })),
            Ok(status) => Ok(serde_json::json!({
                "exit_code": status?.code(),
                "timed_out": false,
                "stdout": String::from_utf8_lossy(&stdout.bytes),
                "stderr": String::from_utf8_lossy(&stderr.bytes),
                "truncated": stdout.cut || stderr.cut,
            })),
        }
    }
}
