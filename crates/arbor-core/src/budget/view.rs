//! What one read of a tree's ledger says: which pools are open, what each has spent and
//! holds, what is left for a call or a child's pool on a path, and the upkeep every write
//! does (closing returned pools, dropping lapsed reservations, marking low pools). The rules
//! are the module docs of [`super::ledger`].

use arbor_protocol::{SessionId, SessionStatus};

use super::LOW_PERCENT;
use super::ledger::{DIMS, Dim, Refusal, View};

impl View {
    /// Whether pool `id` holds its reservation in the pool above (a root's always does; one
    /// whose record is not written yet does, so a sibling admitted meanwhile sees it).
    pub(super) fn open(&self, id: &str) -> bool {
        let Some(pool) = self.ledger.pools.get(id) else {
            return false;
        };
        if pool.above.is_empty() {
            return true;
        }
        if pool.closed {
            return false;
        }
        match self.records.get(id) {
            None => true,
            Some(r) if r.tombstone.is_some() => false,
            Some(r) => !pool.returns || !ended(r.status),
        }
    }

    /// Closes the pools of task children that ended (see [`Pool::closed`]).
    pub(super) fn close_ended(&mut self) {
        let records = &self.records;
        for (id, pool) in &mut self.ledger.pools {
            if pool.returns
                && !pool.closed
                && records
                    .get(id)
                    .is_some_and(|r| r.tombstone.is_some() || ended(r.status))
            {
                pool.closed = true;
            }
        }
    }

    pub(super) fn limits(&self, id: &str, d: Dim) -> Option<u64> {
        self.ledger.pools.get(id).and_then(|p| d.limit(&p.budget))
    }

    pub(super) fn spent(&self, id: &str, d: Dim) -> u64 {
        let charged = self
            .ledger
            .charged
            .iter()
            .filter(|c| c.chain.iter().any(|p| p == id))
            .fold(0u64, |sum, c| sum.saturating_add(d.of(&c.amount)));
        self.records
            .get(id)
            .map_or(0, |r| d.spent(r))
            .saturating_add(charged)
    }

    /// Whether `x` is where something on `chain` (nearest first) counts for `d`: the first
    /// open pool limiting `d` on it, or a pool before that.
    pub(super) fn counts_at(&self, chain: &[String], x: &str, d: Dim) -> bool {
        for p in chain {
            if p == x {
                return true;
            }
            if self.limits(p, d).is_some() && self.open(p) {
                return false;
            }
        }
        false
    }

    /// What pool `x` holds for `d`: its open children's pools' unspent parts and the calls
    /// in flight below it that no open pool between covers.
    pub(super) fn reserved(&self, x: &str, d: Dim) -> u64 {
        let mut sum = 0u64;
        for (id, pool) in &self.ledger.pools {
            if id == x || !self.open(id) {
                continue;
            }
            if let Some(limit) = d.limit(&pool.budget)
                && self.counts_at(&pool.above, x, d)
            {
                sum = sum.saturating_add(limit.saturating_sub(self.spent(id, d)));
            }
        }
        for hold in self.ledger.holds.values() {
            if self.counts_at(&hold.chain, x, d) {
                sum = sum.saturating_add(d.of(&hold.amount));
            }
        }
        sum
    }

    /// Whether `wanted` fits every pool on `chain` that checks it for `d` (up to the first
    /// open one): `None` when it does, else the refusal of the first that cannot.
    pub(super) fn refuses(&self, chain: &[String], d: Dim, wanted: u64) -> Option<Refusal> {
        self.left(chain, d)
            .and_then(|(x, left, limit, spent, reserved)| {
                // Nothing left refuses even a call priced at nothing.
                (wanted > left || left == 0).then(|| Refusal {
                    pool: x.parse().unwrap_or_default(),
                    limit_name: d.name(),
                    limit,
                    spent,
                    reserved,
                    wanted,
                    unpriced_model: None,
                })
            })
    }

    /// The least any pool on `chain` that checks `d` has left: `(pool, left, limit, spent,
    /// reserved)`, or `None` when no pool on it limits `d`.
    pub(super) fn left(&self, chain: &[String], d: Dim) -> Option<(String, u64, u64, u64, u64)> {
        let mut least: Option<(String, u64, u64, u64, u64)> = None;
        for x in chain {
            let Some(limit) = self.limits(x, d) else {
                continue;
            };
            let spent = self.spent(x, d);
            let reserved = self.reserved(x, d);
            let left = limit.saturating_sub(spent.saturating_add(reserved));
            if least.as_ref().is_none_or(|l| left < l.1) {
                least = Some((x.clone(), left, limit, spent, reserved));
            }
            if self.open(x) {
                break;
            }
        }
        least
    }

    /// Drops the reservations of sessions no longer running (a crash, a run that ended
    /// without settling): they can spend nothing more.
    pub(super) fn drop_lapsed(&mut self, keep: &str) {
        let records = &self.records;
        self.ledger.holds.retain(|holder, _| {
            holder == keep
                || records
                    .get(holder)
                    .is_some_and(|r| r.status == SessionStatus::Running)
        });
    }

    /// Marks and returns the pools on `chain` whose spend passed their low mark.
    pub(super) fn mark_low(
        &mut self,
        chain: &[String],
    ) -> Vec<(SessionId, &'static str, u64, u64)> {
        let mut out = Vec::new();
        for d in DIMS {
            for x in chain {
                let Some(limit) = self.limits(x, d) else {
                    continue;
                };
                let used = self.spent(x, d);
                let Some(pool) = self.ledger.pools.get_mut(x) else {
                    continue;
                };
                let percent = u128::from(pool.budget.low_percent.unwrap_or(LOW_PERCENT));
                let crossed = u128::from(used) * 100 >= u128::from(limit) * percent;
                if crossed && !pool.low[d.index()] {
                    pool.low[d.index()] = true;
                    if let Ok(id) = x.parse() {
                        out.push((id, d.name(), limit, used));
                    }
                }
            }
        }
        out
    }
}

/// Whether a session in `status` has ended (a task child's pool then returns).
pub(super) fn ended(status: SessionStatus) -> bool {
    !matches!(
        status,
        SessionStatus::Idle
            | SessionStatus::Queued
            | SessionStatus::Running
            | SessionStatus::Suspended
            | SessionStatus::Interrupted
    )
}
