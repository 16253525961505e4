//! Forked context: a child whose conversation begins with its parent's.
//!
//! A spawn asks for it with [`ForkContext`] (`none`, the default; `all`; or the parent's
//! `last_turns`). Admission fixes where the fork is, a [`ForkPoint`] kept in the child's
//! record (`meta.fork`): the parent's transcript up to the entry before the assistant message
//! that made the spawn call (a pending call is never part of it). Whoever opens the child's
//! session (this process, a resumed run, another worker) reads the prefix from the parent's
//! transcript again, so it is the same every time and never copied entry by entry: the
//! child's transcript records it once, as a `forked` entry written with its first run.
//!
//! The prefix is the messages the parent's model saw there (its compactions applied), with a
//! trailing assistant message whose calls have no results left out, cut to the last turns
//! asked for (starting at a user message, as every provider wants), and redacted by the
//! child's agent's redactor. Its tokens are the child's own prompt tokens: nothing of the
//! parent's usage is copied or attributed again.

use std::sync::Arc;

use arbor_protocol::{EntryKind, Message, SessionId, TranscriptEntry};
use arbor_store::Store;
use serde::{Deserialize, Serialize};

use crate::error::{CoreError, CoreResult};
use crate::redact::Redactor;

/// The key of a child record's meta that holds its [`ForkPoint`].
pub const FORK: &str = "fork";
/// The most turns `last_turns` may ask.
pub const MAX_LAST_TURNS: u32 = 1000;

/// How much of its parent's conversation a child starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForkContext {
    /// Nothing: the child sees only its task (the default).
    #[default]
    None,
    /// The parent's whole conversation so far.
    All,
    /// The parent's last turns (assistant messages), from the user message before them.
    LastTurns(u32),
}

impl ForkContext {
    /// `last_turns` checked: 1 to [`MAX_LAST_TURNS`], refused naming `context`.
    pub fn last_turns(n: u32) -> CoreResult<Self> {
        if n == 0 || n > MAX_LAST_TURNS {
            return Err(CoreError::invalid(
                "context",
                format!("context: last_turns is 1 to {MAX_LAST_TURNS}, got {n}"),
            ));
        }
        Ok(Self::LastTurns(n))
    }

    /// Whether it forks anything.
    pub fn forks(self) -> bool {
        self != Self::None
    }
}

impl Serialize for ForkContext {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::None => s.serialize_str("none"),
            Self::All => s.serialize_str("all"),
            Self::LastTurns(n) => {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("last_turns", n)?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for ForkContext {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Last {
            last_turns: u32,
        }
        let shape = "context must be \"none\", \"all\" or {\"last_turns\": N}";
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) if s == "none" => Ok(Self::None),
            serde_json::Value::String(s) if s == "all" => Ok(Self::All),
            object @ serde_json::Value::Object(_) => {
                let last: Last = serde_json::from_value(object)
                    .map_err(|e| serde::de::Error::custom(format!("{shape} ({e})")))?;
                Self::last_turns(last.last_turns).map_err(serde::de::Error::custom)
            }
            other => Err(serde::de::Error::custom(format!("{shape} (got {other})"))),
        }
    }
}

