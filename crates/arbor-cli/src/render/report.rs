//! The end-of-run report: a table with one row per session of the tree, or one JSON object.
//!
//! Both come from the store (`list_sessions(Tree(root))`), not from memory, so they show what
//! a later process will find.

use arbor_core::RunResult;
use arbor_core::approval::Suspension;
use arbor_protocol::SessionId;
use arbor_store::SessionRecord;
use serde_json::{Value, json};

/// `1234567` as `1,234,567`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A turn's tokens in words: `input 6,145: 4,096 cache read, 1,200 cache write; output 47`
/// (the cache parts only when the provider reported some).
pub(crate) fn usage_detail(u: &arbor_protocol::Usage) -> String {
    let mut cache = Vec::new();
    if u.cache_read_tokens > 0 {
        cache.push(format!("{} cache read", thousands(u.cache_read_tokens)));
    }
    if u.cache_write_tokens > 0 {
        cache.push(format!("{} cache write", thousands(u.cache_write_tokens)));
    }
    if cache.is_empty() {
        format!(
            "input {}, output {}",
            thousands(u.input_tokens),
            thousands(u.output_tokens)
        )
    } else {
        format!(
            "input {}: {}; output {}",
            thousands(u.input_tokens),
            cache.join(", "),
            thousands(u.output_tokens)
        )
    }
}

/// `micros` (millionths of a currency unit) as units, with what decimals it needs (at least
/// two): `188400` as `0.1884`, `1500000` as `1.50`.
pub(crate) fn money(micros: u64) -> String {
    let mut out = format!(
        "{}.{:06}",
        thousands(micros / arbor_core::pricing::MICROS),
        micros % arbor_core::pricing::MICROS
    );
    while out.ends_with('0') && out.len() - out.find('.').unwrap_or(0) > 3 {
        out.pop();
    }
    out
}

/// Each budget pool of a tree in words: `budget of root: 90,040 of 100,000 tokens spent,
/// 0 reserved` (and the same for money), `closed` once a task child's pool returned.
pub(crate) fn pool_lines(
    pools: &[arbor_core::budget::PoolView],
    name: &dyn Fn(arbor_protocol::SessionId) -> String,
    currency: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for p in pools {
        let mut parts = Vec::new();
        if let Some(max) = p.budget.max_tree_tokens {
            parts.push(format!(
                "{} of {} tokens spent, {} reserved",
                thousands(p.spent.tokens),
                thousands(max),
                thousands(p.reserved.tokens)
            ));
        }
        if let Some(max) = p.budget.max_tree_cost_micros {
            parts.push(format!(
                "{} of {}{currency} spent, {} reserved",
                money(p.spent.cost),
                money(max),
                money(p.reserved.cost)
            ));
        }
        out.push(format!(
            "budget of {}: {}{}",
            name(p.session),
            parts.join("; "),
            if p.open {
                ""
            } else {
                " (closed: its unspent part returned)"
            }
        ));
    }
    out
}

/// The JSON report.
pub(crate) fn json_report(
    root: SessionId,
    store: &str,
    own_total_tokens: u64,
    result: &RunResult,
) -> serde_json::Value {
    json!({
        "root_session_id": root,
        "store": store,
        "status": result.status,
        "tree_own_total_tokens": own_total_tokens,
        "result": {
            "text": result.text,
            "stop_reason": result.stop_reason,
            "turns": result.turns,
            "tool_calls": result.tool_calls,
            "breach": result.breach,
            "error": result.error,
        },
    })
}

/// `report` as text with `"sessions"`: the JSON objects `rows` (joined by commas, as
/// [`crate::render::walk::summarize`] writes them), spliced in without parsing them again (a tree's
/// rows can be tens of megabytes). The keys keep their sorted order.
pub(crate) fn with_sessions(report: &Value, rows: String) -> String {
    let mut fields: Vec<(&str, String)> = report
        .as_object()
        .map(|map| {
            map.iter()
                .map(|(k, v)| (k.as_str(), v.to_string()))
                .collect()
        })
        .unwrap_or_default();
    fields.push(("sessions", String::new()));
    fields.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::with_capacity(rows.len() + 4096);
    out.push('{');
    for (i, (key, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::from(*key).to_string());
        out.push(':');
        if *key == "sessions" {
            out.push('[');
            out.push_str(&rows);
            out.push(']');
        } else {
            out.push_str(value);
        }
    }
    out.push('}');
    out
}

