//! Progress lines on stderr while a run goes: one line per meaningful event of the root
//! session (prefixed with its name) and of every delegation (prefixed with the child's id).
//!
//! Text deltas are not printed one by one: a turn's text is accumulated and shown, cut
//! short, on the line of the turn that produced it. A display that fell behind says how many
//! events it missed.

use std::time::Instant;

use arbor_core::Subscription;
use arbor_protocol::{AgentEvent, EventEnvelope, SessionId, SupervisorEnvelope, SupervisorEvent};

use crate::render::output;
use crate::render::report::thousands;
use crate::store::StoreName;

/// How many characters of a turn's text a progress line shows.
const PREVIEW_CHARS: usize = 72;

/// What the root's progress lines need to know besides the events.
#[derive(Debug)]
pub(crate) struct RootProgress {
    name: String,
    session: SessionId,
    store: StoreName,
    started: Instant,
    turns: u32,
    text: String,
    limits: Option<crate::spec::limits::Provenance>,
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

fn elapsed(started: Instant) -> String {
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.2} s", ms / 1000.0)
    }
}

impl RootProgress {
    /// Progress of the session `name` (`session`) on `store`.
    pub(crate) fn new(name: impl Into<String>, session: SessionId, store: StoreName) -> Self {
        Self {
            name: name.into(),
            session,
            store,
            started: Instant::now(),
            turns: 0,
            text: String::new(),
            limits: None,
        }
    }

    /// Says where a limit that stops the run was set.
    pub(crate) fn with_limits(mut self, limits: crate::spec::limits::Provenance) -> Self {
        self.limits = Some(limits);
        self
    }

    /// The line an event gives, if any.
    pub(crate) fn line(&mut self, event: &AgentEvent) -> Option<String> {
        let name = &self.name;
        Some(match event {
            AgentEvent::RunStarted { agent, model } => {
                self.started = Instant::now();
                format!(
                    "{name}: run started (agent {agent}, model {model}, store {}, session {})",
                    self.store, self.session
                )
            }
            AgentEvent::TurnStarted { turn } => {
                self.turns = self.turns.max(*turn);
                self.text.clear();
                return None;
            }
            AgentEvent::MessageDelta { delta, .. } => {
                if self.text.len() < PREVIEW_CHARS * 4 {
                    self.text.push_str(delta);
                }
                return None;
            }
            AgentEvent::ProviderTurnFinished {
                turn,
                usage,
                tool_calls,
            } => self.turn_line(*turn, usage, *tool_calls),
            AgentEvent::ProviderStatus { state, message, .. } => match message {
                Some(m) => format!("{name}: {state}: {}", first_line(m)),
                None => format!("{name}: {state}"),
            },
            AgentEvent::ToolExecutionStarted { name: tool, .. } => {
                format!("{name}: tool {tool} started")
            }
            AgentEvent::ToolExecutionFinished {
                name: tool,
                output_bytes,
                ..
            } => format!(
                "{name}: tool {tool} finished ({})",
                plural(*output_bytes, "byte", "bytes")
            ),
            AgentEvent::ToolExecutionError {
                name: tool, error, ..
            } if arbor_core::events::is_suspended_call(error) => {
                format!("{name}: tool {tool} suspended, waiting for approval")
            }
            AgentEvent::ToolExecutionError {
                name: tool, error, ..
            } => format!("{name}: tool {tool} error: {}", first_line(error)),
            AgentEvent::ToolExecutionBlocked {
                name: tool, reason, ..
            } => format!("{name}: tool {tool} blocked: {}", first_line(reason)),
            AgentEvent::RunLimitExceeded { breach } => self.limit_line(breach),
            AgentEvent::RunDenied { reason } => format!("{name}: denied: {}", first_line(reason)),
            AgentEvent::RunSuspended { pending } => format!(
                "{name}: suspended, waiting for {}",
                plural(pending.len() as u64, "decision", "decisions")
            ),
            AgentEvent::RunFinished {
                status,
                stop_reason,
                usage,
                error,
                ..
            } => self.finished_line(*status, *stop_reason, usage, error.as_deref()),
            AgentEvent::EventsLagged { missed } => format!(
                "{name}: ({} not shown: the display fell behind)",
                plural(*missed, "event", "events")
            ),
            AgentEvent::BudgetLow {
                pool,
                limit_name,
                limit,
                used,
            } => format!(
                "{name}: budget low: the pool of {} has used {} of its {limit_name} {}",
                crate::resolve::short(*pool),
                thousands(*used),
                thousands(*limit)
            ),
            AgentEvent::TurnFinished { .. } | AgentEvent::ProviderTurnStarted { .. } => {
                return None;
            }
            _ => return None,
        })
    }

    fn turn_line(&mut self, turn: u32, usage: &arbor_protocol::Usage, tool_calls: u32) -> String {
        self.turns = self.turns.max(turn);
        let mut line = format!(
            "{}: turn {turn}: {} ({})",
            self.name,
            plural(usage.total_tokens, "token", "tokens"),
            crate::render::report::usage_detail(usage),
        );
        if tool_calls > 0 {
            line.push_str(&format!(
                ", {}",
                plural(u64::from(tool_calls), "tool call", "tool calls")
            ));
        }
        if !self.text.trim().is_empty() {
            line.push_str(&format!(": {:?}", output::short(&self.text, PREVIEW_CHARS)));
        }
        line
    }

    fn limit_line(&self, breach: &arbor_protocol::RunLimitBreach) -> String {
        let mut line = format!(
            "{}: limit {} exceeded (maximum {}, observed {})",
            self.name,
            breach.limit,
            thousands(breach.maximum),
            thousands(breach.observed)
        );
        if let Some(limits) = &self.limits {
            line.push_str(&format!(": {}", limits.describe(breach.limit)));
        }
        line
    }

