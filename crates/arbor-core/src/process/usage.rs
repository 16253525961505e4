//! The two token totals of a tree, and the check that they reconcile.
//!
//! Every session keeps its **own** usage (its provider turns) and the usage **attributed**
//! from its descendants (written by the same atomic store write as each descendant's turn, as
//! a `usage_attributed` entry in the ancestor's transcript). Their sum, the **aggregate**, is
//! what the session is billed for; its **context** size comes from its own prompt only.
//!
//! [`reconcile`] checks a tree against the identities that make the rollup auditable: the sum
//! of own usage over the tree equals the root's aggregate; each session's attributed usage
//! equals the own usage of its descendants; and each record equals the replay of its own
//! transcript (own = its `usage` entries, attributed = its `usage_attributed` entries), so a
//! reload reapplies attribution without the children.
//!
//! Cost (micro-units, with prices) is kept, attributed and checked the same way: own and
//! attributed cost beside own and attributed usage, `cost` and `cost_attributed` entries
//! beside `usage` and `usage_attributed`, written by the same writes.

use std::collections::HashMap;

use arbor_protocol::{EntryKind, SessionId, Usage};
use arbor_store::{SessionQuery, SessionRecord, Store};

use crate::error::{CoreError, CoreResult};

/// What a session's transcript says its usage is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Sum of its `usage` entries.
    pub own: Usage,
    /// Sum of its `usage_attributed` entries.
    pub attributed: Usage,
    /// Sum of its `cost` entries, in micro-units.
    pub own_cost: u64,
    /// Sum of its `cost_attributed` entries, in micro-units.
    pub attributed_cost: u64,
}

/// Replays one session's transcript.
pub async fn replay(store: &dyn Store, session: SessionId) -> CoreResult<Replayed> {
    let mut out = Replayed::default();
    for entry in store.transcript(session, 0, None).await? {
        match entry.kind {
            EntryKind::Usage { usage, .. } => out.own += usage,
            EntryKind::UsageAttributed { child_usage, .. } => out.attributed += child_usage,
            EntryKind::Cost { micros, .. } => out.own_cost = out.own_cost.saturating_add(micros),
            EntryKind::CostAttributed { micros, .. } => {
                out.attributed_cost = out.attributed_cost.saturating_add(micros);
            }
            _ => {}
        }
    }
    Ok(out)
}

/// One identity that does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The session.
    pub session: SessionId,
    /// What differs.
    pub what: String,
}

/// The result of [`reconcile`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciliation {
    /// The root.
    pub root: SessionId,
    /// Sessions checked.
    pub sessions: usize,
    /// Sum of own total tokens over the tree.
    pub own_total_tokens: u64,
    /// The root's aggregate total tokens.
    pub root_aggregate_tokens: u64,
    /// Sum of own cost over the tree, in micro-units.
    pub own_total_cost: u64,
    /// The root's aggregate cost, in micro-units.
    pub root_aggregate_cost: u64,
    /// Every identity that does not hold (empty when the tree reconciles).
    pub mismatches: Vec<Mismatch>,
}

impl Reconciliation {
    /// Whether every identity holds.
    pub fn is_consistent(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// Checks the tree under `root` (deleted sessions included: their usage was spent).
pub async fn reconcile(store: &dyn Store, root: SessionId) -> CoreResult<Reconciliation> {
    let sessions = store.list_sessions(SessionQuery::Tree(root)).await?;
    let Some(top) = sessions.iter().find(|s| s.id == root) else {
        return Err(CoreError::NotFound {
            what: "session",
            id: root.to_string(),
        });
    };
    let mut mismatches = Vec::new();
    let below = descendants_own(&sessions);
    for s in &sessions {
        let (expected, expected_cost) = below.get(&s.id).copied().unwrap_or_default();
        if s.attributed_cost != expected_cost {
            mismatches.push(Mismatch {
                session: s.id,
                what: format!(
                    "attributed cost {}, its descendants' own cost {expected_cost}",
                    s.attributed_cost
                ),
            });
        }
        if s.attributed_usage != expected {
            mismatches.push(Mismatch {
                session: s.id,
                what: format!(
                    "attributed {} tokens, its descendants used {}",
                    s.attributed_usage.total_tokens, expected.total_tokens
                ),
            });
        }
        let replayed = replay(store, s.id).await?;
        if replayed.own != s.own_usage {
            mismatches.push(Mismatch {
                session: s.id,
                what: format!(
                    "own {} tokens, its transcript records {}",
                    s.own_usage.total_tokens, replayed.own.total_tokens
                ),
            });
        }
        if (replayed.own_cost, replayed.attributed_cost) != (s.own_cost, s.attributed_cost) {
            mismatches.push(Mismatch {
                session: s.id,
                what: format!(
                    "own and attributed cost {} and {}, its transcript records {} and {}",
                    s.own_cost, s.attributed_cost, replayed.own_cost, replayed.attributed_cost
                ),
            });
        }
        if replayed.attributed != s.attributed_usage {
            mismatches.push(Mismatch {
                session: s.id,
                what: format!(
                    "attributed {} tokens, its transcript records {}",
                    s.attributed_usage.total_tokens, replayed.attributed.total_tokens
                ),
            });
        }
    }
    let own_total_tokens = sessions.iter().map(|s| s.own_usage.total_tokens).sum();
    let root_aggregate_tokens = top.aggregate_usage().total_tokens;
    if own_total_tokens != root_aggregate_tokens {
        mismatches.push(Mismatch {
            session: root,
            what: format!(
                "the tree's own usage sums to {own_total_tokens} tokens, the root's aggregate \
                 is {root_aggregate_tokens}"
            ),
        });
    }
    let own_total_cost = sessions
        .iter()
        .fold(0u64, |sum, s| sum.saturating_add(s.own_cost));
    let root_aggregate_cost = top.aggregate_cost();
    if own_total_cost != root_aggregate_cost {
        mismatches.push(Mismatch {
            session: root,
            what: format!(
                "the tree's own cost sums to {own_total_cost}, the root's aggregate is \
                 {root_aggregate_cost}"
            ),
        });
    }
    Ok(Reconciliation {
        root,
        sessions: sessions.len(),
        own_total_tokens,
        root_aggregate_tokens,
        own_total_cost,
        root_aggregate_cost,
        mismatches,
    })
}

/// For every session, the own usage and cost of all its strict descendants.
fn descendants_own(sessions: &[SessionRecord]) -> HashMap<SessionId, (Usage, u64)> {
    let parent: HashMap<SessionId, Option<SessionId>> =
        sessions.iter().map(|s| (s.id, s.parent_id)).collect();
    let mut out: HashMap<SessionId, (Usage, u64)> = HashMap::new();
    for s in sessions {
        let mut up = s.parent_id;
        // Bounded by the tree size even if stored parents were to loop.
        let mut steps = 0;
        while let Some(p) = up {
            if steps > sessions.len() {
                break;
            }
            let below = out.entry(p).or_default();
            below.0 += s.own_usage;
            below.1 = below.1.saturating_add(s.own_cost);
            up = parent.get(&p).copied().flatten();
            steps += 1;
        }
    }
    out
}
