//! The command-line arguments and the help text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

const RUN_AFTER_HELP: &str = "\
Exit codes:
  0  the root run succeeded
  1  the root run ended failed, aborted or denied (the report is still printed)
  4  the root run is suspended: calls wait for approval and nobody was asked (--no-input, no
     terminal) or one was skipped (arbor approvals, approve, resume)
  2  bad usage or a bad spec (nothing was stored)
  3  the store cannot be opened, is locked by another process, or failed
  130, 143, 129  a signal stopped the run (SIGINT/Ctrl-C, SIGTERM, SIGHUP: 128 + its number);
     it ended aborted and the report is still printed

Environment:
  ARBOR_LOG              log filter for tracing output on stderr (default: warn)
  ARBOR_BUSY_TIMEOUT_MS  how long to wait for a store locked by another process (default: 5000)
  OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_ORG_ID, OPENAI_PROJECT_ID   provider \"openai\"
  ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL                               provider \"anthropic\"

Sessions are named by their id, a unique piece of it (a prefix, or the short id arbor ls
shows), or @latest. On a terminal the run draws a live tree and asks about calls waiting for
approval.

Ctrl-C, SIGTERM and SIGHUP cancel the run: it ends aborted, the report is printed, and the exit
code is 128 + the signal's number. A second signal exits at once.";

/// The `arbor` command line.
#[derive(Debug, Parser)]
#[command(
    name = "arbor",
    version,
    about = "Supervised recursive agent delegation: run agent trees from a spec"
)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

const INSPECT_AFTER_HELP: &str = "\
These commands work on the SQLite store after the run that wrote it has exited; runs whose
process died show as interrupted.

Exit codes:
  0  done
  1  the follow-up or resumed run did not succeed
  4  the resumed run is suspended again
  2  bad usage, an unknown session or child
  130, 143, 129  a signal (SIGINT, SIGTERM, SIGHUP) cancelled the resumed run or follow-up
  3  the store cannot be opened, is locked by another process, or failed";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the root agent of a spec (and the tree it delegates to).
    #[command(after_help = RUN_AFTER_HELP)]
    Run(RunArgs),
    /// List root sessions, or the children of SESSION (status, model, own and aggregate
    /// tokens).
    #[command(after_help = INSPECT_AFTER_HELP)]
    Ls(LsArgs),
    /// Show the whole tree of SESSION with both token totals.
    #[command(after_help = INSPECT_AFTER_HELP)]
    Tree(SessionArgs),
    /// Print the transcript of SESSION, one entry per line.
    #[command(after_help = INSPECT_AFTER_HELP)]
    Log(SessionArgs),
    /// Send a follow-up to the retained child NAME of SESSION; it runs a new turn on it, and
    /// its replies are printed.
    #[command(after_help = INSPECT_AFTER_HELP)]
    Send(SendArgs),
    /// Delete the child NAME of SESSION: a durable tombstone; its transcript stays readable.
    #[command(after_help = INSPECT_AFTER_HELP)]
    Rm(RmArgs),
    /// Rename the child NAME of SESSION to NEW (free among its siblings); the child's
    /// transcript records the rename.
    #[command(after_help = INSPECT_AFTER_HELP)]
    Rename(RenameArgs),
    /// List the calls SESSION's suspended run waits on, with their paths and arguments.
    #[command(after_help = INSPECT_AFTER_HELP)]
    Approvals(SessionArgs),
    /// Allow pending calls (nothing runs until `arbor resume`).
    #[command(after_help = INSPECT_AFTER_HELP)]
    Approve(DecideArgs),
    /// Reject pending calls (the model reads the rejection when the run resumes); a question
    /// rejected is declined.
    #[command(after_help = INSPECT_AFTER_HELP)]
    Reject(DecideArgs),
    /// Answer a question an agent asked with ask_human (its answer is the call's result when
    /// the run resumes: arbor resume).
    #[command(after_help = INSPECT_AFTER_HELP)]
    Answer(AnswerArgs),
    /// Let SESSION's suspended run go on with its decisions.
    #[command(after_help = INSPECT_AFTER_HELP)]
    Resume(ResumeArgs),
    /// Show what coding child CHILD's branch changes against the main checkout now: its
    /// files with lines added and removed, then its patch.
    #[command(after_help = INSPECT_AFTER_HELP)]
    Diff(DiffArgs),
    /// Merge coding child CHILD's branch into the main checkout (you are the approver): a
    /// merge commit by default; a conflict changes nothing and lists the files (exit 1).
    #[command(after_help = INSPECT_AFTER_HELP)]
    Merge(MergeArgs),
    /// Throw coding child CHILD's work away: its worktree and branch (its transcript stays).
    #[command(after_help = INSPECT_AFTER_HELP)]
    Discard(ChildArgs),
    /// List the models the providers configured in the environment offer.
    Models(ModelsArgs),
    /// Serve the HTTP API (`/v1`, OpenAPI at `/v1/openapi.json`), MCP (`/mcp/NAME`) and A2A
    /// (`/a2a/NAME`) over the store, running the specs of `--specs DIR` on request.
    Serve(ServeArgs),
    /// Claim children's runs from the PostgreSQL store's queue and run them (trees started
    /// with `arbor run --workers` or `arbor serve --workers`); a run whose worker died is
    /// taken over from its transcript.
    #[command(after_help = WORKER_AFTER_HELP)]
    Worker(WorkerArgs),
    /// Serve MCP over stdio: the MCP client drives a root session of SPEC in place of its
    /// root agent (spawn, wait, cancel and message its children, decide their approvals).
    Mcp(McpArgs),
    /// Check a spec as `arbor run` would, without running it: every agent, child, provider,
    /// limit and tool resolved; errors name the file and line (exit 2).
    Validate(ValidateArgs),
    /// Write a commented starter spec (a real provider section, scripted turns to run
    /// offline).
    Init(InitArgs),
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the man page (roff): `arbor man > arbor.1`.
    Man,
    /// Store maintenance: `arbor store check` runs SQLite's integrity and foreign-key checks
    /// (read-only; exit 3 with the recovery steps when the file is damaged).
    #[command(subcommand)]
    Store(StoreCommand),
}

