//! `run_command`: a program run in the worktree (argv, no shell) with a timeout, bounded
//! output, a cleared environment, and its whole process group killed when it ends, times
//! out, is cancelled or its call is dropped. Unless the host opts out, the host is made
//! unreadable by it first ([`crate::host`]).

use std::process::Stdio;
use std::time::Duration;

use arbor_core::{Tool, ToolContext, ToolError};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::host::{self, GroupGuard};
use crate::paths::Workdir;

/// Bytes of stdout and of stderr `run_command` keeps.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// `run_command`'s default timeout.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// The longest timeout `run_command` accepts.
pub const MAX_TIMEOUT_MS: u64 = 10 * 60 * 1000;

fn to_model(e: impl std::fmt::Display) -> ToolError {
    ToolError::ToModel(e.to_string())
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
pub struct RunCommand {
    dir: Workdir,
    protect_host: bool,
}

impl RunCommand {
    /// Runs commands in `dir`, with the host protected ([`crate::host`]).
    pub fn new(dir: Workdir) -> Self {
        Self {
            dir,
            protect_host: true,
        }
    }

    /// Whether the host is made unreadable by the commands (default: yes). Off, the host
    /// stays dumpable (debuggers, core dumps) and commands keep the host's capabilities and
    /// any descriptor it left inheritable, but a command can then read the host's
    /// environment and memory. Once a protected `run_command` ran, the process stays
    /// non-dumpable; an opted-out tool's commands still keep the host's capabilities (as
    /// root, enough to read it).
    pub fn protect_host(mut self, on: bool) -> Self {
        self.protect_host = on;
        self
    }
}

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
        // Fail closed: a host that asked for protection and could not get it runs nothing.
        if self.protect_host {
            host::protect_host().map_err(ToolError::Fatal)?;
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
        command
            .args(rest)
            .current_dir(self.dir.root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = host::spawn(command, self.protect_host)
            .await
            .map_err(|e| to_model(format!("cannot run {program}: {e}")))?;
        // From here on, however this call ends (its future dropped included), the command's
        // whole process group is killed.
        let mut guard = GroupGuard::new(child.id());
        let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(ToolError::Fatal(
                "the command's output could not be read".into(),
            ));
        };
        let (stdout, stderr) = (Shared::default(), Shared::default());
        // The pipes are drained while the program runs (a full pipe would stall it).
        let readers = tokio::spawn({
            let (o, e) = (stdout.clone(), stderr.clone());
            async move {
                tokio::join!(capture(out, o), capture(err, e));
            }
        });
        guard.readers(readers.abort_handle());
        let waited = tokio::select! {
            r = tokio::time::timeout(Duration::from_millis(timeout), child.wait()) => r,
            () = ctx.cancel.cancelled() => {
                drop(guard);
                return Err(ToolError::ToModel("the command was cancelled".into()));
            }
        };
        // The program ended (or timed out): the output may trail a moment, then whatever
        // it left running is killed with it.
        let _ = tokio::time::timeout(OUTPUT_GRACE, readers).await;
        drop(guard);
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
