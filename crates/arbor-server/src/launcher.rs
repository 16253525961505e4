//! What the server asks of its host: starting root runs. The server owns the API, the
//! tenant wall and the store's views; how a named spec becomes a tree of agents is the
//! host's ([`Launcher`]): `arbor serve` plugs in the CLI's spec-based one, and a Rust host
//! embedding the server plugs in its own (or a closure, [`launcher_fn`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use arbor_protocol::SessionId;
use async_trait::async_trait;

use crate::error::ApiError;

/// A request to start a root run.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StartRun {
    /// The tenant it runs for (the launcher records it on the root: `meta.tenant`).
    pub tenant: String,
    /// The spec's name (`inline` for an inline spec).
    pub spec: String,
    /// An inline spec's text (only when the launcher [accepts them](Launcher::accepts_inline)).
    pub spec_text: Option<String>,
    /// The task; `None` runs the spec's own.
    pub task: Option<String>,
    /// Another provider for the root agent.
    pub provider: Option<String>,
    /// Another model for the root agent.
    pub model: Option<String>,
    /// Model controls for the root agent, over its spec's (checked in range).
    pub controls: Option<arbor_model::Controls>,
    /// The id the root must have, when the server chose it (a request with an
    /// `Idempotency-Key`): creating a second root with it fails, so a key starts one run.
    pub root_id: Option<SessionId>,
    /// The host's labels for the run (its user, its thread), checked.
    pub labels: std::collections::BTreeMap<String, String>,
    /// A pool for the whole tree, over the root agent's (checked).
    pub budget: Option<arbor_core::budget::Budget>,
}

impl StartRun {
    /// What the launcher records in the root's meta: `tenant`, `spec` and `labels` (what
    /// `GET /v1/runs` shows and filters by).
    pub fn root_meta(&self) -> serde_json::Value {
        serde_json::json!({"tenant": self.tenant, "spec": self.spec, "labels": self.labels})
    }
}

/// Starts root runs for the server.
#[async_trait]
pub trait Launcher: fmt::Debug + Send + Sync + 'static {
    /// The names of the specs it can start, sorted.
    fn specs(&self) -> Vec<String>;

    /// Whether it runs inline specs (a request's own TOML). Default: no; a spec can name
    /// commands, repositories and servers to call, so a host opts in explicitly.
    fn accepts_inline(&self) -> bool {
        false
    }

    /// Starts a root run and returns its root session once the session's record exists
    /// (with [`StartRun::root_meta`] in its meta: the request's tenant, spec and labels); the
    /// run goes on in the background.
    /// An unknown spec is a `not_found` error; a bad override a `validation` error naming
    /// its field.
    async fn start(&self, run: StartRun) -> Result<SessionId, ApiError>;

    /// Lets the tree of `root` go on with its decisions (the server checked the tenant and
    /// that it is a root); returns once the resume has started. A tree with calls still
    /// undecided, or with nothing to resume, is a `conflict`. By default: not supported.
    async fn resume(&self, root: SessionId) -> Result<(), ApiError> {
        let _ = root;
        Err(ApiError::new(
            crate::error::ErrorKind::Conflict,
            "This server's launcher cannot resume runs",
        ))
    }

    /// Cancels the run of `session` (in the tree of `root`) if this process runs it: the
    /// root's run cancels the whole tree; a child's ends it and its task-lifetime
    /// descendants. `Ok(false)` when no run of it goes on here. By default: nothing runs.
    async fn cancel(&self, root: SessionId, session: SessionId) -> Result<bool, ApiError> {
        let _ = (root, session);
        Ok(false)
    }

    /// The live supervisor of the tree of `root`, if this process runs it (what the host's
    /// spawn, wait, cancel and message calls go through). Default: none.
    fn supervisor(&self, root: SessionId) -> Option<arbor_core::supervisor::Supervisor> {
        let _ = root;
        None
    }

    /// The supervisor a host's call (spawn, wait, cancel, message) goes through. When this
    /// process runs the tree, the run's own, and the tree is kept for the host past the
    /// run's end until idle; otherwise the tree is rebuilt from what the store keeps and held
    /// until it has been idle a while. Default: refused (`conflict`), and the server falls
    /// back to [`Launcher::supervisor`].
    async fn host(&self, root: SessionId) -> Result<arbor_core::supervisor::Supervisor, ApiError> {
        let _ = root;
        Err(ApiError::new(
            crate::error::ErrorKind::Conflict,
            "The tree does not run in this server: start or resume it first",
        ))
    }

    /// Opens a root session of the spec `spec` for a client that stands in for its root
    /// agent (an MCP client): the tree is built and its root's record created for `tenant`
    /// (nothing runs); the root is held, its tree hosted here, until its token is cancelled.
    /// An unknown spec is a `not_found` error; one whose root has no children, a
    /// `validation` error. Default: refused (`conflict`).
    async fn open_root(&self, tenant: &str, spec: &str) -> Result<arbor_mcp::HostedRoot, ApiError> {
        let _ = (tenant, spec);
        Err(ApiError::new(
            crate::error::ErrorKind::Conflict,
            "This server's launcher cannot open roots for MCP clients",
        ))
    }

    /// The coding children's work of the tree of `root` (its repository and worktrees, from
    /// the definition the tree was started with), for `diff`, `merge` and `discard`. `None`:
    /// the tree has none. Default: none.
    async fn child_work(
        &self,
        root: SessionId,
    ) -> Result<Option<arbor_coding::ChildWork>, ApiError> {
        let _ = root;
        Ok(None)
    }

    /// Deletes the child `child` of `parent` in a tree this process does not run (a live
    /// tree's supervisor deletes its own): writes its tombstone once no other process runs
    /// the tree. Default: refused.
    async fn delete_offline(
        &self,
        root: SessionId,
        parent: SessionId,
        child: SessionId,
        by: &str,
        reason: &str,
    ) -> Result<arbor_core::supervisor::Deleted, ApiError> {
        let _ = (root, parent, child, by, reason);
        Err(ApiError::new(
            crate::error::ErrorKind::Conflict,
            "The tree does not run in this server: start or resume it first",
        ))
    }
}

type StartFuture = Pin<Box<dyn Future<Output = Result<SessionId, ApiError>> + Send>>;

/// A launcher from a list of spec names and a closure (see [`launcher_fn`]).
pub struct FnLauncher<F> {
    specs: Vec<String>,
    start: F,
}

impl<F> fmt::Debug for FnLauncher<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnLauncher")
            .field("specs", &self.specs)
            .finish()
    }
}

#[async_trait]
impl<F> Launcher for FnLauncher<F>
where
    F: Fn(StartRun) -> StartFuture + Send + Sync + 'static,
{
    fn specs(&self) -> Vec<String> {
        self.specs.clone()
    }

    async fn start(&self, run: StartRun) -> Result<SessionId, ApiError> {
        (self.start)(run).await
    }
}

/// Makes a launcher of the spec names it offers and a closure that starts one.
pub fn launcher_fn<F, Fut>(
    specs: impl IntoIterator<Item = impl Into<String>>,
    start: F,
) -> impl Launcher
where
    F: Fn(StartRun) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<SessionId, ApiError>> + Send + 'static,
{
    let mut specs: Vec<String> = specs.into_iter().map(Into::into).collect();
    specs.sort();
    FnLauncher {
        specs,
        start: move |run| -> StartFuture { Box::pin(start(run)) },
    }
}
