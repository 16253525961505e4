//! The root session an MCP client drives ([`HostedRoot`]), and where a server finds one for
//! each client ([`RootSource`]).
//!
//! An MCP client stands where the root agent of a tree would: it spawns the root's children
//! with the root's allow-list, limits and policies, waits for them, messages them and decides
//! their approvals. The root's record is an ordinary root session in the store, so `arbor
//! ls` and `arbor tree` show what the client did afterwards.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arbor_core::inbox::Inbox;
use arbor_core::supervisor::{DelegationResult, SpawnAgentTool, Supervisor};
use arbor_core::{CoreResult, DynTool, SessionRef};
use arbor_protocol::RunId;
use async_trait::async_trait;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::error::McpResult;

/// A root session an MCP client drives: its tree's live supervisor, the root's place in the
/// store and inbox, and the delegation tools the root's agent would have. Cheap to clone.
#[derive(Clone)]
pub struct HostedRoot {
    inner: Arc<Inner>,
}

struct Inner {
    supervisor: Supervisor,
    root: SessionRef,
    agent: String,
    inbox: Arc<Inbox>,
    tools: Vec<Arc<dyn DynTool>>,
    spawn: SpawnAgentTool,
    run_id: RunId,
    token: CancellationToken,
    resumed: std::sync::Mutex<HashMap<String, Resumed>>,
}

/// The outcome of a child resumed after its approvals, by its delegation.
pub(crate) type Resumed = watch::Receiver<Option<Arc<CoreResult<DelegationResult>>>>;

impl fmt::Debug for HostedRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostedRoot")
            .field("root", &self.inner.root.id)
            .field("agent", &self.inner.agent)
            .finish()
    }
}

impl HostedRoot {
    /// The root session `root` of `supervisor`'s tree, driven in place of the agent `agent`,
    /// offering the children `children` (each must be allow-listed: a validation error names
    /// one that is not). `inbox` is where the root's children's messages arrive (the root
    /// session's, attached to the supervisor). `token` ends what the client started when the
    /// client goes away (usually the supervisor's session token).
    pub fn new(
        supervisor: Supervisor,
        root: SessionRef,
        agent: impl Into<String>,
        children: &[String],
        inbox: Arc<Inbox>,
        token: CancellationToken,
    ) -> McpResult<Self> {
        Self::offering(supervisor, root, agent, (children, &[]), inbox, token)
    }

    /// [`new`](Self::new), also offering the delegation tools `extra` names beyond the
    /// family every root has (`read_child`, which a spec names in the root's
    /// `delegation_tools`); each must be one of
    /// [`DELEGATION_TOOLS`](arbor_core::supervisor::DELEGATION_TOOLS).
    pub fn offering(
        supervisor: Supervisor,
        root: SessionRef,
        agent: impl Into<String>,
        (children, extra): (&[String], &[String]),
        inbox: Arc<Inbox>,
        token: CancellationToken,
    ) -> McpResult<Self> {
        let delegator = supervisor.delegator();
        let mut tools = delegator.tools_for(children)?;
        let have: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
        let more: Vec<String> = extra
            .iter()
            .filter(|n| !have.contains(n))
            .cloned()
            .collect();
        if !more.is_empty() {
            tools.extend(delegator.tools_named(children, &more)?);
        }
        let spawn = SpawnAgentTool::for_children(delegator, children)?;
        Ok(Self {
            inner: Arc::new(Inner {
                supervisor,
                root,
                agent: agent.into(),
                inbox,
                tools,
                spawn,
                run_id: RunId::new(),
                token,
                resumed: std::sync::Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The same root, also offering `tools` (a host's own, such as coding children's
    /// `diff_child`, `merge_child` and `discard_child`), run as the root agent's would, as
    /// the root session. A tool named like one offered already is left out. Only before the
    /// root is shared (cloned): a shared one is returned as it is.
    #[must_use]
    pub fn with_tools(mut self, tools: impl IntoIterator<Item = Arc<dyn DynTool>>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            for t in tools {
                if !inner.tools.iter().any(|h| h.spec().name == t.spec().name) {
                    inner.tools.push(t);
                }
            }
        }
        self
    }

    /// The tree's supervisor.
    pub fn supervisor(&self) -> &Supervisor {
        &self.inner.supervisor
    }

    /// The root session.
    pub fn root(&self) -> SessionRef {
        self.inner.root
    }

    /// The agent the client stands in for.
    pub fn agent(&self) -> &str {
        &self.inner.agent
    }

    /// Where the root's children's messages arrive.
    pub fn inbox(&self) -> &Arc<Inbox> {
        &self.inner.inbox
    }

    /// The root agent's delegation tools.
    pub(crate) fn tools(&self) -> &[Arc<dyn DynTool>] {
        &self.inner.tools
    }

    /// The root's `spawn_agent`.
    pub(crate) fn spawn_tool(&self) -> &SpawnAgentTool {
        &self.inner.spawn
    }

    /// The run id the client's calls are made under (a client has no run of its own: the id
    /// only names its calls in events).
    pub(crate) fn run_id(&self) -> RunId {
        self.inner.run_id
    }

    /// The resumed run of `delegation`, if one was started here.
    pub(crate) fn resumed(&self, delegation: &str) -> Option<Resumed> {
        self.inner
            .resumed
            .lock()
            .ok()
            .and_then(|m| m.get(delegation).cloned())
    }

    /// Records the resumed run of `delegation`.
    pub(crate) fn set_resumed(&self, delegation: String, rx: Resumed) {
        if let Ok(mut m) = self.inner.resumed.lock() {
            m.insert(delegation, rx);
        }
    }

    /// Fires when the client's root ends.
    pub fn token(&self) -> &CancellationToken {
        &self.inner.token
    }
}

/// Who is asking, as the transport knows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Caller {
    /// The tenant the HTTP service authenticated (none over stdio).
    pub tenant: Option<String>,
    /// The MCP session (`Mcp-Session-Id`), when the client keeps one: clients of protocol
    /// revision 2026-07-28 keep none, each of their requests stands alone.
    pub session: Option<String>,
}

/// Finds the root a client drives.
#[async_trait]
pub trait RootSource: fmt::Debug + Send + Sync + 'static {
    /// The root for `caller`: the same one for every request of one MCP session (created on
    /// its first call), and for clients that keep no session, one the source chooses (the
    /// tenant's, say).
    async fn root(&self, caller: &Caller) -> McpResult<HostedRoot>;

    /// The MCP session `session` ended (closed or expired): what it started may stop.
    async fn session_closed(&self, session: &str) {
        let _ = session;
    }
}

/// One root for every caller: `arbor mcp` over stdio, where the process is the session.
#[derive(Debug, Clone)]
pub struct FixedRoot(pub HostedRoot);

#[async_trait]
impl RootSource for FixedRoot {
    async fn root(&self, _caller: &Caller) -> McpResult<HostedRoot> {
        Ok(self.0.clone())
    }
}
