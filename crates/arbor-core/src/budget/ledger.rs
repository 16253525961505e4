//! One tree's ledger of pools and reservations, kept as a checkpoint (namespace `budget`,
//! key the root's id) and changed only by compare-and-swap, so every process sharing the
//! store sees one count. What a pool has spent is never in the ledger: it is the pool owner's
//! aggregate, read from its record.
//!
//! Tokens and money are two independent systems: a pool may limit either or both, and a pool
//! that does not limit one is transparent to it. For one of them, a reservation (a call's
//! worst case, or a child's pool) counts at the nearest *open* pool above it that limits it;
//! a call is checked against every pool on its path up to and including that one.
//!
//! Reads take the ledger first and the records after, deepest first: a call settles by
//! storing its usage and then releasing its reservation, and attribution raises a child and
//! its ancestors in one write, so whatever interleaves, a reader can only over-count.

use std::collections::{BTreeMap, HashMap};

use arbor_protocol::SessionId;
use arbor_store::{SessionRecord, Store, StoreError};
use serde::{Deserialize, Serialize};

use super::{Amount, Budget, BudgetPolicy, MIN_POOL_TOKENS};
use crate::error::{CoreError, CoreResult};

const NAMESPACE: &str = "budget";

/// Compare-and-swap attempts before a reservation gives up (each conflict means another
/// writer made progress).
const ATTEMPTS: usize = 256;

/// The ledger as stored.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Ledger {
    #[serde(default)]
    pub(super) pools: BTreeMap<String, Pool>,
    /// Reservations of calls in flight, by the session making the call (one at a time).
    #[serde(default)]
    pub(super) holds: BTreeMap<String, Hold>,
    /// Calls cut off (cancelled, timed out) before their usage arrived: each is charged its
    /// reservation, as spent by every pool on its path, since the provider may have billed it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) charged: Vec<Hold>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Pool {
    pub(super) budget: Budget,
    /// The pools above its owner, nearest first.
    #[serde(default)]
    pub(super) above: Vec<String>,
    /// Its unspent part returns to the pool above once its owner ends (a task child's);
    /// else it holds while the owner's record lives.
    #[serde(default)]
    pub(super) returns: bool,
    /// `budget_low` fired for tokens, for money.
    #[serde(default)]
    pub(super) low: [bool; 2],
    /// It returned its unspent part (its owner ended); written by the ledger write that first
    /// relied on it, so it never holds its place again, even if its owner runs once more (its
    /// calls then reserve in the pool above too).
    #[serde(default)]
    pub(super) closed: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Hold {
    /// The pools on the holder's path, nearest first (its own first, if it has one).
    pub(super) chain: Vec<String>,
    pub(super) amount: Amount,
}

/// Which of the two systems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dim {
    Tokens,
    Cost,
}

pub(super) const DIMS: [Dim; 2] = [Dim::Tokens, Dim::Cost];

impl Dim {
    pub(super) fn limit(self, b: &Budget) -> Option<u64> {
        match self {
            Dim::Tokens => b.max_tree_tokens,
            Dim::Cost => b.max_tree_cost_micros,
        }
    }

    pub(super) fn of(self, a: &Amount) -> u64 {
        match self {
            Dim::Tokens => a.tokens,
            Dim::Cost => a.cost,
        }
    }

    pub(super) fn index(self) -> usize {
        match self {
            Dim::Tokens => 0,
            Dim::Cost => 1,
        }
    }

    pub(super) fn spent(self, r: &SessionRecord) -> u64 {
        match self {
            Dim::Tokens => r.aggregate_usage().total_tokens,
            Dim::Cost => r.aggregate_cost(),
        }
    }

    /// The limit's name, as errors and events say it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Dim::Tokens => "max_tree_tokens",
            Dim::Cost => "max_tree_cost",
        }
    }
}

