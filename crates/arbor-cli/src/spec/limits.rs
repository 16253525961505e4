//! An agent's run limits as a spec writes them, and how they compose with the supervisor's.
//!
//! `[supervisor] limits` is the tree's ceiling and every agent's default: a field an agent
//! leaves out takes the supervisor's value when the spec sets one, else the built-in default
//! ([`RunLimits::DEFAULT`]: 8 steps, 32 tool calls, 20,000 tokens, 60 s); a value an agent
//! sets above the supervisor's is narrowed to it. So `[supervisor] limits.max_tokens =
//! 1000000` lets the root (and every child that sets no `max_tokens`) spend that much, and a
//! run stopped by a limit is told with where the limit was set ([`Origin`]).

use arbor_core::supervisor::LimitsInput;
use arbor_protocol::{LimitKind, RunLimits};
use serde::Deserialize;

/// `[agents.NAME] limits`: each field optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentLimits {
    /// Most model turns in one run.
    pub(crate) max_steps: Option<u32>,
    /// Most tool calls in one run.
    pub(crate) max_tool_calls: Option<u32>,
    /// Most total tokens in one run.
    pub(crate) max_tokens: Option<u64>,
    /// Wall time of one run, in milliseconds.
    pub(crate) timeout_ms: Option<u64>,
}

/// Where an agent's run limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The agent's own `limits`.
    Agent,
    /// `[supervisor] limits` (the agent sets none, or a higher one).
    Supervisor,
    /// The built-in default.
    Default,
    /// The supervisor's built-in ceiling over children (`[supervisor] limits` leaves it
    /// unset): it lowered what the agent asks for when the agent runs as a child.
    Ceiling,
}

impl Origin {
    /// As the JSON report names it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Supervisor => "supervisor",
            Self::Default => "default",
            Self::Ceiling => "supervisor_default",
        }
    }
}

fn agent_value(a: &AgentLimits, kind: LimitKind) -> Option<u64> {
    match kind {
        LimitKind::MaxSteps => a.max_steps.map(u64::from),
        LimitKind::MaxToolCalls => a.max_tool_calls.map(u64::from),
        LimitKind::MaxTokens => a.max_tokens,
        LimitKind::TimeoutMs => a.timeout_ms,
        _ => None,
    }
}

fn supervisor_value(s: &LimitsInput, kind: LimitKind) -> Option<u64> {
    match kind {
        LimitKind::MaxSteps => s.max_steps.map(u64::from),
        LimitKind::MaxToolCalls => s.max_tool_calls.map(u64::from),
        LimitKind::MaxTokens => s.max_tokens,
        LimitKind::TimeoutMs => s.timeout_ms,
        _ => None,
    }
}

const RUN_KINDS: [LimitKind; 4] = [
    LimitKind::MaxSteps,
    LimitKind::MaxToolCalls,
    LimitKind::MaxTokens,
    LimitKind::TimeoutMs,
];

impl AgentLimits {
    /// Checks each value the agent sets against its hard cap; the error names the key.
    pub(crate) fn validate(&self) -> Result<(), String> {
        RunLimits {
            max_steps: self.max_steps.unwrap_or(RunLimits::DEFAULT.max_steps),
            max_tool_calls: self
                .max_tool_calls
                .unwrap_or(RunLimits::DEFAULT.max_tool_calls),
            max_tokens: self.max_tokens.unwrap_or(RunLimits::DEFAULT.max_tokens),
            timeout_ms: self.timeout_ms.unwrap_or(RunLimits::DEFAULT.timeout_ms),
        }
        .validate()
    }

    /// The limits a run of this agent gets under `supervisor` (see the module doc).
    pub(crate) fn resolve(&self, supervisor: &LimitsInput) -> RunLimits {
        let mut out = RunLimits::DEFAULT;
        for kind in RUN_KINDS {
            let value = match (agent_value(self, kind), supervisor_value(supervisor, kind)) {
                (Some(a), Some(s)) => a.min(s),
                (Some(a), None) => a,
                (None, Some(s)) => s,
                (None, None) => continue,
            };
            let small = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
            match kind {
                LimitKind::MaxSteps => out.max_steps = small(value),
                LimitKind::MaxToolCalls => out.max_tool_calls = small(value),
                LimitKind::MaxTokens => out.max_tokens = value,
                _ => out.timeout_ms = value,
            }
        }
        out
    }