/// Arguments of `arbor validate`.
#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// The TOML spec.
    #[arg(value_name = "SPEC")]
    pub(crate) spec: PathBuf,
    #[command(flatten)]
    pub(crate) overrides: SpecOverrides,
    /// Also ask the root's provider whether its model exists (a network call).
    #[arg(long)]
    pub(crate) online: bool,
    /// One JSON object: the agents with their resolved limits and where each is set.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Arguments of `arbor init`.
#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// Where to write it.
    #[arg(value_name = "PATH", default_value = "arbor.toml")]
    pub(crate) path: PathBuf,
    /// Overwrite a file that exists.
    #[arg(long)]
    pub(crate) force: bool,
}

/// Arguments of `arbor completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell.
    #[arg(value_name = "SHELL")]
    pub(crate) shell: clap_complete::Shell,
}

/// Arguments of `arbor serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on (without tokens, a loopback one only).
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub(crate) listen: String,
    /// SQLite store file (default ./.arbor/arbor.db, its directory created if missing), or a
    /// postgres:// URL (else ARBOR_STORE_URL; schema: ARBOR_STORE_SCHEMA).
    #[arg(long, value_name = "PATH|URL", conflicts_with = "memory")]
    pub(crate) store: Option<PathBuf>,
    /// Keep nothing: use the in-memory store.
    #[arg(long)]
    pub(crate) memory: bool,
    /// A directory of specs (`NAME.toml`), started by name with `POST /v1/runs`.
    #[arg(long, value_name = "DIR")]
    pub(crate) specs: Option<PathBuf>,
    /// Bearer tokens: lines `TENANT sha256:HEX [operator]` (see --hash-token); else
    /// ARBOR_TOKENS. An operator's token reads every tenant's metrics.
    #[arg(long, value_name = "FILE")]
    pub(crate) tokens: Option<PathBuf>,
    /// What each tenant may do (TOML: a `[default]` table and `[tenants.NAME]` tables with
    /// `specs`, `inline_specs`, `providers`, `models`, `max_runs_in_flight`,
    /// `max_runs_per_minute`, `max_tokens_per_day`). Without it every tenant may do what the
    /// server allows, with no quota.
    #[arg(long, value_name = "FILE")]
    pub(crate) tenant_policy: Option<PathBuf>,
    /// Also serve `GET /metrics`, every series and without a token, on this address (for a
    /// scraper on an internal network; the main address's /metrics then still asks a token).
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<String>,
    /// Run inline specs (`spec_text` in `POST /v1/runs`). Off by default: a spec can name
    /// commands, repositories and servers to call.
    #[arg(long)]
    pub(crate) allow_inline_specs: bool,
    /// The spec MCP clients reach at `/mcp` (default: the only spec; each spec is also at
    /// `/mcp/NAME`).
    #[arg(long, value_name = "NAME")]
    pub(crate) mcp_spec: Option<String>,
    /// A `Host` name MCP answers to, besides localhost, 127.0.0.1 and ::1 (repeat it; for a
    /// server reached by another name).
    #[arg(long, value_name = "HOST")]
    pub(crate) mcp_host: Vec<String>,
    /// Print the tokens-file line of TENANT for the token read on stdin, and exit.
    #[arg(long, value_name = "TENANT")]
    pub(crate) hash_token: Option<String>,
    /// Hand children's runs to `arbor worker` processes through the PostgreSQL store's queue
    /// instead of running them here.
    #[arg(long)]
    pub(crate) workers: bool,
    /// Connections served at once; one more gets 503 naming `max_connections`.
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_connections: u32,
    /// Event streams open at once, every tenant's together (503 naming `max_streams`).
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub(crate) max_streams: u32,
    /// Event streams one tenant may hold open at once (429 naming
    /// `max_streams_per_tenant`).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub(crate) max_streams_per_tenant: u32,
}

