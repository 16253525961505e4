//! `read_child`: the model reads the transcript of one of its descendants by pages: a child's
//! answer is capped (`max_result_bytes`, with a pointer to the child's session), and this is
//! how the parent reads the rest. Family-scoped: its own children (by name or session id)
//! and their descendants (by session id) only; any other id answers as an unknown one. Each
//! page is redacted and capped (`max_result_bytes`).

use arbor_model::ToolSpec;
use arbor_protocol::{EntryKind, SessionId, TranscriptEntry};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{CoreError, CoreResult};
use crate::registry;
use crate::supervisor::runtime::Supervisor;
use crate::supervisor::tools::model_tool::ModelTool;
use crate::tool::{ToolContext, ToolError};

/// Entries a page holds at most.
pub(crate) const MAX_PAGE_ENTRIES: usize = 100;

/// Entries one call scans at most looking for the kinds asked (the page says where to go on).
const MAX_SCANNED: usize = 2_000;

/// The entry kinds a page may be filtered to.
pub(crate) const ENTRY_KINDS: [&str; 9] = [
    "message",
    "reasoning",
    "usage",
    "cost",
    "run_started",
    "run_finished",
    "inbox_received",
    "decision",
    "truncated",
];

/// Which page of a descendant's transcript to read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadChild {
    /// A direct child's name or session id, or a deeper descendant's session id.
    pub child: String,
    /// Entries after this sequence number (default 0: from the start).
    #[serde(default)]
    pub after: u64,
    /// Only entries of these kinds (default every kind).
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Entries at most (1 to 100, default 20).
    pub limit: Option<usize>,
    /// Bytes of the first entry after `after` read already: a page cut inside an entry too
    /// large for one says where to read on (`next_offset`). Default 0.
    #[serde(default)]
    pub offset: u64,
}

/// A page of a descendant's transcript.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChildPage {
    /// The descendant's session.
    pub session_id: SessionId,
    /// Its name.
    pub name: String,
    /// The entries, redacted, oldest first.
    pub entries: Vec<TranscriptEntry>,
    /// Pass as `after` for the next page; absent at the end.
    pub next_after: Option<u64>,
}

impl Supervisor {
    /// A page of the transcript of `request.child`, a descendant of `parent`: its entries
    /// after `after`, of `kinds`, redacted. A selector that names no descendant of `parent`
    /// (unknown, or another family's) is not found, as every unknown child is.
    pub async fn read_child(
        &self,
        parent: SessionId,
        request: &ReadChild,
    ) -> CoreResult<ChildPage> {
        let limit = request.limit.unwrap_or(20);
        if limit == 0 || limit > MAX_PAGE_ENTRIES {
            return Err(CoreError::invalid(
                "limit",
                format!("limit must be 1 to {MAX_PAGE_ENTRIES}"),
            ));
        }
        if let Some(kind) = request
            .kinds
            .iter()
            .find(|k| !ENTRY_KINDS.contains(&k.as_str()))
        {
            return Err(CoreError::invalid(
                "kinds",
                format!(
                    "unknown entry kind {kind:?} (known: {})",
                    ENTRY_KINDS.join(", ")
                ),
            ));
        }
        let store = self.live().store();
        let child = registry::find_descendant(store.as_ref(), parent, &request.child).await?;
        let mut entries = Vec::new();
        let (mut after, mut scanned) = (request.after, 0usize);
        let mut next_after = None;
        'pages: loop {
            let page = store.transcript(child.id, after, Some(200)).await?;
            let full = page.len() == 200;
            for e in page {
                scanned += 1;
                after = e.seq;
                let wanted = request.kinds.is_empty()
                    || request.kinds.iter().any(|k| k == e.kind.kind_name());
                if wanted {
                    entries.push(redacted(self, e));
                }
                if entries.len() == limit || scanned == MAX_SCANNED {
                    next_after = Some(after);
                    break 'pages;
                }
            }
            if !full {
                break;
            }
        }
        // A full page may be the last one: say so only when more is there.
        if let Some(at) = next_after
            && store.transcript(child.id, at, Some(1)).await?.is_empty()
        {
            next_after = None;
        }
        Ok(ChildPage {
            session_id: child.id,
            name: child.name,
            entries,
            next_after,
        })
    }
}