    /// The limits a run of this agent gets as a child: [`resolve`](Self::resolve) under the
    /// supervisor's ceiling over children (its `[supervisor] limits`, else its built-in
    /// defaults), which only narrows.
    pub(crate) fn resolve_as_child(&self, supervisor: &LimitsInput) -> RunLimits {
        let own = self.resolve(supervisor);
        let ceiling = ceiling(supervisor);
        RunLimits {
            max_steps: own.max_steps.min(ceiling.max_steps),
            max_tool_calls: own.max_tool_calls.min(ceiling.max_tool_calls),
            max_tokens: own.max_tokens.min(ceiling.max_tokens),
            timeout_ms: own.timeout_ms.min(ceiling.timeout_ms),
        }
    }

    /// Where the value of `kind` that [`resolve_as_child`](Self::resolve_as_child) gives
    /// comes from.
    pub(crate) fn origin_as_child(&self, supervisor: &LimitsInput, kind: LimitKind) -> Origin {
        let own = self.resolve(supervisor).get(kind);
        if ceiling(supervisor).get(kind) < own {
            if supervisor_value(supervisor, kind).is_some() {
                Origin::Supervisor
            } else {
                Origin::Ceiling
            }
        } else {
            self.origin(supervisor, kind)
        }
    }

    /// Where the value of `kind` that [`resolve`](Self::resolve) gives comes from.
    pub(crate) fn origin(&self, supervisor: &LimitsInput, kind: LimitKind) -> Origin {
        match (agent_value(self, kind), supervisor_value(supervisor, kind)) {
            (Some(a), Some(s)) if s < a => Origin::Supervisor,
            (Some(_), _) => Origin::Agent,
            (None, Some(_)) => Origin::Supervisor,
            (None, None) => Origin::Default,
        }
    }
}

/// The run limits the supervisor's ceiling over children allows: its built-in defaults
/// overlaid with `[supervisor] limits` (a value over a hard cap was refused when the spec was
/// read; here it only keeps the default).
fn ceiling(supervisor: &LimitsInput) -> RunLimits {
    let d = arbor_core::supervisor::SupervisorLimits::DEFAULT;
    let d = arbor_core::supervisor::SupervisorLimits::resolve(supervisor).unwrap_or(d);
    RunLimits {
        max_steps: d.max_steps,
        max_tool_calls: d.max_tool_calls,
        max_tokens: d.max_tokens,
        timeout_ms: d.timeout_ms,
    }
}

/// One value a ceiling lowers: what the spec sets for the agent, what its runs get, and the
/// key that would raise it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lowered {
    /// The limit.
    pub(crate) kind: LimitKind,
    /// What the agent's own `limits` set.
    pub(crate) written: u64,
    /// What its runs get.
    pub(crate) effective: u64,
    /// The key to raise (`supervisor.limits.KEY`).
    pub(crate) raise: String,
    /// Whether the ceiling is the supervisor's built-in default (no `[supervisor] limits`
    /// value set).
    pub(crate) default: bool,
    /// The agent runs as a child.
    pub(crate) child: bool,
}

impl Lowered {
    /// The warning a person reads.
    pub(crate) fn warning(&self, agent: &str) -> String {
        format!(
            "agents.{agent}.limits.{kind} = {} is lowered to {}{}, by the supervisor's ceiling \
             ({}); raise [supervisor] limits.{kind} to allow it",
            crate::render::report::thousands(self.written),
            crate::render::report::thousands(self.effective),
            if self.child {
                format!(" when {agent} runs as a child")
            } else {
                String::new()
            },
            if self.default {
                "its built-in default"
            } else {
                "set by [supervisor] limits"
            },
            kind = self.kind
        )
    }
}

/// An agent's limits with what they compose with: enough to say where a limit that stopped
/// its run was set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Provenance {
    /// The agent's name.
    pub(crate) agent: String,
    /// Its limits as written.
    pub(crate) own: AgentLimits,
    /// `[supervisor] limits` as written.
    pub(crate) supervisor: LimitsInput,
    /// It runs as a child (under the supervisor's ceiling), not as the root.
    pub(crate) child: bool,
}

impl Provenance {
    /// Where the limit `kind` comes from.
    pub(crate) fn origin(&self, kind: LimitKind) -> Origin {
        if self.child {
            self.own.origin_as_child(&self.supervisor, kind)
        } else {
            self.own.origin(&self.supervisor, kind)
        }
    }