const WORKER_AFTER_HELP: &str = "\
Exit codes:
  0  stopped after a signal, once the runs in hand ended
  2  bad usage, or no spec in --specs
  3  the store cannot be opened or is not PostgreSQL's
  130  a second signal stopped it at once (its runs are taken over by other workers)

Environment:
  ARBOR_STORE_URL     the PostgreSQL store when --store is not given
  ARBOR_STORE_SCHEMA  the schema of its tables";

/// Arguments of `arbor worker`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// The PostgreSQL store (postgres://…; else ARBOR_STORE_URL).
    #[arg(long, value_name = "URL")]
    pub(crate) store: Option<PathBuf>,
    /// The most child runs this worker runs at once.
    #[arg(long, default_value_t = 4)]
    pub(crate) concurrency: usize,
    /// The folder of specs whose children this worker runs (a tree's spec is found by its
    /// fingerprint: the same text it was started from).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub(crate) specs: PathBuf,
    /// How long a claim holds without a heartbeat (renewed four times per lease): a dead
    /// worker's runs are taken over this long after its last heartbeat.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub(crate) lease_ms: u64,
    /// How often an idle worker looks for work besides the store's notifications.
    #[arg(long, value_name = "MS", default_value_t = 2_000)]
    pub(crate) poll_ms: u64,
}

impl WorkerArgs {
    /// The polling interval.
    pub(crate) fn poll(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.poll_ms.max(10))
    }
}

/// Arguments of `arbor mcp`.
#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// The spec whose root the client stands in for (its root must have children).
    pub(crate) spec: PathBuf,
    /// SQLite store file (default ./.arbor/arbor.db, its directory created if missing), or a
    /// postgres:// URL (else ARBOR_STORE_URL; schema: ARBOR_STORE_SCHEMA).
    #[arg(long, value_name = "PATH|URL", conflicts_with = "memory")]
    pub(crate) store: Option<PathBuf>,
    /// Keep nothing: use the in-memory store.
    #[arg(long)]
    pub(crate) memory: bool,
}

