//! `arbor mcp SPEC`: MCP over stdio. The client (a coding agent, an IDE) drives a root
//! session of the spec in place of its root agent, with the root's allow-list, limits and
//! policies ([`arbor_mcp`]). The spec is read and checked as `arbor run` checks it before
//! the store is opened; the root session keeps the definition and the owner lease like a
//! run's, so `arbor ls`, `tree`, `approvals` see it afterwards. Stdout carries the protocol
//! only (logs go to stderr). When the client closes stdin, or on SIGTERM/Ctrl-C, what the
//! client started is stopped and the process exits 0.

use arbor_core::SessionRef;
use arbor_mcp::HostedRoot;
use arbor_protocol::{SessionId, SessionStatus};
use tokio_util::sync::CancellationToken;

use crate::drive::{Overrides, create_root};
use crate::fail::Fail;

/// A root opened for an MCP client: its tree built, its record created (nothing runs).
pub(crate) struct Opened {
    pub(crate) built: crate::tree::Built,
    pub(crate) session: arbor_core::Session,
    /// The root the client drives (its supervisor is the tree's).
    pub(crate) root: HostedRoot,
}

/// Builds the tree of a prepared spec and creates its root session for an MCP client that
/// stands in for the root agent (`extra` goes in the record's `meta`). A root without
/// children is a usage error.
pub(crate) async fn open_root(
    prepared: &crate::drive::Prepared,
    store: &std::sync::Arc<dyn arbor_store::Store>,
    token: &CancellationToken,
    extra: serde_json::Value,
) -> Result<Opened, Fail> {
    let path = &prepared.path;
    let (root_name, children) = offered(prepared)?;
    let (built, mut session) =
        create_root(prepared, &Overrides::default(), store, token, (extra, None)).await?;
    let Some(supervisor) = built.supervisor.clone() else {
        return Err(Fail::usage(format!(
            "{path}: the spec builds no supervisor"
        )));
    };
    supervisor.attach(&mut session);
    // A live host drives it: `running` until the client goes away.
    set_status(store, session.id(), SessionStatus::Running).await;
    // Beyond the family every root has: what the root's spec names (`read_child`).
    let extra: Vec<String> = prepared
        .spec
        .agents
        .get(&root_name)
        .map(|a| a.delegation.clone())
        .unwrap_or_default();
    let listed = prepared
        .spec
        .agents
        .get(&root_name)
        .map(|a| a.tools.clone())
        .unwrap_or_default();
    let root = HostedRoot::offering(
        supervisor,
        SessionRef::from(session.record()),
        root_name,
        (&children, &extra),
        session.inbox().clone(),
        token.clone(),
    )
    .map_err(|e| Fail::usage(e.to_string()))?;
    // The root's tools over its coding children's work, as its spec lists them: the client
    // stands in for the root and is the approver (as a caller of /v1 is), its merges run at
    // once.
    let work = built.work.clone();
    let root = root.with_tools(
        work.iter()
            .flat_map(|w| listed.iter().filter_map(|n| w.host_tool(n))),
    );
    Ok(Opened {
        built,
        session,
        root,
    })
}

/// Settles the root of a client that went away: `suspended` while calls below it wait for
/// a decision (`arbor approvals`, then `arbor resume`), else `succeeded`. (A process that
/// dies instead leaves it `running`: the next command marks it `interrupted`.)
pub(crate) async fn close_root(store: &std::sync::Arc<dyn arbor_store::Store>, root: SessionId) {
    let waiting = arbor_core::supervisor::waiting_at(store.as_ref(), root)
        .await
        .map(|w| !w.is_empty())
        .unwrap_or(false);
    let status = if waiting {
        SessionStatus::Suspended
    } else {
        SessionStatus::Succeeded
    };
    set_status(store, root, status).await;
}

/// Sets the root's status, against its version (the owner's heartbeat writes the record too).
async fn set_status(
    store: &std::sync::Arc<dyn arbor_store::Store>,
    root: SessionId,
    status: SessionStatus,
) {
    let update = |_: &arbor_store::SessionRecord| arbor_store::SessionUpdate::status(status);
    if let Err(e) = crate::store::update_record(store.as_ref(), root, update).await {
        tracing::warn!(root = %root, "could not set the MCP root's status: {e}");
    }
}

/// The root agent's name and the children it offers; a root without children is a usage
/// error.
pub(crate) fn offered(prepared: &crate::drive::Prepared) -> Result<(String, Vec<String>), Fail> {
    let root_name = prepared.spec.root_name().map_err(Fail::usage)?.to_owned();
    let children = prepared
        .spec
        .agents
        .get(&root_name)
        .map(|a| a.children.clone())
        .unwrap_or_default();
    if children.is_empty() {
        return Err(Fail::usage(format!(
            "{}: the root agent {root_name:?} delegates to no children: nothing to offer over \
             MCP (give it children = [...])",
            prepared.path
        )));
    }
    Ok((root_name, children))
}