    /// The limits its runs get.
    pub(crate) fn effective(&self) -> RunLimits {
        if self.child {
            self.own.resolve_as_child(&self.supervisor)
        } else {
            self.own.resolve(&self.supervisor)
        }
    }

    /// The values the agent sets that a ceiling lowers (as a child: the supervisor's; as the
    /// root: `[supervisor] limits`).
    pub(crate) fn lowered(&self) -> Vec<Lowered> {
        let effective = self.effective();
        RUN_KINDS
            .iter()
            .filter_map(|&kind| {
                let written = agent_value(&self.own, kind)?;
                let now = effective.get(kind)?;
                (now < written).then(|| Lowered {
                    kind,
                    written,
                    effective: now,
                    raise: format!("supervisor.limits.{kind}"),
                    default: supervisor_value(&self.supervisor, kind).is_none(),
                    child: self.child,
                })
            })
            .collect()
    }

    /// Where the limit `kind` is set, for a person (see [`where_set`]).
    pub(crate) fn describe(&self, kind: LimitKind) -> String {
        where_set(&self.agent, kind, self.origin(kind))
    }

    /// The spec key that sets `kind` for this agent, as it would be written.
    pub(crate) fn key(&self, kind: LimitKind) -> String {
        match self.origin(kind) {
            Origin::Supervisor | Origin::Ceiling => format!("supervisor.limits.{kind}"),
            Origin::Agent | Origin::Default => format!("agents.{}.limits.{kind}", self.agent),
        }
    }
}

/// Every child agent's [`Provenance`], by agent name.
pub(crate) type Limits = std::collections::BTreeMap<String, Provenance>;

/// Where the limit `kind` of agent `agent` is set, for a person: what to change to raise it.
pub(crate) fn where_set(agent: &str, kind: LimitKind, origin: Origin) -> String {
    match origin {
        Origin::Agent => format!("set by agents.{agent}.limits.{kind}"),
        Origin::Supervisor => format!("set by [supervisor] limits.{kind}"),
        Origin::Ceiling => format!(
            "the supervisor's built-in ceiling over children, below what agents.{agent}.limits \
             asks for; raise it with [supervisor] limits.{kind}"
        ),
        Origin::Default => format!(
            "the built-in default; raise it with agents.{agent}.limits.{kind} or [supervisor] \
             limits.{kind}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_supervisor_is_every_agents_default_and_ceiling() {
        let sup = LimitsInput {
            max_tokens: Some(1_000_000),
            max_steps: Some(4),
            ..LimitsInput::default()
        };
        let none = AgentLimits::default();
        let got = none.resolve(&sup);
        assert_eq!(got.max_tokens, 1_000_000);
        assert_eq!(got.max_steps, 4);
        assert_eq!(got.max_tool_calls, RunLimits::DEFAULT.max_tool_calls);
        assert_eq!(none.origin(&sup, LimitKind::MaxTokens), Origin::Supervisor);
        assert_eq!(none.origin(&sup, LimitKind::TimeoutMs), Origin::Default);

        let own = AgentLimits {
            max_tokens: Some(50_000),
            max_steps: Some(10),
            ..AgentLimits::default()
        };
        let got = own.resolve(&sup);
        assert_eq!((got.max_tokens, got.max_steps), (50_000, 4));
        assert_eq!(own.origin(&sup, LimitKind::MaxTokens), Origin::Agent);
        assert_eq!(own.origin(&sup, LimitKind::MaxSteps), Origin::Supervisor);
        // No supervisor limits: the agent's, else the defaults (today's behaviour).
        assert_eq!(own.resolve(&LimitsInput::default()).max_steps, 10);
        assert_eq!(none.resolve(&LimitsInput::default()), RunLimits::DEFAULT);
    }

    #[test]
    fn where_a_limit_is_set_says_what_to_change() {
        assert_eq!(
            where_set("root", LimitKind::MaxTokens, Origin::Default),
            "the built-in default; raise it with agents.root.limits.max_tokens or [supervisor] \
             limits.max_tokens"
        );
        assert_eq!(
            where_set("root", LimitKind::MaxTokens, Origin::Supervisor),
            "set by [supervisor] limits.max_tokens"
        );
    }
}