fn redacted(sup: &Supervisor, mut e: TranscriptEntry) -> TranscriptEntry {
    if let Ok(text) = serde_json::to_string(&e.kind) {
        let clean = sup.redact(&text);
        if clean != text
            && let Ok(kind) = serde_json::from_str::<EntryKind>(&clean)
        {
            e.kind = kind;
        }
    }
    e
}

/// The `read_child` tool of one supervisor's tree.
#[derive(Debug, Clone)]
pub struct ReadChildTool {
    supervisor: Supervisor,
    spec: ToolSpec,
}

impl ReadChildTool {
    /// The tool.
    pub fn new(supervisor: Supervisor) -> Self {
        let spec = ToolSpec {
            name: "read_child".to_owned(),
            description: "Read the transcript of one of your children (by name or session id) \
                          or of a deeper descendant (by session id), a page at a time: what its \
                          capped answer left out, its tool results, its reasoning."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "child": {"type": "string", "description": "A child's name or session id, or a descendant's session id."},
                    "after": {"type": "integer", "minimum": 0, "description": "Entries after this sequence number (next_after of the last page)."},
                    "kinds": {"type": "array", "items": {"type": "string", "enum": ENTRY_KINDS}, "description": "Only entries of these kinds."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_ENTRIES, "description": "Entries at most (default 20)."},
                    "offset": {"type": "integer", "minimum": 0, "description": "Bytes of the first entry read already (next_offset of a page cut inside an entry)."},
                },
                "required": ["child"],
                "additionalProperties": false
            }),
        };
        Self { supervisor, spec }
    }
}

#[async_trait]
impl ModelTool for ReadChildTool {
    type Args = ReadChild;

    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    async fn call(&self, args: ReadChild, ctx: ToolContext) -> Result<String, ToolError> {
        let sup = &self.supervisor;
        let page = sup
            .read_child(ctx.session.id, &args)
            .await
            .map_err(|e| sup.model_error(&e))?;
        let cap = usize::try_from(sup.settings().limits().max_result_bytes).unwrap_or(usize::MAX);
        Ok(capped(&page, cap, (args.after, args.offset)))
    }
}

/// The page as JSON of at most `cap` bytes: whole entries while they fit, then `next_after`
/// pointing at the first one left out. An entry too large for a page alone (or the rest of
/// one, from `offset`) is given a part at a time: its text (the entry's JSON) from `offset`,
/// cut to fit, with `next_after` and `next_offset` saying where the next part starts.
fn capped(page: &ChildPage, cap: usize, (after, offset): (u64, u64)) -> String {
    let head = |entries: &[serde_json::Value], next: Option<u64>, cut: bool| {
        let mut v = json!({
            "session_id": page.session_id,
            "name": page.name,
            "entries": entries,
            "next_after": next,
        });
        if cut {
            v["cut"] = json!("the page was cut to max_result_bytes: read on from next_after");
        }
        v.to_string()
    };
    let first = page.entries.first();
    if let (Some(e), true) = (first, offset > 0) {
        return part_of(page, e, cap, after, offset);
    }
    let whole = head(
        &page
            .entries
            .iter()
            .map(|e| serde_json::to_value(e).unwrap_or_default())
            .collect::<Vec<_>>(),
        page.next_after,
        false,
    );
    if whole.len() <= cap {
        return whole;
    }
    let mut kept: Vec<serde_json::Value> = Vec::new();
    for e in &page.entries {
        let value = serde_json::to_value(e).unwrap_or_default();
        kept.push(value);
        let next = Some(e.seq);
        if head(&kept, next, true).len() > cap {
            kept.pop();
            if kept.is_empty() {
                // One entry alone is too large: its first part.
                return part_of(page, e, cap, after, 0);
            }
            let at = kept
                .last()
                .and_then(|v| v["seq"].as_u64())
                .unwrap_or(page.entries[0].seq);
            return head(&kept, Some(at), true);
        }
    }
    head(&kept, page.next_after, false)
}

