//! Supervisor limits: defaults, hard caps, resolution and narrowing.
//!
//! Every value is an integer of at least 1 and at most its hard cap. A configuration or
//! request over a hard cap is a validation error naming the key; a request above the
//! inherited value but under the hard cap is clamped down to the inherited value. Limits only
//! ever narrow on the way down the tree: base → child entry → request → budget share → hook.

use arbor_protocol::RunLimits;
use serde::{Deserialize, Serialize};

use crate::error::{CoreError, CoreResult};

macro_rules! supervisor_limits {
    ($( $(#[$doc:meta])* $key:ident : $ty:ty = $default:expr, $hard:expr; )*) => {
        /// Resolved supervisor limits: every field set and within its hard cap.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub struct SupervisorLimits {
            $( $(#[$doc])* pub $key: $ty, )*
        }

        /// Limits as a host or request states them: each field optional.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct LimitsInput {
            $( $(#[$doc])* #[serde(skip_serializing_if = "Option::is_none")] pub $key: Option<$ty>, )*
        }

        impl SupervisorLimits {
            /// The defaults.
            pub const DEFAULT: SupervisorLimits = SupervisorLimits { $( $key: $default, )* };
            /// The hard caps.
            pub const HARD: SupervisorLimits = SupervisorLimits { $( $key: $hard, )* };

            fn check(&self) -> CoreResult<()> {
                $(
                    if self.$key < 1 || self.$key > Self::HARD.$key {
                        return Err(CoreError::validation(format!(
                            "{} must be a positive integer at most {}",
                            stringify!($key),
                            Self::HARD.$key
                        )));
                    }
                )*
                Ok(())
            }

            /// `input` over the defaults, validated. The error names the first bad key.
            pub fn resolve(input: &LimitsInput) -> CoreResult<SupervisorLimits> {
                let resolved = SupervisorLimits {
                    $( $key: input.$key.unwrap_or(Self::DEFAULT.$key), )*
                };
                resolved.check()?;
                Ok(resolved)
            }

            /// These limits narrowed by `input`: each given value is validated against its hard
            /// cap, then the lower of it and the current value is kept.
            pub fn narrow(&self, input: &LimitsInput) -> CoreResult<SupervisorLimits> {
                let overlay = SupervisorLimits {
                    $( $key: input.$key.unwrap_or(self.$key), )*
                };
                overlay.check()?;
                Ok(SupervisorLimits {
                    $( $key: self.$key.min(overlay.$key), )*
                })
            }

            /// These limits as an input (every field set).
            pub fn to_input(&self) -> LimitsInput {
                LimitsInput { $( $key: Some(self.$key), )* }
            }
        }
    };
}

supervisor_limits! {
    /// Longest delegation chain: a root's children are at depth 1.
    max_depth: u32 = 4, 16;
    /// Live children across the whole tree.
    max_active_children: u32 = 4, 32;
    /// UTF-8 bytes of a delegation's input, after redaction.
    max_message_bytes: u64 = 64 * 1024, 1024 * 1024;
    /// Model turns of a child run.
    max_steps: u32 = 8, 64;
    /// Tool calls of a child run.
    max_tool_calls: u32 = 32, 256;
    /// Tokens of a child run.
    max_tokens: u64 = 20_000, 1_000_000;
    /// Wall time of a delegation (hook, factory and run), in milliseconds.
    timeout_ms: u64 = 60_000, 30 * 60 * 1000;
    /// Supervisor event queue; also how many finished async handles are retained.
    max_queued_events: u32 = 128, 4096;
    /// Child events projected per delegation.
    max_child_events_per_delegation: u32 = 256, 4096;
    /// UTF-8 bytes of one projected child event, serialized.
    max_child_event_bytes: u64 = 32 * 1024, 256 * 1024;
    /// Child events projected per second per delegation.
    max_child_events_per_second: u32 = 10, 1000;
    /// UTF-8 bytes of a child's answer handed to its parent's context; past it the text is
    /// cut with a marker (the whole answer stays in the child's transcript).
    max_result_bytes: u64 = 64 * 1024, 1024 * 1024;
}

impl Default for SupervisorLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl SupervisorLimits {
    /// Scales the run limits (steps, tool calls, tokens, timeout) by `share` in (0, 1]:
    /// `floor(value × share)`, at least 1. Other limits are unchanged.
    pub fn scaled(&self, share: f64) -> SupervisorLimits {
        fn scale(v: u64, share: f64) -> u64 {
            // f64 holds every value under the hard caps exactly.
            ((v as f64 * share).floor() as u64).max(1)
        }
        SupervisorLimits {
            max_steps: u32::try_from(scale(u64::from(self.max_steps), share))
                .unwrap_or(self.max_steps),
            max_tool_calls: u32::try_from(scale(u64::from(self.max_tool_calls), share))
                .unwrap_or(self.max_tool_calls),
            max_tokens: scale(self.max_tokens, share),
            timeout_ms: scale(self.timeout_ms, share),
            ..*self
        }
    }

    /// The run limits a child run gets.
    pub fn run_limits(&self) -> RunLimits {
        RunLimits {
            max_steps: self.max_steps,
            max_tool_calls: self.max_tool_calls,
            max_tokens: self.max_tokens,
            timeout_ms: self.timeout_ms,
        }
    }

    /// The most sessions these limits permit at once: the root plus `max_active_children`
    /// live children, which is also bounded by a full tree of fan-out `max_active_children`
    /// and depth `max_depth`.
    pub fn worst_case_sessions(&self) -> u64 {
        let fan = u64::from(self.max_active_children);
        let mut tree: u64 = 1;
        let mut level: u64 = 1;
        for _ in 0..self.max_depth {
            level = level.saturating_mul(fan);
            tree = tree.saturating_add(level);
        }
        tree.min(1 + fan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_hard_caps_match_the_table() {
        let d = SupervisorLimits::DEFAULT;
        let h = SupervisorLimits::HARD;
        assert_eq!((d.max_depth, h.max_depth), (4, 16));
        assert_eq!((d.max_active_children, h.max_active_children), (4, 32));
        assert_eq!(
            (d.max_message_bytes, h.max_message_bytes),
            (65_536, 1_048_576)
        );
        assert_eq!((d.max_steps, h.max_steps), (8, 64));
        assert_eq!((d.max_tool_calls, h.max_tool_calls), (32, 256));
        assert_eq!((d.max_tokens, h.max_tokens), (20_000, 1_000_000));
        assert_eq!((d.timeout_ms, h.timeout_ms), (60_000, 1_800_000));
        assert_eq!((d.max_queued_events, h.max_queued_events), (128, 4096));
        assert_eq!(
            (
                d.max_child_events_per_delegation,
                h.max_child_events_per_delegation
            ),
            (256, 4096)
        );
        assert_eq!(
            (d.max_child_event_bytes, h.max_child_event_bytes),
            (32_768, 262_144)
        );
        assert_eq!(
            (d.max_child_events_per_second, h.max_child_events_per_second),
            (10, 1000)
        );
    }

    #[test]
    fn resolve_names_the_first_bad_key() {
        let err = SupervisorLimits::resolve(&LimitsInput {
            max_depth: Some(17),
            max_tokens: Some(0),
            ..LimitsInput::default()
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "max_depth must be a positive integer at most 16"
        );
        let err = SupervisorLimits::resolve(&LimitsInput {
            max_tokens: Some(0),
            ..LimitsInput::default()
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "max_tokens must be a positive integer at most 1000000"
        );
    }

    #[test]
    fn narrow_clamps_under_the_hard_cap_and_rejects_over_it() {
        let parent = SupervisorLimits::resolve(&LimitsInput {
            max_steps: Some(10),
            ..LimitsInput::default()
        })
        .unwrap();
        let n = parent
            .narrow(&LimitsInput {
                max_steps: Some(40),
                max_tokens: Some(500),
                ..LimitsInput::default()
            })
            .unwrap();
        assert_eq!(n.max_steps, 10, "above the parent: clamped");
        assert_eq!(n.max_tokens, 500, "below: taken");
        let err = parent
            .narrow(&LimitsInput {
                max_steps: Some(65),
                ..LimitsInput::default()
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "max_steps must be a positive integer at most 64"
        );
        assert_eq!(parent.narrow(&LimitsInput::default()).unwrap(), parent);
    }

    #[test]
    fn budget_share_scales_run_limits_only() {
        let s = SupervisorLimits::DEFAULT.scaled(0.25);
        assert_eq!(s.max_steps, 2);
        assert_eq!(s.max_tool_calls, 8);
        assert_eq!(s.max_tokens, 5_000);
        assert_eq!(s.timeout_ms, 15_000);
        assert_eq!(s.max_depth, 4);
        let tiny = SupervisorLimits::DEFAULT.scaled(0.0001);
        assert_eq!(tiny.max_steps, 1, "never below 1");
        assert_eq!(
            SupervisorLimits::DEFAULT.scaled(1.0),
            SupervisorLimits::DEFAULT
        );
    }

    #[test]
    fn worst_case_sessions_is_bounded_by_active_children() {
        assert_eq!(SupervisorLimits::DEFAULT.worst_case_sessions(), 5);
        let one_level = SupervisorLimits {
            max_depth: 1,
            max_active_children: 3,
            ..SupervisorLimits::DEFAULT
        };
        assert_eq!(one_level.worst_case_sessions(), 4);
    }
}