    fn finished_line(
        &self,
        status: arbor_protocol::RunStatus,
        stop_reason: arbor_protocol::StopReason,
        usage: &arbor_protocol::Usage,
        error: Option<&str>,
    ) -> String {
        let mut line = format!(
            "{}: run {status} ({stop_reason}): {}, {}, {}",
            self.name,
            plural(u64::from(self.turns), "turn", "turns"),
            plural(usage.total_tokens, "token", "tokens"),
            elapsed(self.started)
        );
        if let Some(error) = error.filter(|e| !e.is_empty()) {
            line.push_str(&format!(": {}", first_line(error)));
        }
        line
    }
}

fn first_line(s: &str) -> String {
    output::short(s, 160)
}

fn supervisor_line(
    event: &SupervisorEvent,
    limits: &crate::spec::limits::Limits,
) -> Option<String> {
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
        SupervisorEvent::ChildFailed {
            origin,
            reason,
            limit,
            ..
        } => {
            let mut line = format!("{}: child failed: {}", origin.child_id, first_line(reason));
            // A limit says where it was set (the agent's own, the supervisor's ceiling).
            if let Some(b) = limit {
                line.push_str(&format!(
                    ": {} (maximum {}, observed {})",
                    b.limit,
                    thousands(b.maximum),
                    thousands(b.observed)
                ));
                if let Some(p) = limits.get(&origin.child_id) {
                    line.push_str(&format!(" ({})", p.describe(b.limit)));
                }
            }
            line
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
pub(crate) async fn follow_root(
    mut progress: RootProgress,
    mut sub: Subscription<EventEnvelope>,
    done: tokio_util::sync::CancellationToken,
) {
    // The root may run several times (again on its children's replies): follow every run
    // until the command is done, then print what is left.
    loop {
        tokio::select! {
            e = sub.recv() => match e {
                Some(e) => {
                    if let Some(line) = progress.line(&e.event) {
                        output::err(&line);
                    }
                }
                None => return,
            },
            _ = done.cancelled() => break,
        }
    }
    while let Some(e) = sub.try_recv() {
        if let Some(line) = progress.line(&e.event) {
            output::err(&line);
        }
    }
}

/// Prints supervisor events until `done` fires, then what is left.
pub(crate) async fn follow_supervisor(
    mut sub: Subscription<SupervisorEnvelope>,
    limits: crate::spec::limits::Limits,
    done: tokio_util::sync::CancellationToken,
) {
    let print = |e: &SupervisorEnvelope| {
        if let Some(line) = supervisor_line(&e.event, &limits) {
            output::err(&format!("  {line}"));
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

#[cfg(test)]
mod tests {
    use arbor_protocol::{LimitKind, RunLimitBreach, RunStatus, StopReason, Usage};

    use super::*;

    fn lines(events: &[AgentEvent]) -> Vec<String> {
        let mut p = RootProgress::new("root", SessionId::new(), StoreName::Memory);
        events.iter().filter_map(|e| p.line(e)).collect()
    }

    #[test]
    fn one_line_per_meaningful_event() {
        let got = lines(&[
            AgentEvent::RunStarted {
                agent: "root".into(),
                model: "scripted".into(),
            },
            AgentEvent::TurnStarted { turn: 1 },
            AgentEvent::MessageDelta {
                turn: 1,
                delta: "All".into(),
            },
            AgentEvent::MessageDelta {
                turn: 1,
                delta: " good".into(),
            },
            AgentEvent::ProviderTurnFinished {
                turn: 1,
                usage: Usage::new(40_000, 0),
                tool_calls: 1,
            },
            AgentEvent::ToolExecutionError {
                turn: 1,
                call_id: "c".into(),
                name: "echo".into(),
                error: "bad arguments\nmore".into(),
            },
            AgentEvent::ToolExecutionError {
                turn: 1,
                call_id: "d".into(),
                name: "spawn_agent".into(),
                error: format!(
                    "{} {}",
                    arbor_core::events::SUSPENDED_CALL,
                    arbor_protocol::RunId::new()
                ),
            },
            AgentEvent::EventsLagged { missed: 3 },
            AgentEvent::RunLimitExceeded {
                breach: RunLimitBreach {
                    limit: LimitKind::MaxTokens,
                    maximum: 10,
                    observed: 40_000,
                },
            },
            AgentEvent::RunFinished {
                status: RunStatus::Failed,
                stop_reason: StopReason::TokenLimit,
                usage: Usage::new(40_000, 0),
                breach: None,
                error: Some("run limit max_tokens exceeded".into()),
            },
        ]);
        assert_eq!(got.len(), 7, "{got:#?}");
        assert!(
            got[0].starts_with(
                "root: run started (agent root, model scripted, store memory, session "
            )
        );
        assert_eq!(
            got[1],
            "root: turn 1: 40,000 tokens (input 40,000, output 0), 1 tool call: \"All good\""
        );
        assert_eq!(got[2], "root: tool echo error: bad arguments…");
        assert_eq!(
            got[3],
            "root: tool spawn_agent suspended, waiting for approval"
        );
        assert_eq!(
            got[4],
            "root: (3 events not shown: the display fell behind)"
        );
        assert_eq!(
            got[5],
            "root: limit max_tokens exceeded (maximum 10, observed 40,000)"
        );
        assert!(
            got[6].starts_with("root: run failed (token_limit): 1 turn, 40,000 tokens, "),
            "{}",
            got[6]
        );
        assert!(
            got[6].ends_with(": run limit max_tokens exceeded"),
            "{}",
            got[6]
        );
    }
}
