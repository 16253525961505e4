//! Budgets for whole trees: a **pool** of tokens and/or money (micro-units of the price
//! table's currency) that a root or a spawned child carries for its whole subtree, at any
//! depth. A pool refuses the *next* model call or spawn before it is made, instead of
//! noticing the overspend afterwards.
//!
//! - **What a pool has spent** is its owner session's aggregate (own plus attributed usage
//!   and cost): the same figures the attribution writes atomically up the tree.
//! - **Reservations.** Before each model call, the call's worst case (its input, estimated
//!   conservatively by [`arbor_model::estimate_input_tokens`], plus its output cap) is
//!   reserved in the nearest pool on the session's path, if the pool can cover it; else the
//!   call is not made and the run ends `budget_exhausted`, naming the pool, its limit and
//!   what was spent. The reservation is released once the call's usage is stored. A child
//!   spawned with a pool of its own reserves that pool, clamped to what its parent's pool has
//!   left (or refused, per [`BudgetPolicy`]), from its parent's pool; what it leaves unspent
//!   returns when it ends.
//! - **The bound.** Sibling calls reserve before they spend, so a pool never overshoots
//!   while calls stay within their reservation: the provider honours the output cap and the
//!   input estimate holds (it over-counts every tokenizer we know of). A call that reports more
//!   than it reserved overshoots by that excess, and the pool refuses every call after; so a
//!   pool's spend is at most its limit plus the excess of the calls in flight when it ran out.
//! - **What cannot be reserved is refused, never ignored.** A pool limiting money refuses a
//!   call whose model has no price. A call cut off by a cancel or the run's timeout before
//!   its usage arrived (the provider may have billed it) is charged its reservation as spent.
//!   A task child's pool, once it returned its unspent part, never holds its place again:
//!   if the child runs once more, its calls reserve in the pool above as well.
//! - **Durable.** The pools and the reservations live in the store (checkpoint namespace
//!   `budget`, one ledger per tree, written compare-and-swap), so they hold across `arbor
//!   resume`, a crash and another worker taking a run over. A reservation belongs to the
//!   session that made it and lapses when that session is no longer running.
//!
//! A tree without pools pays nothing: only sessions under a pool (their record's
//! `meta.budgeted`) consult the ledger.

mod ledger;
mod view;

use serde::{Deserialize, Serialize};

pub use ledger::{Grant, PoolView, Refusal, pools};
pub(crate) use ledger::{open_pool, remove_pool, reserve_call, settle_call};

/// The meta key that marks a session under a pool.
pub(crate) const BUDGETED: &str = "budgeted";

/// The least a child's pool may be granted: a spawn whose parent's pool has less left is
/// refused (a pool that small could not pay for one call).
pub const MIN_POOL_TOKENS: u64 = 1_000;

/// The output a call reserves when neither its controls (`max_output_tokens`) nor its
/// provider cap it.
pub const DEFAULT_OUTPUT_RESERVE: u64 = 4_096;

/// The share of a pool (in percent) its subtree has spent when `budget_low` fires, once per
/// pool and limit, unless the pool sets its own ([`Budget::low_percent`]).
pub const LOW_PERCENT: u8 = 80;

/// The limits of a subtree's pool: tokens (input plus output, as `total_tokens` counts
/// them) and/or cost in micro-units. Both `None` is no pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Budget {
    /// Tokens the whole subtree may spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tree_tokens: Option<u64>,
    /// Micro-units (millionths of the price table's currency) the whole subtree may spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tree_cost_micros: Option<u64>,
    /// The share of the pool (1 to 100 percent) spent when `budget_low` fires (default
    /// [`LOW_PERCENT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub low_percent: Option<u8>,
}

impl Budget {
    /// A pool of `tokens`.
    pub fn tokens(tokens: u64) -> Self {
        Self {
            max_tree_tokens: Some(tokens),
            ..Self::default()
        }
    }

    /// A pool of `micros` micro-units of money.
    pub fn cost_micros(micros: u64) -> Self {
        Self {
            max_tree_cost_micros: Some(micros),
            ..Self::default()
        }
    }

    /// The same pool, with a token limit too.
    #[must_use]
    pub fn and_tokens(mut self, tokens: u64) -> Self {
        self.max_tree_tokens = Some(tokens);
        self
    }

    /// The same pool, with a money limit too (micro-units).
    #[must_use]
    pub fn and_cost_micros(mut self, micros: u64) -> Self {
        self.max_tree_cost_micros = Some(micros);
        self
    }

