//! `arbor ls`, `arbor tree` and `arbor log`: what runs left in the store, read by a later
//! process. Each first marks as interrupted the runs of processes that died.

use std::collections::HashMap;

use arbor_core::registry::{self, SessionView};
use arbor_protocol::{EntryKind, Message, ToolCall, TranscriptEntry};
use arbor_store::{SessionQuery, Store};
use serde_json::json;

use crate::cli::{LsArgs, SessionArgs, StoreArgs};
use crate::fail::Fail;
use crate::render::report::thousands;
use crate::store::open_to_read;
use crate::store::{StoreChoice, StoreName};
use crate::{render::output, render::walk, resolve};

/// `arbor store check`: SQLite's integrity and foreign-key checks, read-only.
pub(crate) async fn check(args: StoreArgs) -> Result<u8, Fail> {
    let choice = StoreChoice::from_args(false, args.store.as_deref())?;
    let StoreName::Sqlite(path) = choice.name() else {
        return Err(Fail::usage("only a SQLite store can be checked"));
    };
    if !path.exists() {
        return Err(Fail::usage(format!("no store at {}", path.display())));
    }
    let store = arbor_store_sqlite::SqliteStore::open_read_only(path)
        .map_err(|e| Fail::store(e.to_string()))?;
    store
        .check()
        .await
        .map_err(|e| Fail::store(e.to_string()))?;
    if args.json {
        output::out(&serde_json::json!({"store": path, "ok": true}).to_string());
    } else {
        output::out(&format!(
            "{}: ok (integrity and foreign keys checked)",
            path.display()
        ));
    }
    Ok(0)
}

fn store_fail(e: arbor_store::StoreError) -> Fail {
    Fail::store(e.to_string())
}

/// `arbor ls [SESSION]`.
pub(crate) async fn ls(args: LsArgs) -> Result<u8, Fail> {
    let store = open_to_read(&args.store).await?;
    let Some(session) = &args.session else {
        // The newest roots only, unless --all: a listing's cost stays that of a page, not of
        // every tree the store ever held.
        let query = if args.all {
            SessionQuery::Roots
        } else {
            SessionQuery::LatestRoots(ROOTS_SHOWN)
        };
        let roots = store.list_sessions(query).await.map_err(store_fail)?;
        let cut = !args.all && roots.len() == ROOTS_SHOWN as usize;
        if args.store.json {
            let rows: Vec<_> = roots.iter().map(SessionView::of).collect();
            output::out(&json!({ "roots": rows, "complete": !cut }).to_string());
        } else {
            output::out(&roots_table(&roots));
            if cut {
                output::out(&format!(
                    "(the newest {ROOTS_SHOWN} roots; arbor ls --all lists every one)"
                ));
            }
        }
        return Ok(0);
    };
    let parent = resolve::session(store.as_ref(), session).await?;
    let rows = registry::children(store.as_ref(), parent, args.deleted)
        .await
        .map_err(Fail::core)?;
    if args.store.json {
        output::out(&json!({ "parent": parent, "children": rows }).to_string());
    } else {
        output::out(&children_table(&rows));
    }
    Ok(0)
}

/// Roots `arbor ls` lists without `--all`.
const ROOTS_SHOWN: u32 = 50;

/// The roots, newest last: short id, name, status, both token totals, age and spec.
fn roots_table(roots: &[arbor_store::SessionRecord]) -> String {
    let mut roots: Vec<&arbor_store::SessionRecord> = roots.iter().collect();
    roots.sort_by_key(|r| (r.created_at, r.id));
    let now = arbor_protocol::Timestamp::now();
    // A cost column only when a run cost something (its spec priced its models).
    let priced = roots.iter().any(|r| r.aggregate_cost() > 0);
    let rows: Vec<Vec<String>> = roots
        .iter()
        .map(|r| {
            let mut row = vec![
                resolve::short(r.id),
                r.name.clone(),
                r.status.to_string(),
                thousands(r.own_usage.total_tokens),
                thousands(r.aggregate_usage().total_tokens),
            ];
            if priced {
                row.push(crate::render::report::money(r.aggregate_cost()));
            }
            row.push(resolve::age(now, r.created_at));
            row.push(
                r.meta["definition"]["path"]
                    .as_str()
                    .unwrap_or("-")
                    .to_owned(),
            );
            row
        })
        .collect();
    let mut header = vec!["id", "name", "status", "own", "aggregate"];
    if priced {
        header.push("cost");
    }
    header.extend(["started", "spec"]);
    let mut out = grid(&header, &rows, if priced { &[3, 4, 5] } else { &[3, 4] });
    if rows.is_empty() {
        out.push_str("\n(no runs)");
    }
    out
}