/// How many columns the table has.
pub(crate) const COLS: usize = 9;

/// The cost column: shown only when the tree cost something (its width is then set).
pub(crate) const COST: usize = 6;

/// The table's header.
pub(crate) const HEADER: [&str; COLS] = [
    "session",
    "parent",
    "depth",
    "status",
    "own tokens",
    "aggregate",
    "cost",
    "context",
    "id",
];

/// One session's cells: name (indented by depth), parent, depth, status, own and aggregate
/// tokens, aggregate cost, context tokens, and its short id (see [`crate::resolve`]).
pub(crate) fn cells(s: &SessionRecord, parent: Option<&str>) -> [String; COLS] {
    [
        format!("{}{}", "  ".repeat(s.depth as usize), s.name),
        parent.unwrap_or("-").to_owned(),
        s.depth.to_string(),
        s.status.to_string(),
        thousands(s.own_usage.total_tokens),
        thousands(s.aggregate_usage().total_tokens),
        money(s.aggregate_cost()),
        thousands(s.context_tokens),
        crate::resolve::short(s.id),
    ]
}

/// Widens `widths` to fit `row`.
pub(crate) fn widen(widths: &mut [usize; COLS], row: &[String; COLS]) {
    for (w, cell) in widths.iter_mut().zip(row) {
        *w = (*w).max(cell.chars().count());
    }
}

/// One line of the table: text columns left-aligned, numbers right-aligned; a column of
/// width 0 is left out.
pub(crate) fn line(cells: [&str; COLS], widths: &[usize; COLS]) -> String {
    let mut out = String::new();
    for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
        if *w == 0 {
            continue;
        }
        if i < 2 || i == 3 || i == COLS - 1 {
            out.push_str(&format!("{cell:<w$}  "));
        } else {
            out.push_str(&format!("{cell:>w$}  "));
        }
    }
    out.trim_end().to_owned()
}

/// A suspension as JSON.
pub(crate) fn suspension_json(s: &Suspension, reviews: &Reviews) -> Value {
    let pending: Vec<Value> = s
        .pending
        .iter()
        .map(|p| {
            let mut v = serde_json::to_value(p).unwrap_or(Value::Null);
            if let (Some(obj), Some(r)) = (v.as_object_mut(), reviews.get(&p.id)) {
                obj.insert("review".to_owned(), r.clone());
            }
            v
        })
        .collect();
    json!({
        "run_id": s.run_id,
        "session_id": s.session_id,
        "version": s.version,
        "pending": pending,
    })
}

/// What the person deciding a pending call sees beyond its arguments, by decision id (see
/// [`arbor_core::approval::review`]).
pub(crate) type Reviews = std::collections::HashMap<String, Value>;

/// The reviews of every call pending in `all` (none when the store cannot say).
pub(crate) async fn reviews(store: &dyn arbor_store::Store, all: &[&Suspension]) -> Reviews {
    let mut out = Reviews::new();
    for s in all {
        match arbor_core::approval::review::reviews_of(store, &s.pending).await {
            Ok(found) => out.extend(found),
            Err(e) => tracing::warn!(error = %e, "the reviews of pending calls could not be read"),
        }
    }
    out
}

/// A review as lines under its pending call: its summary, then its files.
pub(crate) fn review_lines(review: &Value) -> Vec<String> {
    let mut lines = vec![match review["summary"].as_str() {
        Some(s) => crate::render::output::inert(s),
        None => crate::render::output::inert(&review.to_string()),
    }];
    for f in review["files"].as_array().into_iter().flatten().take(20) {
        let n = |k: &str| f[k].as_u64().map_or("-".to_owned(), |n| n.to_string());
        lines.push(format!(
            "  {} +{} -{}",
            crate::render::output::inert(f["path"].as_str().unwrap_or_default()),
            n("added"),
            n("removed")
        ));
    }
    lines
}