    /// The same pool, `budget_low` firing at `percent` spent.
    #[must_use]
    pub fn low_at(mut self, percent: u8) -> Self {
        self.low_percent = Some(percent);
        self
    }

    /// A pool as a model, a spec or a request writes it: tokens, and money in currency units
    /// (`0.5`). A limit of 0, an amount that is not a positive number, a low mark outside 1
    /// to 100, or neither limit is refused: `(field, message)`, the field under `budget.`.
    pub fn from_units(
        max_tree_tokens: Option<u64>,
        max_tree_cost: Option<f64>,
        low_percent: Option<u8>,
    ) -> Result<Self, (&'static str, String)> {
        let cost = match max_tree_cost {
            None => None,
            Some(c) if c.is_finite() && c > 0.0 && c < 1e12 => {
                Some((c * crate::pricing::MICROS as f64).round() as u64)
            }
            Some(c) => {
                return Err((
                    "budget.max_tree_cost",
                    format!("max_tree_cost must be a positive amount, not {c}"),
                ));
            }
        };
        let budget = Self {
            max_tree_tokens,
            max_tree_cost_micros: cost,
            low_percent,
        };
        if budget.is_empty() {
            return Err((
                "budget",
                "budget sets neither max_tree_tokens nor max_tree_cost".to_owned(),
            ));
        }
        if max_tree_tokens == Some(0) {
            return Err((
                "budget.max_tree_tokens",
                "max_tree_tokens must be a positive integer".to_owned(),
            ));
        }
        if low_percent.is_some_and(|p| p == 0 || p > 100) {
            return Err((
                "budget.low_percent",
                "low_percent must be 1 to 100".to_owned(),
            ));
        }
        if cost == Some(0) {
            return Err((
                "budget.max_tree_cost",
                "max_tree_cost must be at least one micro-unit".to_owned(),
            ));
        }
        Ok(budget)
    }

    /// Whether it limits anything.
    pub fn is_empty(&self) -> bool {
        self.max_tree_tokens.is_none() && self.max_tree_cost_micros.is_none()
    }

    /// Checks it: a limit of 0 is refused naming it.
    pub fn check(&self) -> crate::error::CoreResult<()> {
        if self.max_tree_tokens == Some(0) {
            return Err(crate::error::CoreError::invalid(
                "budget.max_tree_tokens",
                "max_tree_tokens must be a positive integer",
            ));
        }
        if self.low_percent.is_some_and(|p| p == 0 || p > 100) {
            return Err(crate::error::CoreError::invalid(
                "budget.low_percent",
                "low_percent must be 1 to 100",
            ));
        }
        if self.max_tree_cost_micros == Some(0) {
            return Err(crate::error::CoreError::invalid(
                "budget.max_tree_cost",
                "max_tree_cost must be above 0",
            ));
        }
        Ok(())
    }
}

/// What a spawn asking for more than its parent's pool has left gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetPolicy {
    /// What is left (the tool result says it was clamped); refused below
    /// [`MIN_POOL_TOKENS`] (or nothing left of a money limit).
    #[default]
    Clamp,
    /// Refused, as a tool error the model reads.
    Refuse,
}

/// A child's pool as its parent's model reads it in the spawn's result: what it was granted
/// (money in currency units, as the model asked), and whether that is less than it asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Granted {
    /// Tokens its subtree may spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tree_tokens: Option<u64>,
    /// Money its subtree may spend, in currency units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tree_cost: Option<f64>,
    /// Clamped to what the parent's pool had left.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clamped: bool,
}

impl Granted {
    /// What a child's record says it was granted (`meta.budget`, `meta.budget_clamped`).
    pub fn of(record: &arbor_store::SessionRecord) -> Option<Self> {
        // Two fields read alone: a child's typed meta is not turned into JSON for them.
        let budget: Budget =
            serde_json::from_value(record.meta.field("budget")?.into_owned()).ok()?;
        (!budget.is_empty()).then(|| Self {
            max_tree_tokens: budget.max_tree_tokens,
            max_tree_cost: budget
                .max_tree_cost_micros
                .map(|m| m as f64 / crate::pricing::MICROS as f64),
            clamped: record
                .meta
                .field("budget_clamped")
                .is_some_and(|v| v.as_bool() == Some(true)),
        })
    }
}

/// Tokens and money (micro-units): a call's worst case, or what a pool spent or holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Amount {
    /// Tokens.
    pub tokens: u64,
    /// Micro-units.
    pub cost: u64,
}