/// A reservation or a child's pool that a pool could not cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The session whose pool refused.
    pub pool: SessionId,
    /// `max_tree_tokens` or `max_tree_cost`.
    pub limit_name: &'static str,
    /// Its limit (tokens, or micro-units).
    pub limit: u64,
    /// What its subtree has spent.
    pub spent: u64,
    /// What calls in flight and children's pools hold of it.
    pub reserved: u64,
    /// What was asked for.
    pub wanted: u64,
    /// The pool limits money and the call's model has no price: its cost cannot be reserved.
    pub unpriced_model: Option<String>,
}

impl Refusal {
    /// The error a run or a spawn reports.
    pub fn message(&self) -> String {
        if let Some(model) = &self.unpriced_model {
            return format!(
                "budget exhausted: the pool of session {} limits max_tree_cost, and model \
                 {model:?} has no price, so the call's cost cannot be reserved (price it in \
                 the price table)",
                self.pool
            );
        }
        let unit = |n: u64| match self.limit_name {
            "max_tree_cost" => format!("{n} micro-units"),
            _ => format!("{n} tokens"),
        };
        format!(
            "budget exhausted: the pool of session {} ({} = {}) has spent {} and holds {} \
             for work in flight; this needs {} more",
            self.pool,
            self.limit_name,
            unit(self.limit),
            unit(self.spent),
            unit(self.reserved),
            unit(self.wanted)
        )
    }
}

/// What a reservation or a child's pool got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grant {
    /// For a child's pool: what it was granted, and whether that is less than it asked.
    pub budget: Budget,
    /// Whether the grant was clamped to what the pool above had left.
    pub clamped: bool,
    /// Whether this call opened the pool (else it was open already: a retried creation).
    pub opened: bool,
    /// Pools whose spend has passed their low mark ([`LOW_PERCENT`](super::LOW_PERCENT) by default), told once:
    /// `(pool, limit name, limit, spent)`.
    pub low: Vec<(SessionId, &'static str, u64, u64)>,
}

/// What one read saw: the ledger, its version, and the records of its pools and holders.
pub(super) struct View {
    pub(super) ledger: Ledger,
    pub(super) version: u64,
    pub(super) records: HashMap<String, SessionRecord>,
}

fn key(id: SessionId) -> String {
    id.to_string()
}

fn corrupt(what: impl std::fmt::Display) -> CoreError {
    CoreError::Store(StoreError::Corrupt(format!("budget ledger: {what}")))
}

async fn read(store: &dyn Store, root: SessionId) -> CoreResult<Option<View>> {
    let Some(cp) = store.checkpoint(NAMESPACE, &key(root)).await? else {
        return Ok(None);
    };
    let ledger: Ledger = serde_json::from_value(cp.value).map_err(corrupt)?;
    // Deepest first (holders, then pools by depth): see the module docs.
    let mut ids: Vec<(usize, String)> = ledger
        .holds
        .keys()
        .map(|h| (usize::MAX, h.clone()))
        .collect();
    ids.extend(
        ledger
            .pools
            .iter()
            .map(|(id, p)| (p.above.len(), id.clone())),
    );
    ids.sort_by_key(|id| std::cmp::Reverse(id.0));
    let mut records = HashMap::new();
    for (_, id) in ids {
        if records.contains_key(&id) {
            continue;
        }
        let parsed: SessionId = id.parse().map_err(|_| corrupt(format!("id {id:?}")))?;
        if let Some(r) = store.session(parsed).await? {
            records.insert(id, r);
        }
    }
    Ok(Some(View {
        ledger,
        version: cp.version,
        records,
    }))
}

