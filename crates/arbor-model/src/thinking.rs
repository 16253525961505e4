//! Thinking levels: how much a model reasons before it answers, and what each level means
//! on the wire.
//!
//! A level is requested per agent (a spawn's `thinking`), checked against the levels the
//! model is declared to support, and carried in [`ModelRequest::thinking`](crate::ModelRequest).
//! The OpenAI-compatible wire sends it as `reasoning_effort` (the level's name); the
//! Anthropic wire as `thinking: {type: enabled, budget_tokens}` (see [`ThinkingLevel::budget_tokens`]).
//! `off` sends nothing on either.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How much a model reasons before it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingLevel {
    /// No reasoning asked for.
    Off,
    /// The least reasoning.
    Minimal,
    /// Little.
    Low,
    /// Some.
    Medium,
    /// Much.
    High,
    /// More.
    Xhigh,
    /// The most the model offers.
    Max,
}

impl ThinkingLevel {
    /// Every level, least first.
    pub const ALL: [ThinkingLevel; 7] = [
        Self::Off,
        Self::Minimal,
        Self::Low,
        Self::Medium,
        Self::High,
        Self::Xhigh,
        Self::Max,
    ];

    /// The level's name: `off`, `minimal`, `low`, `medium`, `high`, `xhigh` or `max`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Minimal => "minimal",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
            Self::Xhigh => "xhigh",
            Self::Max => "max",
        }
    }

    /// A level from its name, trimmed and case-insensitive; the error lists every name.
    pub fn parse(text: &str) -> Result<Self, String> {
        let wanted = text.trim().to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|l| l.as_str() == wanted)
            .ok_or_else(|| format!("thinking must be one of: {}", names(&Self::ALL)))
    }

    /// The Anthropic thinking budget of the level (`None` for `off`): 1024 tokens for
    /// `minimal` (the API's least), 2048 `low`, 8192 `medium`, 16384 `high`, 32768 `xhigh`,
    /// 65536 `max`.
    pub fn budget_tokens(self) -> Option<u32> {
        match self {
            Self::Off => None,
            Self::Minimal => Some(1024),
            Self::Low => Some(2048),
            Self::Medium => Some(8192),
            Self::High => Some(16384),
            Self::Xhigh => Some(32768),
            Self::Max => Some(65536),
        }
    }

    /// The OpenAI-compatible `reasoning_effort` of the level (`None` for `off`): its name.
    pub fn reasoning_effort(self) -> Option<&'static str> {
        match self {
            Self::Off => None,
            other => Some(other.as_str()),
        }
    }
}

/// Levels as a comma-separated list of names, in the order given.
pub fn names(levels: &[ThinkingLevel]) -> String {
    levels
        .iter()
        .map(|l| l.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for ThinkingLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ThinkingLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_trimmed_and_case_insensitive() {
        assert_eq!(ThinkingLevel::parse(" High "), Ok(ThinkingLevel::High));
        assert_eq!(ThinkingLevel::parse("xhigh"), Ok(ThinkingLevel::Xhigh));
        assert_eq!(
            ThinkingLevel::parse("hgih").unwrap_err(),
            "thinking must be one of: off, minimal, low, medium, high, xhigh, max"
        );
        for l in ThinkingLevel::ALL {
            assert_eq!(l.as_str().parse::<ThinkingLevel>(), Ok(l));
            assert_eq!(serde_json::to_value(l).unwrap(), l.as_str());
        }
        assert_eq!(ThinkingLevel::Off.budget_tokens(), None);
        assert_eq!(ThinkingLevel::Off.reasoning_effort(), None);
        assert_eq!(ThinkingLevel::Minimal.budget_tokens(), Some(1024));
    }
}