/// A suspension as lines for a person.
pub(crate) fn suspension_text(session: SessionId, s: &Suspension, reviews: &Reviews) -> String {
    let mut out = format!(
        "suspended: {} call(s) wait for a decision (run {}, version {})",
        s.pending.len(),
        s.run_id,
        s.version
    );
    let mut questions = false;
    for p in &s.pending {
        let path = if p.path.is_empty() {
            "root".to_owned()
        } else {
            p.path.join(" > ")
        };
        let what = match arbor_core::tool::ask::Question::of(p) {
            Some(q) => {
                questions = true;
                question_line(&q)
            }
            None => format!(
                "{} {}",
                p.tool,
                crate::render::output::one_line(&p.arguments.to_string())
            ),
        };
        out.push_str(&format!("\n  {}  {path}: {what}", p.id));
        for line in reviews.get(&p.id).map(review_lines).unwrap_or_default() {
            out.push_str(&format!("\n      {line}"));
        }
    }
    out.push_str(&format!(
        "\ndecide with: arbor approve {session} ID... (or arbor reject), then: arbor resume {session}"
    ));
    if questions {
        out.push_str(&format!(
            "\nanswer a question with: arbor answer {session} ID ANSWER (arbor reject declines it)"
        ));
    }
    out
}

/// A question as one line: `asks "…" [a | b]`.
pub(crate) fn question_line(q: &arbor_core::tool::ask::Question) -> String {
    let mut line = format!("asks {:?}", crate::render::output::one_line(&q.question));
    if !q.choices.is_empty() {
        line.push_str(&format!(" [{}]", q.choices.join(" | ")));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table as `arbor run` prints it for `sessions` (in tree order).
    fn table(sessions: &[SessionRecord]) -> String {
        let rows: Vec<[String; COLS]> = sessions
            .iter()
            .map(|s| {
                let parent = s
                    .parent_id
                    .and_then(|p| sessions.iter().find(|o| o.id == p))
                    .map(|o| o.name.as_str());
                cells(s, parent)
            })
            .collect();
        let mut widths = HEADER.map(str::len);
        for row in &rows {
            widen(&mut widths, row);
        }
        if sessions.iter().all(|s| s.aggregate_cost() == 0) {
            widths[COST] = 0;
        }
        let mut out = line(HEADER, &widths);
        for row in &rows {
            out.push('\n');
            out.push_str(&line(row.each_ref().map(String::as_str), &widths));
        }
        out
    }

    #[test]
    fn the_sessions_are_spliced_in_among_sorted_keys() {
        let report =
            json!({"status": "succeeded", "root_session_id": "r", "tree_own_total_tokens": 3});
        let rows = r#"{"id":"a","name":"x \"q\""},{"id":"b"}"#.to_owned();
        let text = with_sessions(&report, rows);
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["sessions"][0]["name"], "x \"q\"");
        assert_eq!(parsed["sessions"][1]["id"], "b");
        assert_eq!(parsed["tree_own_total_tokens"], 3);
        let keys: Vec<&String> = parsed.as_object().unwrap().keys().collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        assert!(text.starts_with("{\"root_session_id\":\"r\",\"sessions\":[{"));
        assert_eq!(
            serde_json::from_str::<Value>(&with_sessions(&report, String::new())).unwrap()["sessions"],
            json!([])
        );
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(40_000), "40,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn table_rows_follow_the_tree() {
        use arbor_protocol::{SessionStatus, Usage};
        let mut root = SessionRecord::new_root("root", "root", "scripted");
        root.status = SessionStatus::Succeeded;
        root.own_usage = Usage::new(40_000, 0);
        root.attributed_usage = Usage::new(60_000, 0);
        root.context_tokens = 40_000;
        let mut kid = SessionRecord::new_child(&root, "audit-helper", "audit-helper", "scripted");
        kid.own_usage = Usage::new(60_000, 0);
        let table = table(&[root.clone(), kid.clone()]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(lines[0].starts_with("session"), "{table}");
        let root_cells: Vec<&str> = lines[1].split_whitespace().collect();
        let root_short = crate::resolve::short(root.id);
        assert_eq!(
            root_cells,
            [
                "root",
                "-",
                "0",
                "succeeded",
                "40,000",
                "100,000",
                "40,000",
                &root_short
            ]
        );
        let kid_cells: Vec<&str> = lines[2].split_whitespace().collect();
        let kid_short = crate::resolve::short(kid.id);
        assert_eq!(
            kid_cells,
            [
                "audit-helper",
                "root",
                "1",
                "idle",
                "60,000",
                "60,000",
                "0",
                &kid_short
            ]
        );
        assert!(lines[2].starts_with("  audit-helper"), "{table}");
    }
}