impl schemars::JsonSchema for ForkContext {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ForkContext".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [
                {"type": "string", "enum": ["none", "all"]},
                {
                    "type": "object",
                    "properties": {
                        "last_turns": {"type": "integer", "minimum": 1, "maximum": MAX_LAST_TURNS}
                    },
                    "required": ["last_turns"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

/// What a catalog entry lets a spawn fork ([`ChildEntry::context`](crate::supervisor::ChildEntry::context)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContextPolicy {
    /// A spawn chooses (none by default).
    #[default]
    Allowed,
    /// No spawn of it forks: one that asks is refused, naming `context`.
    Forbidden,
    /// Every spawn of it forks: this much when the spawn names none; one that asks for
    /// `none` is refused, naming `context`.
    Required(ForkContext),
}

impl ContextPolicy {
    /// What a spawn of `child` that asked `asked` forks, or why it may not.
    pub(crate) fn resolve(
        self,
        child: &str,
        asked: Option<ForkContext>,
    ) -> CoreResult<ForkContext> {
        let refused = |why: &str| {
            Err(CoreError::invalid(
                "context",
                format!("context: the catalog entry of {child} {why}"),
            ))
        };
        match (self, asked) {
            (Self::Forbidden, Some(c)) if c.forks() => {
                refused("forbids forking the parent's conversation")
            }
            (Self::Required(_), Some(ForkContext::None)) => {
                refused("requires forking the parent's conversation")
            }
            (Self::Required(default), None) => Ok(default),
            (_, asked) => Ok(asked.unwrap_or_default()),
        }
    }
}

/// Where a child's conversation forks from its parent's, fixed at admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkPoint {
    /// The parent's session.
    pub from: SessionId,
    /// The last entry of the parent's transcript the fork holds.
    pub through: u64,
    /// Only the parent's last turns (none: all of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_turns: Option<u32>,
}

impl ForkPoint {
    /// Where a fork of `context` from `parent` is now: before the assistant message that
    /// made `call` (the spawn's call id, in the parent's run `run`: ids repeat across
    /// turns), else at the transcript's end. `None` for [`ForkContext::None`].
    pub(crate) async fn at(
        store: &dyn Store,
        parent: SessionId,
        call: Option<(&str, Option<arbor_protocol::RunId>)>,
        context: ForkContext,
    ) -> CoreResult<Option<Self>> {
        let last_turns = match context {
            ForkContext::None => return Ok(None),
            ForkContext::All => None,
            ForkContext::LastTurns(n) => Some(n),
        };
        let entries = store.transcript(parent, 0, None).await?;
        // The latest such message: a call id can repeat in earlier turns.
        let calling = call.and_then(|(id, run)| {
            entries.iter().rev().find(|e| {
                run.is_none_or(|r| e.run_id == r)
                    && matches!(&e.kind, EntryKind::Message { message: Message::Assistant { tool_calls, .. } }
                    if tool_calls.iter().any(|c| c.id == id))
            })
        });
        let through = match calling {
            Some(e) => e.seq.saturating_sub(1),
            None => entries.last().map_or(0, |e| e.seq),
        };
        Ok(Some(Self {
            from: parent,
            through,
            last_turns,
        }))
    }

    /// The point a record's meta holds (`None` without one; an unreadable one is an error).
    pub(crate) fn of_meta(meta: &arbor_store::Meta) -> CoreResult<Option<Self>> {
        // Its `fork` field alone is read: a child's typed meta is not turned into JSON.
        match meta.field(FORK) {
            None => Ok(None),
            Some(v) => serde_json::from_value(v.into_owned())
                .map(Some)
                .map_err(|e| {
                    CoreError::Validation(format!("the session's fork is unreadable: {e}"))
                }),
        }
    }