/// Writes `view`'s ledger if no one wrote since it was read; `false` on a conflict.
async fn write(store: &dyn Store, root: SessionId, view: &View) -> CoreResult<bool> {
    let value = serde_json::to_value(&view.ledger).map_err(corrupt)?;
    match store
        .put_checkpoint(NAMESPACE, &key(root), &value, view.version)
        .await
    {
        Ok(_) => Ok(true),
        Err(StoreError::Conflict { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn busy() -> CoreError {
    CoreError::Supervisor(format!(
        "the budget ledger stayed busy for {ATTEMPTS} attempts; try again"
    ))
}

/// The pools on `path` (a session, then its ancestors nearest first) that the ledger holds.
fn chain_of(ledger: &Ledger, path: &[SessionId]) -> Vec<String> {
    path.iter()
        .map(|id| key(*id))
        .filter(|k| ledger.pools.contains_key(k))
        .collect()
}

/// Reserves `amount` for `session`'s next call (replacing any reservation it left), if every
/// pool on its `path` that checks it can cover it. `unpriced`: the call's model, when it has
/// no price (a pool limiting money then refuses it). `Ok(Err(_))` is the pool's refusal.
pub(crate) async fn reserve_call(
    store: &dyn Store,
    root: SessionId,
    (session, path): (SessionId, &[SessionId]),
    amount: Amount,
    unpriced: Option<&str>,
) -> CoreResult<Result<Grant, Refusal>> {
    let me = key(session);
    for _ in 0..ATTEMPTS {
        let Some(mut view) = read(store, root).await? else {
            return Ok(Ok(Grant::default()));
        };
        let chain = chain_of(&view.ledger, path);
        view.close_ended();
        view.drop_lapsed(&me);
        view.ledger.holds.remove(&me);
        if let Some(model) = unpriced
            && let Some((x, _, limit, spent, reserved)) = view.left(&chain, Dim::Cost)
        {
            return Ok(Err(Refusal {
                pool: x.parse().unwrap_or_default(),
                limit_name: Dim::Cost.name(),
                limit,
                spent,
                reserved,
                wanted: 0,
                unpriced_model: Some(model.to_owned()),
            }));
        }
        for d in DIMS {
            if let Some(refusal) = view.refuses(&chain, d, d.of(&amount)) {
                return Ok(Err(refusal));
            }
        }
        view.ledger.holds.insert(
            me.clone(),
            Hold {
                chain: chain.clone(),
                amount,
            },
        );
        let low = view.mark_low(&chain);
        if write(store, root, &view).await? {
            return Ok(Ok(Grant {
                low,
                ..Grant::default()
            }));
        }
        tokio::task::yield_now().await;
    }
    Err(busy())
}

/// Opens `owner`'s pool of `asked` under the pools on `above` (its parent's path, nearest
/// first; empty for a root), reserving it from them: clamped to what they have left, or
/// refused, per `policy`. `returns`: its unspent part returns once `owner` ends.
pub(crate) async fn open_pool(
    store: &dyn Store,
    root: SessionId,
    owner: SessionId,
    (above, asked, policy, returns): (&[SessionId], Budget, BudgetPolicy, bool),
) -> CoreResult<Result<Grant, Refusal>> {
    asked.check()?;
    let me = key(owner);
    for _ in 0..ATTEMPTS {
        let mut view = match read(store, root).await? {
            Some(v) => v,
            None => View {
                ledger: Ledger::default(),
                version: 0,
                records: HashMap::new(),
            },
        };
        if let Some(pool) = view.ledger.pools.get(&me) {
            // Opened already (a retried creation): it keeps what it was granted.
            return Ok(Ok(Grant {
                budget: pool.budget,
                ..Grant::default()
            }));
        }
        let chain = chain_of(&view.ledger, above);
        view.close_ended();
        view.drop_lapsed("");
        let mut granted = asked;
        let mut clamped = false;
        for d in DIMS {
            let Some(want) = d.limit(&asked) else {
                continue;
            };
            let Some((x, left, limit, spent, reserved)) = view.left(&chain, d) else {
                continue;
            };
            let minimum = if d == Dim::Tokens { MIN_POOL_TOKENS } else { 1 };
            let refusal = Refusal {
                pool: x.parse().unwrap_or(root),
                limit_name: d.name(),
                limit,
                spent,
                reserved,
                wanted: want,
                unpriced_model: None,
            };
            if want > left && (policy == BudgetPolicy::Refuse || left < minimum) {
                return Ok(Err(refusal));
            }
            if want > left {
                clamped = true;
                match d {
                    Dim::Tokens => granted.max_tree_tokens = Some(left),
                    Dim::Cost => granted.max_tree_cost_micros = Some(left),
                }
            }
        }
        view.ledger.pools.insert(
            key(owner),
            Pool {
                budget: granted,
                above: chain,
                returns,
                low: [false; 2],
                closed: false,
            },
        );
        if write(store, root, &view).await? {
            return Ok(Ok(Grant {
                budget: granted,
                clamped,
                opened: true,
                low: Vec::new(),
            }));
        }
        tokio::task::yield_now().await;
    }
    Err(busy())
}

/// Releases `session`'s reservation, if it holds one (its call's usage is stored by now);
/// with `charge`, keeps it as spent instead: its call was cut off before its usage arrived.
pub(crate) async fn settle_call(
    store: &dyn Store,
    root: SessionId,
    session: SessionId,
    charge: bool,
) -> CoreResult<()> {
    let me = key(session);
    for _ in 0..ATTEMPTS {
        let Some(mut view) = read(store, root).await? else {
            return Ok(());
        };
        let Some(hold) = view.ledger.holds.remove(&me) else {
            return Ok(());
        };
        if charge {
            view.ledger.charged.push(hold);
        }
        if write(store, root, &view).await? {
            return Ok(());
        }
        tokio::task::yield_now().await;
    }
    Err(busy())
}

/// Forgets `owner`'s pool: its session's record could not be written after all.
pub(crate) async fn remove_pool(store: &dyn Store, root: SessionId, owner: SessionId) {
    let me = key(owner);
    for _ in 0..ATTEMPTS {
        let Ok(Some(mut view)) = read(store, root).await else {
            return;
        };
        if view.ledger.pools.remove(&me).is_none() {
            return;
        }
        match write(store, root, &view).await {
            Ok(true) | Err(_) => return,
            Ok(false) => tokio::task::yield_now().await,
        }
    }
}

/// One pool as a report shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct PoolView {
    /// The session whose subtree it covers.
    #[cfg_attr(feature = "utoipa", schema(value_type = String))]
    pub session: SessionId,
    /// Its limits (as granted, for a child).
    pub budget: Budget,
    /// What its subtree has spent: tokens, and micro-units.
    pub spent: Amount,
    /// What it holds for calls in flight and for its open children's pools.
    pub reserved: Amount,
    /// Whether it still holds its place in the pool above (a task child's closes when it
    /// ends, and its unspent part returns).
    pub open: bool,
}

/// The pools of `root`'s tree, root first, then by depth: their limits, what their subtrees
/// spent and what they hold. Empty for a tree without pools. Only reads.
pub async fn pools(store: &dyn Store, root: SessionId) -> CoreResult<Vec<PoolView>> {
    let Some(view) = read(store, root).await? else {
        return Ok(Vec::new());
    };
    let mut out: Vec<(usize, PoolView)> = view
        .ledger
        .pools
        .iter()
        .filter_map(|(id, pool)| {
            let session: SessionId = id.parse().ok()?;
            let amount = |f: &dyn Fn(Dim) -> u64| Amount {
                tokens: f(Dim::Tokens),
                cost: f(Dim::Cost),
            };
            Some((
                pool.above.len(),
                PoolView {
                    session,
                    budget: pool.budget,
                    spent: amount(&|d| view.spent(id, d)),
                    reserved: amount(&|d| view.reserved(id, d)),
                    open: view.open(id),
                },
            ))
        })
        .collect();
    out.sort_by_key(|(depth, p)| (*depth, p.session));
    Ok(out.into_iter().map(|(_, p)| p).collect())
}
