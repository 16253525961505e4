//! Recovery telemetry: one row of counters per allow-listed child.
//!
//! Updated in O(1) per delegation start and settle; the failure radius scan at a failure is
//! bounded by the live delegations (at most `max_active_children`) times their depth.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::supervisor::config::policy::Lifetime;

/// Where a child's delegations stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// No delegation yet.
    Idle,
    /// At least one delegation is live.
    Running,
    /// The last one succeeded.
    Succeeded,
    /// The last one failed (error or limit).
    Failed,
    /// The last one was cancelled.
    Aborted,
    /// The last one is suspended.
    Suspended,
    /// The last child run was denied by a policy.
    Denied,
    /// The `before` hook refused the last one.
    Rejected,
}

/// Counters of one child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildSummary {
    /// The catalog entry.
    pub child_id: String,
    /// Started delegations (hook refusals included, pre-check refusals not).
    pub attempts: u64,
    /// Attempts started after a `failed` or `aborted` outcome.
    pub retries: u64,
    /// Delegations that died on an error or a limit.
    pub failures: u64,
    /// Task-lifetime descendant delegations still live when the most recent failure happened.
    pub failure_radius: u64,
    /// Where it stands.
    pub outcome: Outcome,
}

#[derive(Debug)]
struct Live {
    child: usize,
    parents: Arc<[String]>,
    lifetime: Lifetime,
}

/// The rows and the live delegations they are computed from.
#[derive(Debug)]
pub(crate) struct Summary {
    rows: Vec<ChildSummary>,
    live: HashMap<String, Live>,
    live_per_child: Vec<u32>,
}

impl Summary {
    pub(crate) fn new(child_ids: &[String]) -> Self {
        Self {
            rows: child_ids
                .iter()
                .map(|id| ChildSummary {
                    child_id: id.clone(),
                    attempts: 0,
                    retries: 0,
                    failures: 0,
                    failure_radius: 0,
                    outcome: Outcome::Idle,
                })
                .collect(),
            live: HashMap::new(),
            live_per_child: vec![0; child_ids.len()],
        }
    }

    /// A delegation of `child` started.
    pub(crate) fn start(
        &mut self,
        child: usize,
        delegation_id: &str,
        parents: Arc<[String]>,
        lifetime: Lifetime,
    ) {
        let row = &mut self.rows[child];
        row.attempts += 1;
        if matches!(row.outcome, Outcome::Failed | Outcome::Aborted) {
            row.retries += 1;
        }
        row.outcome = Outcome::Running;
        self.live_per_child[child] += 1;
        self.live.insert(
            delegation_id.to_owned(),
            Live {
                child,
                parents,
                lifetime,
            },
        );
    }

    /// A suspended delegation resumes: live again under its id, without a new attempt (a
    /// no-op when this process still has it live).
    pub(crate) fn rejoin(
        &mut self,
        child: usize,
        delegation_id: &str,
        parents: Arc<[String]>,
        lifetime: Lifetime,
    ) {
        if self.live.contains_key(delegation_id) {
            return;
        }
        self.rows[child].outcome = Outcome::Running;
        self.live_per_child[child] += 1;
        self.live.insert(
            delegation_id.to_owned(),
            Live {
                child,
                parents,
                lifetime,
            },
        );
    }

    /// A delegation suspended on approvals: nothing of it runs and its slot is free, so it
    /// is no longer live; its row shows `suspended` unless another of its delegations runs.
    /// Not a settle: no failure is counted, and [`rejoin`](Self::rejoin) makes it live again.
    pub(crate) fn suspend(&mut self, delegation_id: &str) {
        let Some(live) = self.live.remove(delegation_id) else {
            return;
        };
        let child = live.child;
        self.live_per_child[child] = self.live_per_child[child].saturating_sub(1);
        if self.live_per_child[child] == 0 {
            self.rows[child].outcome = Outcome::Suspended;
        }
    }

    /// A delegation settled with `outcome`; `failure` when it counts as one.
    pub(crate) fn settle(&mut self, delegation_id: &str, outcome: Outcome, failure: bool) {
        let Some(live) = self.live.remove(delegation_id) else {
            return;
        };
        let child = live.child;
        self.live_per_child[child] = self.live_per_child[child].saturating_sub(1);
        let radius = if failure {
            self.live
                .values()
                .filter(|l| {
                    l.lifetime == Lifetime::Task && l.parents.iter().any(|p| p == delegation_id)
                })
                .count() as u64
        } else {
            0
        };
        let row = &mut self.rows[child];
        if failure {
            row.failures += 1;
            row.failure_radius = radius;
        }
        row.outcome = if self.live_per_child[child] > 0 {
            Outcome::Running
        } else {
            outcome
        };
    }

    pub(crate) fn rows(&self) -> Vec<ChildSummary> {
        self.rows.clone()
    }