/// Arguments of `arbor models`.
#[derive(Debug, Args)]
pub(crate) struct ModelsArgs {
    /// Only this provider (openai or anthropic), even if not configured.
    #[arg(long)]
    pub(crate) provider: Option<String>,
    /// One JSON array of {provider, model}.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Arguments of `arbor approve` and `arbor reject`.
#[derive(Debug, Args)]
pub(crate) struct DecideArgs {
    /// The root session (its id, a unique piece of it, or @latest).
    #[arg(value_name = "SESSION")]
    pub(crate) session: String,
    /// Pending decision ids, or unique prefixes of them (see `arbor approvals`).
    #[arg(value_name = "ID", required = true)]
    pub(crate) ids: Vec<String>,
    /// For the rest of the run: later calls of the same tool on the same path too.
    #[arg(long)]
    pub(crate) for_run: bool,
    /// Why (the model reads it for a rejection; at most 2048 bytes).
    #[arg(long)]
    pub(crate) reason: Option<String>,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// Arguments of `arbor answer`.
#[derive(Debug, Args)]
pub(crate) struct AnswerArgs {
    /// The root session (its id, a unique piece of it, or @latest).
    #[arg(value_name = "SESSION")]
    pub(crate) session: String,
    /// The question's pending id, or a unique prefix of it (see `arbor approvals`).
    #[arg(value_name = "ID")]
    pub(crate) id: String,
    /// The answer (one of the question's choices when it offers some; at most 2048 bytes).
    #[arg(value_name = "ANSWER")]
    pub(crate) answer: String,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// Where the stored data is, and how to print it.
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// SQLite store file (default ./.arbor/arbor.db), or a postgres:// URL (else
    /// ARBOR_STORE_URL; schema: ARBOR_STORE_SCHEMA).
    #[arg(long, value_name = "PATH|URL")]
    pub(crate) store: Option<PathBuf>,
    /// Print JSON on stdout instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Arguments of `arbor ls`.
#[derive(Debug, Args)]
pub(crate) struct LsArgs {
    /// The parent session: its id, a unique piece of it, or @latest (default: list the
    /// roots).
    #[arg(value_name = "SESSION")]
    pub(crate) session: Option<String>,
    /// Include deleted children (with their tombstones).
    #[arg(long)]
    pub(crate) deleted: bool,
    /// List every root, not only the newest 50.
    #[arg(long)]
    pub(crate) all: bool,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// A command on one session.
#[derive(Debug, Args)]
pub(crate) struct SessionArgs {
    /// The session: its id, a unique prefix of it, the short id `arbor ls` shows, or
    /// @latest (default: the most recent root).
    #[arg(value_name = "SESSION")]
    pub(crate) session: Option<String>,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// A coding child, for `arbor discard` (and the others).
#[derive(Debug, Args)]
pub(crate) struct ChildArgs {
    /// The child's session: its id, a unique prefix of it, or the short id `arbor tree`
    /// shows.
    #[arg(value_name = "CHILD")]
    pub(crate) child: String,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// Arguments of `arbor diff`.
#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    #[command(flatten)]
    pub(crate) child: ChildArgs,
    /// Bytes of the patch to skip (a page's `next_offset`).
    #[arg(long, default_value_t = 0)]
    pub(crate) offset: usize,
    /// Bytes of patch at most (1 to 65536).
    #[arg(long, default_value_t = 65536)]
    pub(crate) max_bytes: usize,
}

/// Arguments of `arbor merge`.
#[derive(Debug, Args)]
pub(crate) struct MergeArgs {
    #[command(flatten)]
    pub(crate) child: ChildArgs,
    /// One commit with the child's whole change.
    #[arg(long, conflicts_with = "ff")]
    pub(crate) squash: bool,
    /// Only a fast-forward (refused when the checkout moved on).
    #[arg(long)]
    pub(crate) ff: bool,
    /// Only if the child's branch is still at this commit (the tip `arbor diff` showed,
    /// whole); refused, nothing changed, when it moved.
    #[arg(long, value_name = "COMMIT")]
    pub(crate) expect_tip: Option<String>,
}

/// Arguments of `arbor resume`.
#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
    #[command(flatten)]
    pub(crate) target: SessionArgs,
    /// Never ask on the terminal: a tree that stops on calls waiting for approval again
    /// exits 4.
    #[arg(long)]
    pub(crate) no_input: bool,
    /// Hand the children's runs to `arbor worker` processes through the PostgreSQL store's
    /// queue (a suspended child resumes with its decisions on a worker).
    #[arg(long)]
    pub(crate) workers: bool,
}

/// Arguments of `arbor send`.
#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// The parent session (its id, a unique piece of it, or @latest).
    #[arg(value_name = "SESSION")]
    pub(crate) session: String,
    /// The child's name (or its session id, or a unique piece of it).
    #[arg(value_name = "NAME")]
    pub(crate) name: String,
    /// The message (`-` reads it from standard input).
    #[arg(value_name = "TEXT")]
    pub(crate) text: String,
    /// Return once the message is delivered: the child's follow-up runs on in a background
    /// process (see it with arbor tree, arbor log).
    #[arg(long)]
    pub(crate) no_wait: bool,
    /// (Internal) Print `queued MESSAGE_ID` on stdout as soon as the message is delivered:
    /// how `--no-wait` knows its background process got that far.
    #[arg(long, hide = true)]
    pub(crate) receipt: bool,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// Arguments of `arbor rm`.
#[derive(Debug, Args)]
pub(crate) struct RmArgs {
    /// The parent session (its id, a unique piece of it, or @latest).
    #[arg(value_name = "SESSION")]
    pub(crate) session: String,
    /// The child's name (or session id, also of a child deleted before).
    #[arg(value_name = "NAME")]
    pub(crate) name: String,
    /// Why (kept in the tombstone).
    #[arg(long, default_value = "deleted from the command line")]
    pub(crate) reason: String,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// `arbor store …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum StoreCommand {
    /// Checks the whole store file; changes nothing.
    Check(StoreArgs),
}

/// Arguments of `arbor rename`.
#[derive(Debug, Args)]
pub(crate) struct RenameArgs {
    /// The parent session (its id, a unique piece of it, or @latest).
    #[arg(value_name = "SESSION")]
    pub(crate) session: String,
    /// The child's name or session id.
    #[arg(value_name = "NAME")]
    pub(crate) name: String,
    /// Its new name.
    #[arg(value_name = "NEW")]
    pub(crate) new_name: String,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

/// Arguments of `arbor run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The TOML spec.
    #[arg(value_name = "SPEC")]
    pub(crate) spec: PathBuf,
    /// The root's task, instead of the spec's `task` (`-` reads it from standard input).
    #[arg(long, short, value_name = "TEXT")]
    pub(crate) task: Option<String>,
    /// SQLite store file (default ./.arbor/arbor.db, its directory created if missing), or a
    /// postgres:// URL (else ARBOR_STORE_URL; schema: ARBOR_STORE_SCHEMA).
    #[arg(long, value_name = "PATH|URL", conflicts_with = "memory")]
    pub(crate) store: Option<PathBuf>,
    /// Keep nothing: use the in-memory store.
    #[arg(long)]
    pub(crate) memory: bool,
    /// Print one JSON report on stdout instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    pub(crate) quiet: bool,
    /// How progress is shown on stderr: a live tree redrawn in place on a terminal, or one
    /// line per event (what anything but a terminal gets with auto).
    #[arg(long, value_enum, default_value_t = crate::render::live::Progress::Auto)]
    pub(crate) progress: crate::render::live::Progress,
    /// Never ask on the terminal: a run that waits for approval exits 4 (decide with
    /// arbor approve / reject, then arbor resume), as it does when no terminal is attached.
    #[arg(long)]
    pub(crate) no_input: bool,
    /// Hand children's runs to `arbor worker` processes through the PostgreSQL store's queue
    /// (--store postgres://… or ARBOR_STORE_URL) instead of running them here.
    #[arg(long, conflicts_with = "memory")]
    pub(crate) workers: bool,
    #[command(flatten)]
    pub(crate) overrides: SpecOverrides,
}

/// What may change a spec for one run (or one check).
#[derive(Debug, Args)]
pub(crate) struct SpecOverrides {
    /// The git repository children with `workspace = true` work on (overrides the spec's
    /// `[workspace] repository`).
    #[arg(long, value_name = "PATH")]
    pub(crate) repository: Option<PathBuf>,
    /// The root's provider (scripted, openai, anthropic or a [providers.NAME] of the spec).
    #[arg(long)]
    pub(crate) provider: Option<String>,
    /// The root's model.
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// The root's model controls, as JSON over the spec's (`'{"temperature": 0, "seed": 7}'`;
    /// the keys of `[agents.NAME.controls]`).
    #[arg(long, value_name = "JSON", value_parser = parse_controls)]
    pub(crate) controls: Option<arbor_model::Controls>,
    /// A pool of tokens for the whole tree (over the root agent's `budget`): a model call it
    /// cannot cover is refused before it is made.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_tree_tokens: Option<u64>,
    /// A pool of money for the whole tree, in the spec's `[pricing] currency` (USD by
    /// default), over the root agent's `budget`.
    #[arg(long, value_name = "AMOUNT", value_parser = positive_amount)]
    pub(crate) max_tree_cost: Option<f64>,
}

/// `--max-tree-cost`: a positive amount of money.
fn positive_amount(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        // At least one micro-unit: a smaller amount would round to nothing.
        Ok(n) if n.is_finite() && (0.000_001..1e12).contains(&n) => Ok(n),
        _ => Err(format!(
            "{text:?} is not a positive amount (at least 0.000001)"
        )),
    }
}

/// `--controls`: a JSON object of model controls.
fn parse_controls(text: &str) -> Result<arbor_model::Controls, String> {
    serde_json::from_str(text).map_err(|e| format!("not a JSON object of model controls: {e}"))
}
