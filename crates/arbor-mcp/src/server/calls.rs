//! What each tool of the MCP server does for the client driving a root.
//!
//! - `spawn_agent` is checked and parsed exactly as for a model
//!   ([`SpawnAgentTool::host_request`]); `sync` starts the child as a handle the client
//!   joins and waits on it (with progress), so a child that stops for an approval is listed
//!   at the root and resumed on its own once decided.
//! - `wait_agent` waits on a handle, or on the run a decision resumed; a child waiting for
//!   approval answers `suspended` with what it waits on. A child that waits only on
//!   questions (`ask_human`) is asked at the client first when it supports elicitation
//!   ([`super::elicit`]), then resumed and waited on again.
//! - `list_approvals` / `decide_approval` read and decide what waits at the root; a run with
//!   nothing left undecided is resumed here, its approved calls running exactly once.
//! - `read_messages` drains the root's inbox.
//! - The other model tools (`cancel_agent`, `list_children`, `send_message`, `rename_child`,
//!   `find_models`) run as the root agent's own would, as the root session.
//!
//! [`SpawnAgentTool::host_request`]: arbor_core::supervisor::SpawnAgentTool::host_request

use std::sync::Arc;
use std::time::Duration;

use arbor_core::supervisor::{Mode, WaitOptions, WaitOutcome};
use arbor_core::{CoreError, NestedSuspension, ToolContext, ToolError};
use arbor_model::ToolSpec;
use arbor_protocol::{ApprovalDecision, DecidedBy, Verdict};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::elicit::Asker;
use super::out::Out;
use super::progress::Progress;
use super::schemas;
use crate::root::HostedRoot;

const HOST_TOOLS: [&str; 3] = ["list_approvals", "decide_approval", "read_messages"];

/// Every tool's spec: the root agent's delegation tools, then the host's.
pub(crate) fn specs(root: &HostedRoot) -> Vec<ToolSpec> {
    let mut specs: Vec<ToolSpec> = root.tools().iter().map(|t| t.spec().clone()).collect();
    specs.push(schemas::list_approvals());
    specs.push(schemas::decide_approval());
    specs.push(schemas::read_messages());
    specs
}

/// Whether `name` is one of the tools.
pub(crate) fn known(root: &HostedRoot, name: &str) -> bool {
    HOST_TOOLS.contains(&name) || root.tools().iter().any(|t| t.spec().name == name)
}

/// How one call reaches its client: cancelling it, telling it the progress, asking it
/// questions; the tenant the HTTP layer authenticated (none over stdio).
pub(crate) struct Client<'a> {
    pub(crate) cancel: &'a CancellationToken,
    pub(crate) progress: &'a Progress,
    pub(crate) asker: Asker,
    pub(crate) tenant: Option<String>,
}

/// Runs one call.
pub(crate) async fn call(
    root: &HostedRoot,
    name: &str,
    arguments: Value,
    client: &Client<'_>,
) -> Out {
    let (cancel, tenant) = (client.cancel, client.tenant.clone());
    let out = match name {
        "spawn_agent" => spawn(root, arguments, client).await,
        "wait_agent" => wait(root, arguments, client).await,
        "list_approvals" => list_approvals(root, arguments).await,
        "decide_approval" => decide(root, arguments, tenant).await,
        "read_messages" => read_messages(root, arguments, cancel).await,
        _ => model_tool(root, name, arguments, cancel).await,
    };
    match out {
        Ok(out) => out,
        Err(e) => Out::Error(root.supervisor().redact(&e)),
    }
}

/// A call as the root agent's own tool would run it, as the root session.
async fn model_tool(
    root: &HostedRoot,
    name: &str,
    arguments: Value,
    cancel: &CancellationToken,
) -> Result<Out, String> {
    let Some(tool) = root.tools().iter().find(|t| t.spec().name == name) else {
        return Err(format!("unknown tool: {name}"));
    };
    let token = root.token().child_token();
    let ctx = context(root, name, token.clone());
    let out = tokio::select! {
        r = tool.call_json(arguments, ctx) => r,
        () = cancel.cancelled() => {
            token.cancel();
            return Err("Cancelled by the client".to_owned());
        }
    };
    match out {
        Ok(text) => Ok(Out::text(text)),
        Err(e) => Err(tool_error(e)),
    }
}