/// A table: `header`, then `rows`, columns as wide as their widest cell, the columns of
/// `right` aligned right.
fn grid(header: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, (c, w)) in cells.zip(&widths).enumerate() {
            if right.contains(&i) {
                out.push_str(&format!("{c:>w$}  "));
            } else {
                out.push_str(&format!("{c:<w$}  "));
            }
        }
        out.trim_end().to_owned()
    };
    let mut out = line(&mut header.iter().copied());
    for row in rows {
        out.push('\n');
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

fn children_table(rows: &[SessionView]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut status = r.status.to_string();
            if r.tombstone.is_some() {
                status.push_str(" (deleted)");
            } else if r.silent {
                status.push_str(" (silent)");
            }
            vec![
                resolve::short(r.id),
                r.name.clone(),
                status,
                r.model.clone(),
                r.mode.clone().unwrap_or_else(|| "-".into()),
                thousands(r.usage.own.total_tokens),
                thousands(r.usage.aggregate.total_tokens),
                thousands(r.context_tokens),
                r.replies.to_string(),
            ]
        })
        .collect();
    let header = [
        "id",
        "name",
        "status",
        "model",
        "mode",
        "own",
        "aggregate",
        "context",
        "replies",
    ];
    let mut out = grid(&header, &cells, &[5, 6, 7, 8]);
    if rows.is_empty() {
        out.push_str("\n(no children)");
    }
    out
}

/// `arbor tree SESSION`: streamed (see [`crate::render::walk`]).
pub(crate) async fn tree(args: SessionArgs) -> Result<u8, Fail> {
    let store = open_to_read(&args.store).await?;
    let id = resolve::session_or_latest(store.as_ref(), args.session.as_deref()).await?;
    walk::tree(store.as_ref(), id, args.store.json).await?;
    Ok(0)
}

/// `arbor log SESSION`.
pub(crate) async fn log(args: SessionArgs) -> Result<u8, Fail> {
    let store = open_to_read(&args.store).await?;
    let id = resolve::session_or_latest(store.as_ref(), args.session.as_deref()).await?;
    registry::session(store.as_ref(), id)
        .await
        .map_err(Fail::core)?;
    let entries = store.transcript(id, 0, None).await.map_err(store_fail)?;
    // Which child each of its spawn calls made (the text log names it after the call).
    let spawned: HashMap<String, arbor_protocol::SessionId> = if args.store.json {
        HashMap::new()
    } else {
        store
            .list_sessions(SessionQuery::Children(id))
            .await
            .map_err(store_fail)?
            .iter()
            .filter_map(|c| Some((registry::SpawnedBy::of(c)?.call_id?, c.id)))
            .collect()
    };
    for entry in &entries {
        if args.store.json {
            output::out(&serde_json::to_string(entry).unwrap_or_default());
        } else {
            output::out(&describe(entry, &spawned));
        }
    }
    Ok(0)
}

/// A tool call as the text log shows it: its name, its arguments shortened, and the child
/// it made (short id) when it spawned one.
fn call_line(c: &ToolCall, spawned: &HashMap<String, arbor_protocol::SessionId>) -> String {
    let args = c.arguments.to_string();
    let args = if args.chars().count() > ARGS_SHOWN {
        format!("{}…", args.chars().take(ARGS_SHOWN).collect::<String>())
    } else {
        args
    };
    match spawned.get(&c.id) {
        Some(child) => format!("→ {} {args} ⇒ child {}", c.name, resolve::short(*child)),
        None => format!("→ {} {args}", c.name),
    }
}

/// Characters of a call's arguments the text log shows.
const ARGS_SHOWN: usize = 80;

/// A turn's tokens, its cache reads and writes among them.
fn usage_line(turn: u32, usage: &arbor_protocol::Usage) -> String {
    format!(
        "turn {turn}: {} tokens ({})",
        thousands(usage.total_tokens),
        crate::render::report::usage_detail(usage)
    )
}

