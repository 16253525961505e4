//! `arbor tree`: the tree walked depth first with a stack of per-level child lists, each
//! session written as it is visited. Memory follows the tree's depth and fan-out (the
//! siblings still to visit on the path), not its size: a tree of 65,000 sessions is never
//! held at once.
//!
//! Two walks: the first checks the tree (the identities of [`arbor_core::process::usage::reconcile`],
//! each session's transcript replayed on its own), measures the table's columns and notes
//! which sessions have children; the second writes, asking the store only for those
//! sessions' children. The output keeps its form: one JSON object (`reconciliation`,
//! `root_session_id`, `sessions`, `silent_children`, keys sorted as before), or the table and
//! the totals line. Sessions come in tree order (each after its parent, siblings by creation).

use std::collections::HashSet;

use arbor_core::process::usage::{Mismatch, Reconciliation, replay};
use arbor_core::registry::{self, SessionView};
use arbor_protocol::{SessionId, Usage};
use arbor_store::{SessionQuery, SessionRecord, Store};
use serde_json::json;

use crate::fail::Fail;
use crate::render::output::Stream;
use crate::render::report::{self, HEADER, thousands};

/// A session on the path being walked, with its children still to visit.
struct Frame {
    node: SessionRecord,
    kids: std::vec::IntoIter<SessionRecord>,
    /// The own usage of its descendants visited so far.
    below: Usage,
    /// Own cost of its descendants found so far.
    below_cost: u64,
}

/// One step of the walk.
enum Step {
    /// A session, before its children; with its parent's name.
    Enter(SessionRecord, Option<String>),
    /// A session after its children, with the own usage of all its descendants.
    Leave(SessionRecord, Usage, u64),
}

/// A depth-first walk of the tree under a root.
struct Walk<'a> {
    store: &'a dyn Store,
    start: Option<SessionRecord>,
    stack: Vec<Frame>,
    /// The sessions found with children (a second walk asks the store only about these).
    parents: HashSet<SessionId>,
    /// Whether `parents` is complete.
    known: bool,
}

impl<'a> Walk<'a> {
    fn new(store: &'a dyn Store, root: SessionRecord) -> Self {
        Self {
            store,
            start: Some(root),
            stack: Vec::new(),
            parents: HashSet::new(),
            known: false,
        }
    }

    /// Walks again, asking for children only where the last walk found some (a bushy tree is
    /// mostly leaves). Keeps one id per session with children.
    fn again(self, root: SessionRecord) -> Self {
        Self {
            store: self.store,
            start: Some(root),
            stack: Vec::new(),
            parents: self.parents,
            known: true,
        }
    }

    async fn enter(&mut self, node: SessionRecord) -> Result<(), Fail> {
        let kids = if self.known && !self.parents.contains(&node.id) {
            Vec::new()
        } else {
            self.store
                .list_sessions(SessionQuery::Children(node.id))
                .await
                .map_err(|e| Fail::store(e.to_string()))?
        };
        if !self.known && !kids.is_empty() {
            self.parents.insert(node.id);
        }
        self.stack.push(Frame {
            node,
            kids: kids.into_iter(),
            below: Usage::default(),
            below_cost: 0,
        });
        Ok(())
    }

    async fn next(&mut self) -> Result<Option<Step>, Fail> {
        if let Some(root) = self.start.take() {
            self.enter(root.clone()).await?;
            return Ok(Some(Step::Enter(root, None)));
        }
        let Some(top) = self.stack.last_mut() else {
            return Ok(None);
        };
        if let Some(kid) = top.kids.next() {
            let parent = top.node.name.clone();
            self.enter(kid.clone()).await?;
            return Ok(Some(Step::Enter(kid, Some(parent))));
        }
        let Some(done) = self.stack.pop() else {
            return Ok(None);
        };
        if let Some(parent) = self.stack.last_mut() {
            parent.below += done.below;
            parent.below += done.node.own_usage;
            parent.below_cost = parent
                .below_cost
                .saturating_add(done.below_cost)
                .saturating_add(done.node.own_cost);
        }
        Ok(Some(Step::Leave(done.node, done.below, done.below_cost)))
    }
}

/// What the first walk finds.
struct Check {
    /// The identities of [`arbor_core::process::usage::reconcile`], with the same messages.
    reconciliation: Reconciliation,
    widths: [usize; report::COLS],
}

fn is_silent(s: &SessionRecord) -> bool {
    s.parent_id.is_some() && SessionView::of(s).silent
}

