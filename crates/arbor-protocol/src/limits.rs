//! Run limits an agent carries, and the names of every limit arbor enforces ([`LimitKind`]:
//! one vocabulary for run limits, supervisor limits, message and approval bounds).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which limit fired: every limit arbor enforces, run and supervisor alike, by one name.
/// Serialized (and displayed) as the key a host configures it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LimitKind {
    /// Model turns in one run.
    MaxSteps,
    /// Tool calls in one run.
    MaxToolCalls,
    /// Total tokens of one run (checked after each provider turn).
    MaxTokens,
    /// Wall time of one run or of one delegation, in milliseconds.
    TimeoutMs,
    /// Children live at once across a supervisor's tree.
    MaxActiveChildren,
    /// How deep the tree may grow.
    MaxDepth,
    /// The bytes of a child's input or of one message.
    MaxMessageBytes,
    /// Messages waiting in one inbox.
    MaxPendingMessages,
    /// Messages one sender may send per second.
    MessagesPerSecond,
    /// Calls of one run waiting for a decision.
    MaxPendingApprovals,
    /// The bytes of a decision's reason.
    MaxReasonBytes,
    /// Sticky decisions one approval checkpoint keeps.
    MaxStickyDecisions,
    /// The length of an approval's attribution path.
    MaxAttributionPath,
    /// Children waiting for a free slot across a supervisor's tree (`on_full = "queue"`).
    MaxQueued,
}

impl LimitKind {
    /// The limits of one run ([`RunLimits`]' fields).
    pub const RUN: [LimitKind; 4] = [
        Self::MaxSteps,
        Self::MaxToolCalls,
        Self::MaxTokens,
        Self::TimeoutMs,
    ];

    /// Every limit, run limits first.
    pub const ALL: [LimitKind; 14] = [
        Self::MaxSteps,
        Self::MaxToolCalls,
        Self::MaxTokens,
        Self::TimeoutMs,
        Self::MaxActiveChildren,
        Self::MaxDepth,
        Self::MaxMessageBytes,
        Self::MaxPendingMessages,
        Self::MessagesPerSecond,
        Self::MaxPendingApprovals,
        Self::MaxReasonBytes,
        Self::MaxStickyDecisions,
        Self::MaxAttributionPath,
        Self::MaxQueued,
    ];

    /// The configuration key of this limit.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::MaxSteps => "max_steps",
            Self::MaxToolCalls => "max_tool_calls",
            Self::MaxTokens => "max_tokens",
            Self::TimeoutMs => "timeout_ms",
            Self::MaxActiveChildren => "max_active_children",
            Self::MaxDepth => "max_depth",
            Self::MaxMessageBytes => "max_message_bytes",
            Self::MaxPendingMessages => "max_pending_messages",
            Self::MessagesPerSecond => "messages_per_second",
            Self::MaxPendingApprovals => "max_pending_approvals",
            Self::MaxReasonBytes => "max_reason_bytes",
            Self::MaxStickyDecisions => "max_sticky_decisions",
            Self::MaxAttributionPath => "max_attribution_path",
            Self::MaxQueued => "max_queued",
        }
    }

    /// The limit configured by `key`, if there is one.
    pub fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == key)
    }
}

/// A limit compares equal to its configuration key (`kind == "max_depth"`).
impl PartialEq<str> for LimitKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for LimitKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Limits of one run. Each run of a session is checked against them on its own.
///
/// Values narrow and never widen: [`RunLimits::narrow`] takes the lower of each field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunLimits {
    /// Most model turns in one run.
    pub max_steps: u32,
    /// Most tool calls in one run (checked before any of a turn's calls run).
    pub max_tool_calls: u32,
    /// Most total tokens in one run; may overshoot by at most one provider turn, because
    /// providers report usage after generating.
    pub max_tokens: u64,
    /// Wall-time limit of one run, in milliseconds.
    pub timeout_ms: u64,
}

impl RunLimits {
    /// Defaults: 8 steps, 32 tool calls, 20,000 tokens, 60 seconds.
    pub const DEFAULT: RunLimits = RunLimits {
        max_steps: 8,
        max_tool_calls: 32,
        max_tokens: 20_000,
        timeout_ms: 60_000,
    };

    /// Hard caps no configuration may exceed: 64 steps, 256 tool calls, 1,000,000 tokens,
    /// 30 minutes.
    pub const HARD: RunLimits = RunLimits {
        max_steps: 64,
        max_tool_calls: 256,
        max_tokens: 1_000_000,
        timeout_ms: 30 * 60 * 1000,
    };

    /// The lower of each field of `self` and `other`.
    pub fn narrow(&self, other: &RunLimits) -> RunLimits {
        RunLimits {
            max_steps: self.max_steps.min(other.max_steps),
            max_tool_calls: self.max_tool_calls.min(other.max_tool_calls),
            max_tokens: self.max_tokens.min(other.max_tokens),
            timeout_ms: self.timeout_ms.min(other.timeout_ms),
        }
    }

    /// The wall-time limit as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// The value of one run limit, widened to u64 (`None` for a limit a run does not carry).
    pub fn get(&self, kind: LimitKind) -> Option<u64> {
        match kind {
            LimitKind::MaxSteps => Some(u64::from(self.max_steps)),
            LimitKind::MaxToolCalls => Some(u64::from(self.max_tool_calls)),
            LimitKind::MaxTokens => Some(self.max_tokens),
            LimitKind::TimeoutMs => Some(self.timeout_ms),
            _ => None,
        }
    }

    /// Checks every field is at least 1 and at most its hard cap; the error names the first
    /// key that is not, as `<key> must be a positive integer at most <hard>`.
    pub fn validate(&self) -> Result<(), String> {
        for kind in LimitKind::RUN {
            let value = self.get(kind).unwrap_or(0);
            let hard = Self::HARD.get(kind).unwrap_or(0);
            if value == 0 || value > hard {
                return Err(format!("{kind} must be a positive integer at most {hard}"));
            }
        }
        Ok(())
    }
}

impl Default for RunLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_takes_the_lower_value() {
        let a = RunLimits {
            max_steps: 3,
            ..RunLimits::DEFAULT
        };
        let b = RunLimits {
            max_tokens: 100,
            ..RunLimits::DEFAULT
        };
        let n = a.narrow(&b);
        assert_eq!(n.max_steps, 3);
        assert_eq!(n.max_tokens, 100);
        assert_eq!(n.max_tool_calls, 32);
    }

    #[test]
    fn validate_names_the_key() {
        let bad = RunLimits {
            max_tool_calls: 257,
            ..RunLimits::DEFAULT
        };
        assert_eq!(
            bad.validate().unwrap_err(),
            "max_tool_calls must be a positive integer at most 256"
        );
        let zero = RunLimits {
            max_steps: 0,
            ..RunLimits::DEFAULT
        };
        assert_eq!(
            zero.validate().unwrap_err(),
            "max_steps must be a positive integer at most 64"
        );
        assert!(RunLimits::DEFAULT.validate().is_ok());
        assert!(RunLimits::HARD.validate().is_ok());
    }

    #[test]
    fn every_limit_serializes_as_its_key_and_parses_back() {
        for kind in LimitKind::ALL {
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json, serde_json::Value::from(kind.as_str()));
            assert_eq!(serde_json::from_value::<LimitKind>(json).unwrap(), kind);
            assert_eq!(LimitKind::from_key(kind.as_str()), Some(kind));
            assert_eq!(kind.to_string(), kind.as_str());
            assert!(kind == kind.as_str());
        }
        assert_eq!(LimitKind::from_key("max_fun"), None);
    }
}