/// A turn's reasoning, folded to one line: its size and a preview (`arbor log --json` has
/// it whole).
fn thinking_line(turn: u32, blocks: &[arbor_protocol::Reasoning]) -> String {
    let text: String = blocks
        .iter()
        .map(arbor_protocol::Reasoning::text)
        .filter(|t| !t.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let sealed = blocks
        .iter()
        .filter(|b| matches!(b, arbor_protocol::Reasoning::RedactedThinking { .. }))
        .count();
    let mut line = format!(
        "turn {turn}: thinking, folded ({} chars",
        thousands(text.chars().count() as u64)
    );
    if sealed > 0 {
        line.push_str(&format!(", {sealed} block(s) encrypted by the provider"));
    }
    line.push(')');
    let text = output::one_line(&text);
    if !text.is_empty() {
        line.push_str(&format!(": {}", output::short(&text, 60)));
    }
    line
}

/// A `cost` or `cost_attributed` entry in words.
fn cost_line(kind: &EntryKind) -> String {
    use crate::render::report::money;
    match kind {
        EntryKind::Cost {
            turn,
            model,
            micros,
        } => format!("turn {turn}: cost {} ({model})", money(*micros)),
        EntryKind::CostAttributed {
            from,
            micros,
            aggregate_micros,
            ..
        } => format!(
            "cost {} of {from} attributed; aggregate {}",
            money(*micros),
            money(*aggregate_micros)
        ),
        _ => String::new(),
    }
}

fn describe(e: &TranscriptEntry, spawned: &HashMap<String, arbor_protocol::SessionId>) -> String {
    let body = match &e.kind {
        EntryKind::Message {
            message:
                Message::Assistant {
                    content,
                    tool_calls,
                },
        } if !tool_calls.is_empty() => {
            let mut parts = Vec::with_capacity(tool_calls.len() + 1);
            let text = output::one_line(content);
            if !text.is_empty() {
                parts.push(preview(&text));
            }
            parts.extend(tool_calls.iter().map(|c| call_line(c, spawned)));
            format!("assistant: {}", parts.join(" "))
        }
        EntryKind::Message {
            message: Message::Tool(r),
        } => format!(
            "tool {} {}: {}",
            r.name,
            if r.is_error { "error" } else { "ok" },
            preview(&output::one_line(&r.content))
        ),
        EntryKind::Message { message } => {
            let text = output::one_line(message.text());
            let role = format!("{:?}", message.role()).to_lowercase();
            format!("{role}: {}", preview(&text))
        }
        EntryKind::Reasoning { turn, blocks } => thinking_line(*turn, blocks),
        EntryKind::Truncated {
            turn,
            finish_reason,
        } => format!(
            "turn {turn}: the provider cut the answer off at its output cap ({finish_reason})"
        ),
        EntryKind::Usage { turn, usage, .. } => usage_line(*turn, usage),
        EntryKind::UsageAttributed {
            from,
            child_usage,
            aggregate,
            ..
        } => format!(
            "{} tokens of {from} attributed; aggregate {}",
            thousands(child_usage.total_tokens),
            thousands(aggregate.total_tokens)
        ),
        EntryKind::Cost { .. } | EntryKind::CostAttributed { .. } => cost_line(&e.kind),
        EntryKind::RunStarted { agent, model, .. } => {
            format!("run started (agent {agent}, model {model})")
        }
        EntryKind::RunFinished {
            status,
            stop_reason,
            ..
        } => format!("run {status} ({stop_reason})"),
        EntryKind::InboxReceived { message } => format!(
            "received from {} {}: {}",
            message.relationship.as_str(),
            message.from_name,
            preview(&output::one_line(&message.text))
        ),
        EntryKind::InboxRead { ids } => format!("read {} message(s)", ids.len()),
        EntryKind::Renamed { from, to, by } => format!("renamed {from} -> {to} (by {by})"),
        EntryKind::Decision {
            tool,
            verdict,
            reason,
            tenant,
            by,
            ..
        } => {
            let who = arbor_protocol::DecidedBy::new(tenant.clone(), by.clone()).who();
            match reason {
                Some(r) => format!(
                    "{} {tool} by {who}: {}",
                    verdict.as_str(),
                    preview(&output::one_line(r))
                ),
                None => format!("{} {tool} by {who}", verdict.as_str()),
            }
        }
        EntryKind::InboxDropped { ids, reason } => {
            format!("dropped {} message(s) unread: {reason}", ids.len())
        }
        EntryKind::Compacted {
            summary,
            kept,
            context_tokens,
        } => format!(
            "compacted at {} context tokens, kept {kept} message(s): {}",
            thousands(*context_tokens),
            preview(&output::one_line(summary))
        ),
        // A kind this build does not know (a newer writer): its name says what it is.
        _ => String::new(),
    };
    format!("{:>4}  {}  {body}", e.seq, e.kind.kind_name())
}

fn preview(text: &str) -> String {
    if text.chars().count() > 100 {
        format!("{}…", text.chars().take(100).collect::<String>())
    } else {
        text.to_owned()
    }
}