async fn check<'a>(store: &'a dyn Store, root: &SessionRecord) -> Result<(Check, Walk<'a>), Fail> {
    let mut rec = Reconciliation {
        root: root.id,
        sessions: 0,
        own_total_tokens: 0,
        root_aggregate_tokens: root.aggregate_usage().total_tokens,
        own_total_cost: 0,
        root_aggregate_cost: root.aggregate_cost(),
        mismatches: Vec::new(),
    };
    let mut widths = HEADER.map(str::len);
    let mut walk = Walk::new(store, root.clone());
    while let Some(step) = walk.next().await? {
        match step {
            Step::Enter(s, parent) => {
                let replayed = replay(store, s.id).await.map_err(Fail::core)?;
                let mut differs = |what: String| {
                    rec.mismatches.push(Mismatch {
                        session: s.id,
                        what,
                    })
                };
                if replayed.own != s.own_usage {
                    differs(format!(
                        "own {} tokens, its transcript records {}",
                        s.own_usage.total_tokens, replayed.own.total_tokens
                    ));
                }
                if (replayed.own_cost, replayed.attributed_cost) != (s.own_cost, s.attributed_cost)
                {
                    differs(format!(
                        "own and attributed cost {} and {}, its transcript records {} and {}",
                        s.own_cost, s.attributed_cost, replayed.own_cost, replayed.attributed_cost
                    ));
                }
                if replayed.attributed != s.attributed_usage {
                    differs(format!(
                        "attributed {} tokens, its transcript records {}",
                        s.attributed_usage.total_tokens, replayed.attributed.total_tokens
                    ));
                }
                rec.sessions += 1;
                rec.own_total_tokens += s.own_usage.total_tokens;
                rec.own_total_cost = rec.own_total_cost.saturating_add(s.own_cost);
                report::widen(&mut widths, &report::cells(&s, parent.as_deref()));
            }
            Step::Leave(s, below, below_cost) => {
                if s.attributed_cost != below_cost {
                    rec.mismatches.push(Mismatch {
                        session: s.id,
                        what: format!(
                            "attributed cost {}, its descendants' own cost {below_cost}",
                            s.attributed_cost
                        ),
                    });
                }
                if s.attributed_usage != below {
                    rec.mismatches.push(Mismatch {
                        session: s.id,
                        what: format!(
                            "attributed {} tokens, its descendants used {}",
                            s.attributed_usage.total_tokens, below.total_tokens
                        ),
                    });
                }
            }
        }
    }
    if rec.own_total_tokens != rec.root_aggregate_tokens {
        rec.mismatches.push(Mismatch {
            session: root.id,
            what: format!(
                "the tree's own usage sums to {} tokens, the root's aggregate is {}",
                rec.own_total_tokens, rec.root_aggregate_tokens
            ),
        });
    }
    if rec.root_aggregate_cost == 0 && rec.own_total_cost == 0 {
        // A tree that cost nothing (no prices) shows no cost column.
        widths[report::COST] = 0;
    }
    if rec.own_total_cost != rec.root_aggregate_cost {
        rec.mismatches.push(Mismatch {
            session: root.id,
            what: format!(
                "the tree's own cost sums to {}, the root's aggregate is {}",
                rec.own_total_cost, rec.root_aggregate_cost
            ),
        });
    }
    Ok((
        Check {
            reconciliation: rec,
            widths,
        },
        walk,
    ))
}

/// The tree's budget pools and their sessions' names.
pub(crate) async fn pools_of(
    store: &dyn Store,
    root: SessionId,
) -> Result<
    (
        Vec<arbor_core::budget::PoolView>,
        std::collections::HashMap<SessionId, String>,
    ),
    Fail,
> {
    let pools = arbor_core::budget::pools(store, root)
        .await
        .map_err(Fail::core)?;
    let mut names = std::collections::HashMap::new();
    for p in &pools {
        if let Some(s) = store
            .session(p.session)
            .await
            .map_err(|e| Fail::store(e.to_string()))?
        {
            names.insert(p.session, s.name);
        }
    }
    Ok((pools, names))
}

/// ` USD`: the currency a run's costs are in, as its definition keeps it (USD, the price
/// table's default, when it keeps none).
pub(crate) fn currency(root: &SessionRecord) -> String {
    format!(
        " {}",
        root.meta["definition"]["currency"]
            .as_str()
            .unwrap_or("USD")
    )
}

/// The tree under a root as a run's report shows it, read in two walks (never held whole):
/// its sessions, its reconciliation, its silent children and the root's name.
pub(crate) struct Summary {
    /// The sessions in tree order: JSON objects joined by commas (no brackets), or the
    /// table's lines (header first).
    pub(crate) rows: String,
    pub(crate) reconciliation: Reconciliation,
    /// Children that finished without replying.
    pub(crate) silent: usize,
    pub(crate) root_name: String,
    /// ` USD`, or empty (see [`currency`]).
    pub(crate) currency: String,
    /// The tree's budget pools, root first.
    pub(crate) pools: Vec<arbor_core::budget::PoolView>,
    /// Each pool's session name, by id.
    pub(crate) pool_names: std::collections::HashMap<SessionId, String>,
}