fn context(root: &HostedRoot, name: &str, cancel: CancellationToken) -> ToolContext {
    ToolContext::new(
        root.agent().to_owned(),
        root.root(),
        root.run_id(),
        format!("mcp-{name}-{}", arbor_protocol::RunId::new()),
    )
    .turn(0)
    .cancel(cancel)
}

fn tool_error(e: ToolError) -> String {
    match e {
        ToolError::ToModel(m) | ToolError::Fatal(m) => m,
        ToolError::Suspended(_) => "Delegated run suspended".to_owned(),
        other => other.to_string(),
    }
}

/// A core error as a client reads it: with the limit that fired.
fn core_error(e: &CoreError) -> String {
    match e.limit() {
        Some(info) => format!("{e}: {info}"),
        None => e.to_string(),
    }
}

async fn spawn(root: &HostedRoot, arguments: Value, client: &Client<'_>) -> Result<Out, String> {
    let (cancel, progress) = (client.cancel, client.progress);
    let spawn = root.spawn_tool();
    let host = spawn
        .host_request(arguments, root.root())
        .map_err(tool_error)?;
    let thinking = host.request.thinking;
    let sup = root.supervisor();
    let mut request = host.request;
    match host.mode {
        mode @ (Mode::Message | Mode::Async) => {
            let handle = if mode == Mode::Message {
                sup.spawn(request).await
            } else {
                sup.delegate_async(request).await
            }
            .map_err(|e| core_error(&e))?;
            Ok(Out::text(spawn.started_text(handle, thinking)))
        }
        _ => {
            // Joined here: the client's cancelling the call cancels the child.
            let token = root.token().child_token();
            request.cancel = Some(token.clone());
            let events = sup.subscribe();
            let handle = sup
                .delegate_async(request)
                .await
                .map_err(|e| core_error(&e))?;
            let id = handle.delegation_id.clone();
            let mut forwarder = progress.forwarder(events, id.clone());
            let waited = tokio::select! {
                r = sup.wait(&id, WaitOptions::default()) => r,
                never = forwarder.run() => match never {},
                () = cancel.cancelled() => {
                    token.cancel();
                    return Err("Cancelled by the client: the child is cancelled".to_owned());
                }
            };
            forwarder.flush().await;
            settled(root, &id, waited, client).await
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HandleArgs {
    delegation_id: String,
}

fn parse<T: serde::de::DeserializeOwned>(tool: &str, arguments: Value) -> Result<T, String> {
    let arguments = match arguments {
        Value::Null => json!({}),
        v => v,
    };
    serde_json::from_value(arguments).map_err(|e| format!("invalid arguments for {tool}: {e}"))
}

async fn wait(root: &HostedRoot, arguments: Value, client: &Client<'_>) -> Result<Out, String> {
    let args: HandleArgs = parse("wait_agent", arguments)?;
    let id = args.delegation_id;
    if let Some(waited) = wait_resumed(root, &id, client).await {
        return settled(root, &id, waited?, client).await;
    }
    let sup = root.supervisor();
    let mut forwarder = client.progress.forwarder(sup.subscribe(), id.clone());
    let options = WaitOptions {
        timeout: None,
        cancel: Some(client.cancel.clone()),
    };
    let waited = tokio::select! {
        r = sup.wait(&id, options) => r,
        never = forwarder.run() => match never {},
    };
    forwarder.flush().await;
    settled(root, &id, waited, client).await
}

/// Waits on the run a decision resumed for delegation `id`; `None` when none was.
async fn wait_resumed(
    root: &HostedRoot,
    id: &str,
    client: &Client<'_>,
) -> Option<Result<arbor_core::CoreResult<WaitOutcome>, String>> {
    let mut resumed = root.resumed(id)?;
    let mut forwarder = client
        .progress
        .forwarder(root.supervisor().subscribe(), id.to_owned());
    let outcome = tokio::select! {
        r = resumed.wait_for(Option::is_some) => r.ok().and_then(|v| v.clone()),
        never = forwarder.run() => match never {},
        () = client.cancel.cancelled() => return Some(Err("Wait cancelled by the client".to_owned())),
    };
    forwarder.flush().await;
    let Some(outcome) = outcome else {
        return Some(Err("The resumed run ended without a result".to_owned()));
    };
    Some(Ok(match &*outcome {
        Ok(r) => Ok(WaitOutcome::Finished(Box::new(r.clone()))),
        Err(e) => Err(e.clone()),
    }))
}

/// Questions put to the client in a row before the call answers `suspended` anyway.
const MAX_ASKED_ROUNDS: usize = 8;

/// A waited delegation as the client reads it, once the questions it stopped on were put to
/// the client (when it takes them), answered, and the child resumed and waited on again.
async fn settled(
    root: &HostedRoot,
    id: &str,
    mut waited: arbor_core::CoreResult<WaitOutcome>,
    client: &Client<'_>,
) -> Result<Out, String> {
    for _ in 0..MAX_ASKED_ROUNDS {
        let Err(CoreError::Suspended(nested)) = &waited else {
            break;
        };
        let decisions = client.asker.ask(nested, client.tenant.clone()).await;
        if decisions.is_empty() {
            break;
        }
        let store = root.supervisor().store();
        let recorded =
            arbor_core::supervisor::answer_at(store.as_ref(), root.root().id, &decisions).await;
        match recorded {
            Ok(left) if left.pending.is_empty() => {
                resume(root, &left).await?;
            }
            Ok(_) => break,
            // Answered meanwhile by another client: it goes on (or waits) as that one left it.
            Err(e) if e.deny_reason() == Some(arbor_core::DenyReason::Decided) => {}
            Err(e) => return Err(core_error(&e)),
        }
        match wait_resumed(root, id, client).await {
            Some(again) => waited = again?,
            None => break,
        }
    }
    answer(root, id, waited)
}

/// What a client reads for a waited delegation.
fn answer(
    root: &HostedRoot,
    delegation_id: &str,
    waited: arbor_core::CoreResult<WaitOutcome>,
) -> Result<Out, String> {
    match waited {
        Ok(WaitOutcome::Finished(r)) => Ok(Out::text(root.spawn_tool().answer_text(&r))),
        Ok(WaitOutcome::Cancelled { delegation_id }) => Ok(Out::Value(
            json!({"delegation_id": delegation_id, "status": "cancelled"}),
        )),
        Err(CoreError::Suspended(nested)) => Ok(Out::Value(suspended(delegation_id, &nested))),
        Err(e) => Err(core_error(&e)),
    }
}

fn suspended(delegation_id: &str, nested: &NestedSuspension) -> Value {
    json!({
        "delegation_id": delegation_id,
        "status": "suspended",
        "session_id": nested.session_id,
        "pending": nested.pending.iter().map(pending_json).collect::<Vec<_>>(),
        "next": "decide the pending calls with decide_approval, then wait_agent again",
    })
}

fn pending_json(p: &arbor_protocol::PendingDecision) -> Value {
    let mut out = json!({
        "id": p.id,
        "tool": p.tool,
        "arguments": p.arguments,
        "call_id": p.call_id,
        "path": p.path,
    });
    // A question (`ask_human`): what it asks; decide_approval answers it with `answer`.
    if let Some(q) = arbor_core::tool::ask::Question::of(p) {
        out["question"] = json!({"question": q.question, "choices": q.choices});
    }
    out
}

fn suspension_json(s: &arbor_core::Suspension) -> Value {
    json!({
        "run_id": s.run_id,
        "session_id": s.session_id,
        "version": s.version,
        "pending": s.pending.iter().map(pending_json).collect::<Vec<_>>(),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

async fn list_approvals(root: &HostedRoot, arguments: Value) -> Result<Out, String> {
    let _: Empty = parse("list_approvals", arguments)?;
    let store = root.supervisor().store();
    let all = arbor_core::supervisor::waiting_at(store.as_ref(), root.root().id)
        .await
        .map_err(|e| core_error(&e))?;
    Ok(Out::Value(json!({
        "session_id": root.root().id,
        "suspensions": all.iter().map(suspension_json).collect::<Vec<_>>(),
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideArgs {
    decisions: Vec<DecisionArg>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionArg {
    id: String,
    verdict: Option<Verdict>,
    reason: Option<String>,
    /// The answer to a question (`ask_human`): `allow_once` with the answer as its reason.
    answer: Option<String>,
}

async fn decide(
    root: &HostedRoot,
    arguments: Value,
    tenant: Option<String>,
) -> Result<Out, String> {
    let args: DecideArgs = parse("decide_approval", arguments)?;
    if args.decisions.is_empty() {
        return Err("decisions must hold at least one decision".to_owned());
    }
    let mut verdicts = Vec::with_capacity(args.decisions.len());
    for (i, d) in args.decisions.iter().enumerate() {
        // An answer is `allow_once` with the answer as its reason.
        let parts = arbor_core::approval::question::decision_parts(
            d.verdict,
            d.reason.as_deref(),
            d.answer.as_deref(),
        )
        .map_err(|(field, why)| format!("decisions[{i}].{field}: {why}"))?;
        verdicts.push(parts);
    }
    let sup = root.supervisor();
    let store = sup.store();
    let decided_by = DecidedBy::new(tenant, Some("mcp client".to_owned()));
    let decisions: Vec<ApprovalDecision> = args
        .decisions
        .iter()
        .zip(verdicts)
        .map(|(d, (verdict, reason))| ApprovalDecision {
            id: d.id.clone(),
            verdict,
            reason,
            decided_by: Some(decided_by.clone()),
        })
        .collect();
    // One record per call, whichever id names it: a second decision is refused naming the
    // first; an unknown, forged or foreign id gets one answer.
    // With an answer, every id must name a question: an answer never approves a tool call.
    let left = if args.decisions.iter().any(|d| d.answer.is_some()) {
        arbor_core::supervisor::answer_at(store.as_ref(), root.root().id, &decisions).await
    } else {
        arbor_core::supervisor::decide_at(store.as_ref(), root.root().id, &decisions).await
    }
    .map_err(|e| core_error(&e))?;
    let mut out = suspension_json(&left);
    if left.pending.is_empty() {
        out["resumed"] = resume(root, &left).await?;
    }
    Ok(Out::Value(out))
}

/// Resumes the decided run of a child nobody awaits, in the background; `wait_agent` on its
/// handle gives its answer.
async fn resume(root: &HostedRoot, decided: &arbor_core::Suspension) -> Result<Value, String> {
    let sup = root.supervisor().clone();
    let delegation = sup
        .suspended_delegations()
        .await
        .map_err(|e| core_error(&e))?
        .into_iter()
        .find(|d| d.suspension.run_id == decided.run_id)
        .map(|d| d.delegation_id);
    let (tx, rx) = tokio::sync::watch::channel(None);
    if let Some(id) = &delegation {
        root.set_resumed(id.clone(), rx);
    }
    let child = decided.session_id;
    tokio::spawn(async move {
        let outcome = sup.resume_child(child).await;
        if let Err(e) = &outcome {
            tracing::info!(session = %child, "a resumed child did not finish: {e}");
        }
        let _ = tx.send(Some(Arc::new(outcome)));
    });
    Ok(json!({"session_id": child, "delegation_id": delegation}))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    wait_ms: Option<u64>,
}

async fn read_messages(
    root: &HostedRoot,
    arguments: Value,
    cancel: &CancellationToken,
) -> Result<Out, String> {
    let args: ReadArgs = parse("read_messages", arguments)?;
    let wait = args.wait_ms.unwrap_or(0);
    if wait > schemas::MAX_READ_WAIT_MS {
        return Err(format!(
            "wait_ms must be at most {}",
            schemas::MAX_READ_WAIT_MS
        ));
    }
    let inbox = root.inbox();
    if inbox.is_empty() && wait > 0 {
        tokio::select! {
            _ = tokio::time::timeout(Duration::from_millis(wait), inbox.ready()) => {}
            () = cancel.cancelled() => {}
        }
    }
    let messages = inbox.drain();
    Ok(Out::Value(json!({ "messages": messages })))
}
