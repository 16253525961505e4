//! Attribution of a run that died on a limit: what it consumed (turns, prompt tokens,
//! provider calls, request bytes), how close it came to its other limits, and its last tool
//! calls with their arguments only as SHA-256 hashes. The supervisor puts it on
//! `child_failed`, so a host can tell a child that hit one wall from one that was about to
//! hit all of them, without ever seeing what the child sent to its tools.

use arbor_protocol::{
    AxisUse, Consumed, LimitKind, Message, RecentCall, RunAttribution, RunLimitBreach, RunLimits,
    ToolCall, Usage,
};
use sha2::{Digest, Sha256};

/// Recent calls kept.
const RECENT_CALLS: usize = 10;

/// What a run records for its attribution as it goes: only how many messages each provider
/// call was sent (a push per turn). Sizes and hashes are computed from the conversation
/// when a limit fires, never on the run's hot path.
#[derive(Debug, Default)]
pub(crate) struct Trace {
    /// The conversation's length at each provider call.
    requests: Vec<usize>,
    system_bytes: usize,
}

impl Trace {
    /// One provider call on the first `messages` of the conversation (and the system prompt).
    pub(crate) fn request(&mut self, system: Option<&str>, messages: usize) {
        self.system_bytes = system.map_or(0, str::len);
        self.requests.push(messages);
    }

    /// The attribution of a run that hit `breach`, with `messages` its conversation now.
    pub(crate) fn attribution(
        &self,
        breach: &RunLimitBreach,
        limits: &RunLimits,
        used: Used,
        messages: &[Message],
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
        // Bytes of each call's request: the prefix of the conversation it was sent.
        let mut prefix = Vec::with_capacity(messages.len() + 1);
        prefix.push(0u64);
        for m in messages {
            let last = prefix.last().copied().unwrap_or(0);
            prefix.push(last.saturating_add(serialized_len(m) as u64));
        }
        let request_bytes = self.requests.iter().fold(0u64, |sum, &n| {
            let convo = prefix.get(n.min(messages.len())).copied().unwrap_or(0);
            sum.saturating_add(convo)
                .saturating_add(self.system_bytes as u64)
        });
        RunAttribution {
            consumed: Consumed {
                turns: used.turns,
                input_tokens: used.usage.input_tokens,
                provider_attempts: u32::try_from(self.requests.len()).unwrap_or(u32::MAX),
                request_bytes,
            },
            closest_other_axes: axes,
            recent_tool_calls: recent_calls(messages),
        }
    }
}

/// The last [`RECENT_CALLS`] tool calls of the conversation, oldest first, their arguments
/// hashed.
fn recent_calls(messages: &[Message]) -> Vec<RecentCall> {
    let mut recent: Vec<RecentCall> = messages
        .iter()
        .rev()
        .filter_map(|m| match m {
            Message::Assistant { tool_calls, .. } => Some(tool_calls.iter().rev()),
            _ => None,
        })
        .flatten()
        .take(RECENT_CALLS)
        .map(hashed)
        .collect();
    recent.reverse();
    recent
}

fn hashed(call: &ToolCall) -> RecentCall {
    let args = serde_json::to_vec(&call.arguments).unwrap_or_default();
    let hex: String = Sha256::digest(&args)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    RecentCall {
        id: call.id.clone(),
        name: call.name.clone(),
        arg_hash: format!("sha256:{hex}"),
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
        let messages = vec![
            Message::user("hi"),
            Message::Assistant {
                content: String::new(),
                tool_calls: calls.clone(),
            },
        ];
        t.request(Some("sys"), 1);
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
        let a = t.attribution(&breach, &limits, used, &messages);
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
        assert_eq!(
            a.consumed.request_bytes,
            (serialized_len(&messages[0]) + 3) as u64,
            "the first message and the system prompt"
        );
    }
}
