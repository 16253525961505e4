//! Attribution of a run that died on a limit: what it consumed (turns, prompt tokens,
//! provider calls, request bytes), how close it came to its other limits, and its last tool
//! calls with their arguments only as SHA-256 hashes. The supervisor puts it on
//! `child_failed`, so a host can tell a child that hit one wall from one that was about to
//! hit all of them, without ever seeing what the child sent to its tools.

use std::collections::VecDeque;

use arbor_protocol::{
    AxisUse, Consumed, LimitKind, Message, RecentCall, RunAttribution, RunLimitBreach, RunLimits,
    ToolCall, Usage,
};
use sha2::{Digest, Sha256};

/// Recent calls kept.
const RECENT_CALLS: usize = 10;

/// What a run records for its attribution as it goes. Cheap: counters, and the hash of
/// each call's arguments.
#[derive(Debug, Default)]
pub(crate) struct Trace {
    provider_attempts: u32,
    request_bytes: u64,
    recent: VecDeque<RecentCall>,
}

impl Trace {
    /// One provider call on `messages` (and the system prompt).
    pub(crate) fn request(&mut self, system: Option<&str>, messages: &[Message]) {
        self.provider_attempts = self.provider_attempts.saturating_add(1);
        let bytes = serialized_len(&messages).saturating_add(system.map_or(0, str::len));
        self.request_bytes = self.request_bytes.saturating_add(bytes as u64);
    }

    /// The calls of one turn.
    pub(crate) fn calls(&mut self, calls: &[ToolCall]) {
        for call in calls {
            if self.recent.len() == RECENT_CALLS {
                self.recent.pop_front();
            }
            let args = serde_json::to_vec(&call.arguments).unwrap_or_default();
            let hex: String = Sha256::digest(&args)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            self.recent.push_back(RecentCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arg_hash: format!("sha256:{hex}"),
            });
        }
    }

    /// The attribution of a run that hit `breach`.
    pub(crate) fn attribution(
        &self,
        breach: &RunLimitBreach,
        limits: &RunLimits,
        used: Used,
    ) -> RunAttribution {
        let ratio = |n: u64, max: u64| if max == 0 { 0.0 } else { n as f64 / max as f64 };
        let mut axes: Vec<AxisUse> = [
            (
                LimitKind::MaxSteps,
                ratio(u64::from(used.turns), u64::from(limits.max_steps)),
            ),
            (
                LimitKind::MaxToolCalls,
                ratio(u64::from(used.tool_calls), u64::from(limits.max_tool_calls)),
            ),
            (
                LimitKind::MaxTokens,
                ratio(used.usage.total_tokens, limits.max_tokens),
            ),
            (
                LimitKind::TimeoutMs,
                ratio(used.elapsed_ms, limits.timeout_ms),
            ),
        ]
        .into_iter()
        .filter(|(axis, _)| *axis != breach.limit)
        .map(|(axis, used_ratio)| AxisUse { axis, used_ratio })
        .collect();
        axes.sort_by(|a, b| b.used_ratio.total_cmp(&a.used_ratio));
        axes.truncate(3);
        RunAttribution {
            consumed: Consumed {
                turns: used.turns,
                input_tokens: used.usage.input_tokens,
                provider_attempts: self.provider_attempts,
                request_bytes: self.request_bytes,
            },
            closest_other_axes: axes,
            recent_tool_calls: self.recent.iter().cloned().collect(),
        }
    }
}

/// What a run used of its limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Used {
    pub(crate) turns: u32,
    pub(crate) tool_calls: u32,
    pub(crate) usage: Usage,
    pub(crate) elapsed_ms: u64,
}

/// The serialized size of a value, without building the string.
pub(crate) fn serialized_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_ten_calls_hashed_and_the_three_closest_other_axes() {
        let mut t = Trace::default();
        let calls: Vec<ToolCall> = (0..12)
            .map(|i| ToolCall {
                id: format!("c{i}"),
                name: "write".into(),
                arguments: serde_json::json!({"secret": "hunter2", "i": i}),
            })
            .collect();
        t.calls(&calls);
        t.request(Some("sys"), &[Message::user("hi")]);
        let limits = RunLimits {
            max_steps: 8,
            max_tool_calls: 12,
            max_tokens: 1000,
            timeout_ms: 10_000,
        };
        let breach = RunLimitBreach {
            limit: LimitKind::MaxToolCalls,
            maximum: 12,
            observed: 13,
        };
        let used = Used {
            turns: 4,
            tool_calls: 12,
            usage: Usage::new(600, 100),
            elapsed_ms: 1000,
        };
        let a = t.attribution(&breach, &limits, used);
        assert_eq!(a.recent_tool_calls.len(), 10);
        assert_eq!(a.recent_tool_calls[0].id, "c2");
        let json = serde_json::to_string(&a).unwrap();
        assert!(!json.contains("hunter2"), "arguments never appear: {json}");
        let expected = Sha256::digest(serde_json::to_vec(&calls[2].arguments).unwrap());
        let hex: String = expected.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(a.recent_tool_calls[0].arg_hash, format!("sha256:{hex}"));
        let axes: Vec<LimitKind> = a.closest_other_axes.iter().map(|x| x.axis).collect();
        assert_eq!(
            axes,
            [
                LimitKind::MaxTokens,
                LimitKind::MaxSteps,
                LimitKind::TimeoutMs
            ]
        );
        assert_eq!(a.closest_other_axes[0].used_ratio, 0.7);
        assert_eq!(a.consumed.turns, 4);
        assert_eq!(a.consumed.input_tokens, 600);
        assert_eq!(a.consumed.provider_attempts, 1);
        assert!(a.consumed.request_bytes > 3);
    }
}
