//! `arbor mcp SPEC`: MCP over stdio. The client (a coding agent, an IDE) drives a root
//! session of the spec in place of its root agent, with the root's allow-list, limits and
//! policies ([`arbor_mcp`]). The spec is read and checked as `arbor run` checks it before
//! the store is opened; the root session keeps the definition and the owner lease like a
//! run's, so `arbor ls`, `tree`, `approvals` see it afterwards. Stdout carries the protocol
//! only (logs go to stderr). When the client closes stdin, or on SIGTERM/Ctrl-C, what the
//! client started is stopped and the process exits 0.

use arbor_core::SessionRef;
use arbor_mcp::{ArborMcp, FixedRoot, HostedRoot};
use tokio_util::sync::CancellationToken;

use crate::cli::McpArgs;
use crate::fail::Fail;
use crate::run::{Overrides, create_root, prepare};
use crate::store::{StoreChoice, io_reason};
use crate::owner;

/// Runs the command until the client goes away.
pub(crate) async fn serve(args: McpArgs) -> Result<u8, Fail> {
    let choice = StoreChoice::from_args(args.memory, args.store.as_deref())?;
    let path = args.spec.display().to_string();
    let text = std::fs::read_to_string(&args.spec)
        .map_err(|e| Fail::usage(format!("cannot read {path}: {}", io_reason(&e))))?;
    let overrides = Overrides::default();
    let prepared = prepare(&path, &text, &overrides).await?;
    let root_name = prepared.spec.root_name().map_err(Fail::usage)?.to_owned();
    let children = prepared.spec.agents[&root_name].children.clone();
    if children.is_empty() {
        return Err(Fail::usage(format!(
            "{path}: the root agent {root_name:?} delegates to no children: nothing to offer \
             over MCP (give it children = [...])"
        )));
    }
    let store = choice.open()?;
    owner::sweep(&store).await?;
    let token = CancellationToken::new();
    let (built, mut session) = create_root(
        &prepared,
        &overrides,
        &store,
        &token,
        serde_json::json!({"via": "mcp"}),
    )
    .await?;
    let _lease = owner::Heartbeat::start(store.clone(), session.id(), token.clone());
    let Some(sup) = built.supervisor.clone() else {
        return Err(Fail::usage(format!("{path}: the spec builds no supervisor")));
    };
    sup.attach(&mut session);
    let root = HostedRoot::new(
        sup.clone(),
        SessionRef::from(session.record()),
        root_name,
        &children,
        session.inbox().clone(),
        token.clone(),
    )
    .map_err(|e| Fail::usage(e.to_string()))?;
    tracing::info!(root = %session.id(), "serving MCP over stdio");
    let served = tokio::select! {
        r = arbor_mcp::serve_stdio(ArborMcp::new(FixedRoot(root))) => r,
        () = signalled() => Ok(()),
    };
    token.cancel();
    sup.shutdown().await;
    served.map_err(|e| Fail::core(arbor_core::CoreError::Supervisor(e.to_string())))?;
    Ok(0)
}

/// Ctrl-C or SIGTERM.
async fn signalled() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
