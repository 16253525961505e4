//! Progress lines on stderr while a run goes: one line per meaningful event of the root
//! session and of every delegation.
#![allow(clippy::print_stderr)]

use std::sync::Arc;

use arbor_core::Subscription;
use arbor_protocol::{AgentEvent, EventEnvelope, SupervisorEnvelope, SupervisorEvent};

use crate::report::thousands;

fn agent_line(name: &str, event: &AgentEvent) -> Option<String> {
    Some(match event {
        AgentEvent::RunStarted { agent, model } => {
            format!("{name}: run started (agent {agent}, model {model})")
        }
        AgentEvent::ProviderTurnFinished {
            turn,
            usage,
            tool_calls,
        } => format!(
            "{name}: turn {turn}: {} tokens{}",
            thousands(usage.total_tokens),
            if *tool_calls > 0 {
                format!(", {tool_calls} tool call(s)")
            } else {
                String::new()
            }
        ),
        AgentEvent::ToolExecutionStarted { name: tool, .. } => {
            format!("{name}: tool {tool} started")
        }
        AgentEvent::ToolExecutionFinished {
            name: tool,
            output_bytes,
            ..
        } => {
            format!("{name}: tool {tool} finished ({output_bytes} bytes)")
        }
        AgentEvent::ToolExecutionError {
            name: tool, error, ..
        } => {
            format!("{name}: tool {tool} error: {}", first_line(error))
        }
        AgentEvent::ToolExecutionBlocked {
            name: tool, reason, ..
        } => {
            format!("{name}: tool {tool} blocked: {}", first_line(reason))
        }
        AgentEvent::RunLimitExceeded { breach } => format!(
            "{name}: limit {} exceeded (maximum {}, observed {})",
            breach.limit, breach.maximum, breach.observed
        ),
        AgentEvent::RunDenied { reason } => format!("{name}: denied: {}", first_line(reason)),
        AgentEvent::RunFinished {
            status,
            stop_reason,
            usage,
            ..
        } => format!(
            "{name}: run {status} ({stop_reason}), {} tokens",
            thousands(usage.total_tokens)
        ),
        AgentEvent::EventsLagged { missed } => {
            format!("{name}: ({missed} events not shown: display fell behind)")
        }
        _ => return None,
    })
}

fn first_line(s: &str) -> &str {
    let line = s.lines().next().unwrap_or("");
    match line.char_indices().nth(160) {
        Some((i, _)) => &line[..i],
        None => line,
    }
}

fn supervisor_line(event: &SupervisorEvent) -> Option<String> {
    Some(match event {
        SupervisorEvent::DelegationStarted { origin, .. } => format!(
            "{}: delegation started (depth {})",
            origin.child_id, origin.depth
        ),
        SupervisorEvent::DelegationFinished {
            origin,
            status,
            total_tokens,
        } => format!(
            "{}: delegation {status}, {} tokens",
            origin.child_id,
            thousands(*total_tokens)
        ),
        SupervisorEvent::DelegationRejected { origin, reason } => {
            format!(
                "{}: delegation rejected: {}",
                origin.child_id,
                first_line(reason)
            )
        }
        SupervisorEvent::ChildFailed { origin, reason, .. } => {
            format!("{}: child failed: {}", origin.child_id, first_line(reason))
        }
        SupervisorEvent::DelegationError { origin, error } => {
            format!(
                "{}: delegation error: {}",
                origin.child_id,
                first_line(error)
            )
        }
        SupervisorEvent::EventsLagged { missed } => {
            format!("({missed} supervisor events not shown)")
        }
        _ => return None,
    })
}

/// Prints the root session's events until its run finishes.
pub(crate) async fn follow_root(name: String, mut sub: Subscription<EventEnvelope>) {
    while let Some(e) = sub.recv().await {
        let e: Arc<EventEnvelope> = e;
        if let Some(line) = agent_line(&name, &e.event) {
            eprintln!("{line}");
        }
        if e.event.is_terminal() {
            break;
        }
    }
}

/// Prints supervisor events until `done` fires, then what is left.
pub(crate) async fn follow_supervisor(
    mut sub: Subscription<SupervisorEnvelope>,
    done: tokio_util::sync::CancellationToken,
) {
    let print = |e: &SupervisorEnvelope| {
        if let Some(line) = supervisor_line(&e.event) {
            eprintln!("  {line}");
        }
    };
    loop {
        tokio::select! {
            e = sub.recv() => match e {
                Some(e) => print(&e),
                None => return,
            },
            _ = done.cancelled() => break,
        }
    }
    while let Some(e) = sub.try_recv() {
        print(&e);
    }
}
