//! `arbor mcp SPEC`: the entry of the MCP server over stdio (see [`crate::mcp`]).

use crate::cli::McpArgs;
use crate::drive::{Overrides, prepare};
use crate::fail::Fail;
use crate::mcp::{close_root, offered, open_root};
use crate::owner;
use crate::store::{StoreChoice, io_reason};
use arbor_mcp::{ArborMcp, FixedRoot};
use tokio_util::sync::CancellationToken;

/// Runs the command until the client goes away.
pub(crate) async fn serve(args: McpArgs) -> Result<u8, Fail> {
    let choice = StoreChoice::from_args(args.memory, args.store.as_deref())?;
    let path = args.spec.display().to_string();
    let text = std::fs::read_to_string(&args.spec)
        .map_err(|e| Fail::usage(format!("cannot read {path}: {}", io_reason(&e))))?;
    let overrides = Overrides::default();
    let prepared = prepare(&path, &text, &overrides).await?;
    // Checked before the store is opened: a spec with nothing to offer touches nothing.
    offered(&prepared)?;
    let store = choice.open().await?;
    owner::sweep(&store).await?;
    let token = CancellationToken::new();
    let opened = open_root(&prepared, &store, &token, serde_json::json!({"via": "mcp"})).await?;
    let _lease = owner::Heartbeat::start(store.clone(), opened.session.id(), token.clone());
    let (session, root, built) = (opened.session, opened.root, opened.built);
    let sup = root.supervisor().clone();
    tracing::info!(root = %session.id(), "serving MCP over stdio");
    let served = tokio::select! {
        r = arbor_mcp::serve_stdio(ArborMcp::new(FixedRoot(root))) => r,
        () = crate::interrupt::shutdown_signal() => Ok(()),
    };
    token.cancel();
    sup.shutdown().await;
    built.close().await;
    close_root(&store, session.id()).await;
    served.map_err(|e| Fail::core(arbor_core::CoreError::Supervisor(e.to_string())))?;
    Ok(0)
}