    /// The messages the fork gives the child, read from the parent's transcript (after the
    /// parent's own fork, when it was forked too: what its model saw).
    pub(crate) async fn prefix(
        &self,
        store: &dyn Store,
        redactor: Option<&Arc<dyn Redactor>>,
    ) -> CoreResult<Vec<Message>> {
        let start = self.parents_prefix(store).await?;
        let limit = usize::try_from(self.through).unwrap_or(usize::MAX);
        let entries: Vec<TranscriptEntry> = store
            .transcript(self.from, 0, Some(limit))
            .await?
            .into_iter()
            .take_while(|e| e.seq <= self.through)
            .collect();
        let mut messages = crate::session::replay::replay_messages(start, entries);
        drop_dangling(&mut messages);
        if let Some(n) = self.last_turns {
            keep_last_turns(&mut messages, n);
        }
        if let Some(r) = redactor {
            for m in &mut messages {
                redact_message(r.as_ref(), m);
            }
        }
        Ok(messages)
    }
}

impl ForkPoint {
    /// The prefix the parent itself was forked with (none when it was not), unredacted:
    /// the whole prefix is redacted once, by the caller. Boxed: it recurses up the forks, at
    /// most as deep as the tree.
    fn parents_prefix<'a>(
        &'a self,
        store: &'a dyn Store,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = CoreResult<Vec<Message>>> + Send + 'a>>
    {
        Box::pin(async move {
            let Some(parent) = store.session(self.from).await? else {
                return Ok(Vec::new());
            };
            if parent.parent_id.is_none() {
                return Ok(Vec::new());
            }
            match ForkPoint::of_meta(&parent.meta)? {
                Some(above) => above.prefix(store, None).await,
                None => Ok(Vec::new()),
            }
        })
    }
}

/// The fork of the session with `record`, as its agent sees it: the prefix, and the
/// `forked` entry its first run writes when its transcript (`entries`) has none yet.
pub(crate) async fn of_session(
    store: &dyn Store,
    record: &arbor_store::SessionRecord,
    entries: &[TranscriptEntry],
    redactor: Option<&Arc<dyn Redactor>>,
) -> CoreResult<(Vec<Message>, Option<EntryKind>)> {
    // Only a child forks (a root's meta is its host's to fill).
    if record.parent_id.is_none() {
        return Ok((Vec::new(), None));
    }
    let Some(point) = ForkPoint::of_meta(&record.meta)? else {
        return Ok((Vec::new(), None));
    };
    let prefix = point.prefix(store, redactor).await?;
    let written = entries
        .iter()
        .any(|e| matches!(e.kind, EntryKind::Forked { .. }));
    let entry = (!written).then(|| EntryKind::Forked {
        from: point.from,
        through: point.through,
        messages: u32::try_from(prefix.len()).unwrap_or(u32::MAX),
    });
    Ok((prefix, entry))
}

/// Leaves out a trailing assistant message whose calls are not all answered (and what
/// follows it): a fork never holds a pending call.
fn drop_dangling(messages: &mut Vec<Message>) {
    let Some(at) = messages.iter().rposition(
        |m| matches!(m, Message::Assistant { tool_calls, .. } if !tool_calls.is_empty()),
    ) else {
        return;
    };
    let Message::Assistant { tool_calls, .. } = &messages[at] else {
        return;
    };
    let answered = tool_calls.iter().all(|c| {
        messages[at + 1..]
            .iter()
            .any(|m| matches!(m, Message::Tool(r) if r.call_id == c.id))
    });
    if !answered {
        messages.truncate(at);
    }
}

/// Keeps the last `n` turns (assistant messages), from the user message before the first of
/// them; everything when there are fewer.
fn keep_last_turns(messages: &mut Vec<Message>, n: u32) {
    let mut seen = 0;
    let mut start = None;
    for (i, m) in messages.iter().enumerate().rev() {
        if matches!(m, Message::Assistant { .. }) {
            seen += 1;
            if seen == n {
                start = Some(i);
                break;
            }
        }
    }
    let Some(first) = start else {
        return;
    };
    let from = messages[..first]
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
        .unwrap_or(0);
    messages.drain(..from);
}

fn redact_message(r: &dyn Redactor, m: &mut Message) {
    let redact = |s: &mut String| {
        if let std::borrow::Cow::Owned(o) = r.redact(s) {
            *s = o;
        }
    };
    match m {
        Message::System { content } | Message::User { content } => redact(content),
        Message::Assistant { content, .. } => redact(content),
        Message::Tool(t) => redact(&mut t.content),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_protocol::{ToolCall, ToolResult};

    fn assistant(text: &str, calls: &[&str]) -> Message {
        Message::Assistant {
            content: text.to_owned(),
            tool_calls: calls
                .iter()
                .map(|id| ToolCall {
                    id: (*id).to_owned(),
                    name: "t".to_owned(),
                    arguments: serde_json::json!({}),
                })
                .collect(),
        }
    }

    fn result(id: &str) -> Message {
        Message::Tool(ToolResult {
            call_id: id.to_owned(),
            name: "t".to_owned(),
            content: "r".to_owned(),
            is_error: false,
        })
    }

    #[test]
    fn a_pending_call_is_never_forked() {
        let mut m = vec![
            Message::user("a"),
            assistant("", &["1"]),
            result("1"),
            assistant("", &["2", "3"]),
            result("2"),
        ];
        drop_dangling(&mut m);
        assert_eq!(m.len(), 3);
        drop_dangling(&mut m);
        assert_eq!(m.len(), 3, "an answered call stays");
    }

    #[test]
    fn last_turns_start_at_a_user_message() {
        let all = vec![
            Message::user("one"),
            assistant("", &["1"]),
            result("1"),
            assistant("first answer", &[]),
            Message::user("two"),
            assistant("second answer", &[]),
        ];
        let mut m = all.clone();
        keep_last_turns(&mut m, 1);
        assert_eq!(m, all[4..]);
        let mut m = all.clone();
        keep_last_turns(&mut m, 2);
        assert_eq!(m, all, "the turn before starts at the first user message");
        let mut m = all.clone();
        keep_last_turns(&mut m, 9);
        assert_eq!(m, all);
    }

    #[test]
    fn the_wire_forms_read_and_bad_ones_name_the_field() {
        let read = |v: serde_json::Value| serde_json::from_value::<ForkContext>(v);
        assert_eq!(read(serde_json::json!("none")).unwrap(), ForkContext::None);
        assert_eq!(read(serde_json::json!("all")).unwrap(), ForkContext::All);
        assert_eq!(
            read(serde_json::json!({"last_turns": 3})).unwrap(),
            ForkContext::LastTurns(3)
        );
        assert!(
            read(serde_json::json!("some"))
                .unwrap_err()
                .to_string()
                .contains("context must be")
        );
        assert!(
            read(serde_json::json!({"last_turns": 0}))
                .unwrap_err()
                .to_string()
                .contains("context: last_turns is 1 to")
        );
        assert!(read(serde_json::json!({"turns": 2})).is_err());
        assert_eq!(
            serde_json::to_value(ForkContext::LastTurns(2)).unwrap(),
            serde_json::json!({"last_turns": 2})
        );
    }
}