/// Reads the tree under `root` for a run's report: as JSON rows or as the table.
pub(crate) async fn summarize(
    store: &dyn Store,
    root: SessionId,
    json: bool,
) -> Result<Summary, Fail> {
    let root = registry::session(store, root).await.map_err(Fail::core)?;
    let (check, walked) = check(store, &root).await?;
    let mut rows = if json {
        String::new()
    } else {
        report::line(HEADER, &check.widths)
    };
    let mut silent = 0usize;
    let root_name = root.name.clone();
    let unit = currency(&root);
    let (pools, pool_names) = pools_of(store, root.id).await?;
    let mut walk = walked.again(root);
    while let Some(step) = walk.next().await? {
        let Step::Enter(s, parent) = step else {
            continue;
        };
        silent += usize::from(is_silent(&s));
        if json {
            if !rows.is_empty() {
                rows.push(',');
            }
            rows.push_str(&serde_json::to_string(&SessionView::of(&s)).unwrap_or_default());
        } else {
            let cells = report::cells(&s, parent.as_deref());
            rows.push('\n');
            rows.push_str(&report::line(
                cells.each_ref().map(String::as_str),
                &check.widths,
            ));
        }
    }
    Ok(Summary {
        rows,
        reconciliation: check.reconciliation,
        silent,
        root_name,
        currency: unit,
        pools,
        pool_names,
    })
}

/// `arbor tree SESSION`: the whole tree SESSION belongs to, from its root.
pub(crate) async fn tree(store: &dyn Store, id: SessionId, json: bool) -> Result<(), Fail> {
    let top = registry::session(store, id).await.map_err(Fail::core)?;
    let root = registry::session(store, top.root_id)
        .await
        .map_err(Fail::core)?;
    let (check, walked) = check(store, &root).await?;
    let unit = currency(&root);
    let (pools, names) = pools_of(store, root.id).await?;
    let mut out = Stream::stdout();
    if json {
        out.write(&format!(
            "{{\"reconciliation\":{},\"root_session_id\":{},\"sessions\":[",
            json!({
                "consistent": check.reconciliation.is_consistent(),
                "own_total_tokens": check.reconciliation.own_total_tokens,
                "root_aggregate_tokens": check.reconciliation.root_aggregate_tokens,
                "own_total_cost_micros": check.reconciliation.own_total_cost,
                "root_aggregate_cost_micros": check.reconciliation.root_aggregate_cost,
            }),
            json!(root.id)
        ));
    } else {
        out.write(&report::line(HEADER, &check.widths));
    }
    let mut silent = 0usize;
    let mut first = true;
    let mut walk = walked.again(root);
    while !out.broken()
        && let Some(step) = walk.next().await?
    {
        let Step::Enter(s, parent) = step else {
            continue;
        };
        silent += usize::from(is_silent(&s));
        if json {
            let row = serde_json::to_value(SessionView::of(&s)).unwrap_or_default();
            out.write(if first { "" } else { "," });
            out.write(&row.to_string());
        } else {
            let cells = report::cells(&s, parent.as_deref());
            out.write("\n");
            out.write(&report::line(
                cells.each_ref().map(String::as_str),
                &check.widths,
            ));
        }
        first = false;
    }
    if json {
        // A tree without pools keeps its old shape.
        let pools = if pools.is_empty() {
            String::new()
        } else {
            format!(",\"pools\":{}", serde_json::json!(pools))
        };
        out.write(&format!("]{pools},\"silent_children\":{silent}}}\n"));
    } else {
        let r = &check.reconciliation;
        let cost = if r.root_aggregate_cost > 0 {
            format!(", costing {}{}", report::money(r.root_aggregate_cost), unit)
        } else {
            String::new()
        };
        out.write(&format!(
            "\ntree own total {} tokens, root aggregate {} tokens{cost}{}\n",
            thousands(check.reconciliation.own_total_tokens),
            thousands(check.reconciliation.root_aggregate_tokens),
            if check.reconciliation.is_consistent() {
                ""
            } else {
                " (do not reconcile)"
            }
        ));
        let name = |id| names.get(&id).cloned().unwrap_or_else(|| id.to_string());
        for line in report::pool_lines(&pools, &name, &unit) {
            out.write(&format!("{line}\n"));
        }
    }
    out.flush();
    Ok(())
}