/// The part of entry `e` (the first after `after`) from byte `offset` that fits in `cap`:
/// `next_offset` says where the next part starts, or `next_after` moves past the entry once
/// its last part is given.
fn part_of(page: &ChildPage, e: &TranscriptEntry, cap: usize, after: u64, offset: u64) -> String {
    let text = value_text(e);
    let from = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(text.len());
    let mut from = from;
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    let rest = &text[from..];
    let done = |v: &mut serde_json::Value| v["next_after"] = json!(e.seq);
    let render = |part: &str, more: bool| {
        let mut v = json!({
            "session_id": page.session_id,
            "name": page.name,
            "entries": [{"seq": e.seq, "kind": e.kind.kind_name(), "offset": from, "text": part}],
        });
        if more {
            v["next_after"] = json!(after);
            v["next_offset"] = json!(from + part.len());
        } else {
            done(&mut v);
        }
        v.to_string()
    };
    // Nothing left of it (an offset at or past its end): past it, whatever the cap.
    if rest.is_empty() || render(rest, false).len() <= cap {
        return render(rest, false);
    }
    // The most of it that fits, escaping included (at least one character, so reading on
    // always moves).
    let mut room = cap.saturating_sub(render("", true).len());
    loop {
        let part = crate::tool::prefix_within(rest, room.max(1));
        let part = if part.is_empty() {
            rest.chars().next().map_or("", |c| &rest[..c.len_utf8()])
        } else {
            part
        };
        let out = render(part, true);
        if out.len() <= cap || part.len() <= 1 || room <= 1 {
            return out;
        }
        room = room.saturating_sub((out.len() - cap).max(1));
    }
}

fn value_text(e: &TranscriptEntry) -> String {
    serde_json::to_string(&e.kind).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_of(text: &str) -> ChildPage {
        ChildPage {
            session_id: SessionId::new(),
            name: "writer".into(),
            entries: vec![TranscriptEntry {
                seq: 7,
                run_id: arbor_protocol::RunId::new(),
                at: arbor_protocol::Timestamp(1),
                kind: EntryKind::Message {
                    message: arbor_protocol::Message::assistant(text),
                },
            }],
            next_after: None,
        }
    }

    /// An entry larger than a page is read a part at a time, every part within the cap, and
    /// the parts put together are the whole entry, quotes and all.
    #[test]
    fn an_entry_larger_than_a_page_is_read_in_parts_that_make_it_whole() {
        let text = format!("START \"quoted\" {} END ü", ".".repeat(700));
        let whole = value_text(&page_of(&text).entries[0]);
        for cap in [256usize, 300, 500] {
            let (mut offset, mut got, mut calls) = (0u64, String::new(), 0);
            loop {
                calls += 1;
                assert!(calls < 200, "cap {cap}: reading never ends");
                let out = capped(&page_of(&text), cap, (6, offset));
                assert!(out.len() <= cap, "cap {cap}: {} bytes: {out}", out.len());
                let v: serde_json::Value = serde_json::from_str(&out).unwrap();
                let part = v["entries"][0]["text"].as_str().unwrap();
                assert_eq!(v["entries"][0]["offset"], json!(offset));
                got.push_str(part);
                match v["next_offset"].as_u64() {
                    Some(next) => {
                        assert_eq!(v["next_after"], json!(6), "the same entry comes next");
                        offset = next;
                    }
                    None => {
                        assert_eq!(v["next_after"], json!(7), "past the entry at its end");
                        break;
                    }
                }
            }
            assert_eq!(got, whole, "cap {cap}");
        }
    }
}
