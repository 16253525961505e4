//! The report `arbor run` (and `arbor resume`) prints when the tree is done: the JSON
//! document or the table of sessions, with what the run left behind (silent children, the
//! limit that stopped the root, calls waiting for approval).

use arbor_core::RunResult;
use arbor_core::approval::Suspension;

use crate::render::report::{
    json_report, suspension_json, suspension_text, thousands, with_sessions,
};

/// Where the limit that stopped the root was set, as the report says it.
#[derive(Debug)]
pub(crate) struct BreachAt {
    /// `agent`, `supervisor` or `default` (the JSON's `breach_origin`).
    pub(crate) origin: &'static str,
    /// The setting to raise (the JSON's `breach_setting`).
    pub(crate) setting: String,
    /// Where it was set, in words (the table's note).
    pub(crate) described: String,
}

/// The end-of-run report, as the lines to print: the JSON report, or the table with what
/// the run left (silent children, a limit, calls waiting for approval).
pub(crate) fn lines(
    json: bool,
    store_kind: &str,
    breach_at: Option<&BreachAt>,
    result: &RunResult,
    children_waiting: &[Suspension],
    tree: crate::render::walk::Summary,
    reviews: &crate::render::report::Reviews,
) -> Vec<String> {
    let root_id = result.session_id;
    let check = &tree.reconciliation;
    let mut lines: Vec<String> = Vec::new();
    if json {
        let mut report = json_report(root_id, store_kind, check.own_total_tokens, result);
        report["silent_children"] = serde_json::json!(tree.silent);
        if !tree.pools.is_empty() {
            report["pools"] = serde_json::json!(tree.pools);
        }
        report["reconciliation"] = serde_json::json!({
            "consistent": check.is_consistent(),
            "own_total_tokens": check.own_total_tokens,
            "root_aggregate_tokens": check.root_aggregate_tokens,
            "own_total_cost_micros": check.own_total_cost,
            "root_aggregate_cost_micros": check.root_aggregate_cost,
            "mismatches": check.mismatches.iter().map(|m| {
                serde_json::json!({"session": m.session, "what": m.what})
            }).collect::<Vec<_>>(),
        });
        if let Some(at) = breach_at {
            report["result"]["breach_origin"] = serde_json::json!(at.origin);
            report["result"]["breach_setting"] = serde_json::json!(at.setting);
        }
        if let Some(s) = &result.suspension {
            report["suspension"] = suspension_json(s, reviews);
        }
        if !children_waiting.is_empty() {
            report["child_suspensions"] = children_waiting
                .iter()
                .map(|s| suspension_json(s, reviews))
                .collect();
        }
        lines.push(with_sessions(&report, tree.rows));
    } else {
        lines.push(tree.rows);
        if check.root_aggregate_cost > 0 {
            lines.push(format!(
                "the tree cost {}{}",
                crate::render::report::money(check.root_aggregate_cost),
                tree.currency
            ));
        }
        let name = |id| {
            tree.pool_names
                .get(&id)
                .cloned()
                .unwrap_or_else(|| id.to_string())
        };
        lines.extend(crate::render::report::pool_lines(
            &tree.pools,
            &name,
            &tree.currency,
        ));
        let silent = tree.silent;
        if silent > 0 {
            lines.push(format!(
                "{silent} child(ren) finished without replying (silent no-ops): see arbor ls {root_id}"
            ));
        }
        if let (Some(b), Some(at)) = (&result.breach, breach_at) {
            lines.push(format!(
                "{} stopped at its limit {} = {} ({})",
                tree.root_name,
                b.limit,
                thousands(b.maximum),
                at.described
            ));
        }
        if let Some(s) = &result.suspension {
            lines.push(suspension_text(root_id, s, reviews));
        }
        for s in children_waiting {
            lines.push(suspension_text(root_id, s, reviews));
        }
    }
    lines
}