    pub(crate) fn reset(&mut self) {
        for (i, row) in self.rows.iter_mut().enumerate() {
            row.attempts = 0;
            row.retries = 0;
            row.failures = 0;
            row.failure_radius = 0;
            row.outcome = if self.live_per_child[i] > 0 {
                Outcome::Running
            } else {
                Outcome::Idle
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> Vec<String> {
        vec!["a".into(), "b".into()]
    }

    #[test]
    fn retries_count_attempts_after_a_failure() {
        let mut s = Summary::new(&ids());
        s.start(0, "d1", Arc::from(vec![]), Lifetime::Task);
        s.settle("d1", Outcome::Failed, true);
        s.start(0, "d2", Arc::from(vec![]), Lifetime::Task);
        s.settle("d2", Outcome::Succeeded, false);
        s.start(0, "d3", Arc::from(vec![]), Lifetime::Task);
        let row = &s.rows()[0];
        assert_eq!((row.attempts, row.retries, row.failures), (3, 1, 1));
        assert_eq!(row.outcome, Outcome::Running);
        assert_eq!(s.rows()[1].outcome, Outcome::Idle);
    }

    #[test]
    fn failure_radius_is_the_most_recent_failure_and_counts_task_descendants() {
        let mut s = Summary::new(&ids());
        let root: Arc<[String]> = Arc::from(vec![]);
        s.start(0, "p", root.clone(), Lifetime::Task);
        s.start(1, "c1", Arc::from(vec!["p".to_owned()]), Lifetime::Task);
        s.start(1, "c2", Arc::from(vec!["p".to_owned()]), Lifetime::Task);
        s.start(
            1,
            "g",
            Arc::from(vec!["p".to_owned(), "c1".to_owned()]),
            Lifetime::Task,
        );
        s.start(
            1,
            "detached",
            Arc::from(vec!["p".to_owned()]),
            Lifetime::Session,
        );
        s.start(0, "other", root.clone(), Lifetime::Task);
        s.settle("p", Outcome::Failed, true);
        assert_eq!(
            s.rows()[0].failure_radius,
            3,
            "c1, c2 and g; not the session child"
        );
        assert_eq!(
            s.rows()[0].outcome,
            Outcome::Running,
            "`other` is still live"
        );
        s.start(0, "q", root, Lifetime::Task);
        s.settle("q", Outcome::Failed, true);
        assert_eq!(s.rows()[0].failure_radius, 0, "most recent, not a sum");
        assert_eq!(s.rows()[0].failures, 2);
    }

    #[test]
    fn a_suspended_delegation_shows_suspended_until_it_rejoins() {
        let mut s = Summary::new(&ids());
        s.start(0, "d1", Arc::from(vec![]), Lifetime::Task);
        s.suspend("d1");
        assert_eq!(s.rows()[0].outcome, Outcome::Suspended);
        assert_eq!(s.rows()[0].attempts, 1);
        s.rejoin(0, "d1", Arc::from(vec![]), Lifetime::Task);
        assert_eq!(s.rows()[0].outcome, Outcome::Running);
        assert_eq!(s.rows()[0].attempts, 1, "a resume is not a new attempt");
        s.settle("d1", Outcome::Succeeded, false);
        assert_eq!(s.rows()[0].outcome, Outcome::Succeeded);
    }

    #[test]
    fn reset_keeps_live_as_running() {
        let mut s = Summary::new(&ids());
        s.start(0, "d1", Arc::from(vec![]), Lifetime::Task);
        s.start(1, "d2", Arc::from(vec![]), Lifetime::Task);
        s.settle("d2", Outcome::Succeeded, false);
        s.reset();
        assert_eq!(s.rows()[0].outcome, Outcome::Running);
        assert_eq!(s.rows()[1].outcome, Outcome::Idle);
        assert_eq!(s.rows()[0].attempts, 0);
        s.settle("d1", Outcome::Aborted, false);
        assert_eq!(s.rows()[0].outcome, Outcome::Aborted);
    }
}

/// Access to the summary's internal counters for the benchmark program (feature `bench`).
/// Not a stable API.
#[cfg(feature = "bench")]
#[doc(hidden)]
pub mod bench {
    use std::sync::Arc;

    use super::{Outcome, Summary};
    use crate::supervisor::config::policy::Lifetime;

    /// The counters the supervisor updates on every delegation's start and settle.
    #[derive(Debug)]
    pub struct SummaryCounters(Summary);

    impl SummaryCounters {
        /// Counters for these catalog entries.
        pub fn new(child_ids: &[String]) -> Self {
            Self(Summary::new(child_ids))
        }

        /// A task-lifetime delegation of entry `child` started under `parents`.
        pub fn start(&mut self, child: usize, delegation_id: &str, parents: Arc<[String]>) {
            self.0.start(child, delegation_id, parents, Lifetime::Task);
        }

        /// The delegation settled, as a failure or a success.
        pub fn settle(&mut self, delegation_id: &str, failure: bool) {
            let outcome = if failure {
                Outcome::Failed
            } else {
                Outcome::Succeeded
            };
            self.0.settle(delegation_id, outcome, failure);
        }

        /// The rows `summary()` returns.
        pub fn rows(&self) -> Vec<super::ChildSummary> {
            self.0.rows()
        }
    }
}
