//! The delegation pipeline as values that hand over to each other:
//!
//! ```text
//! Supervisor::admit ─▶ Admitted ─register─▶ Registered ─begin─▶ ─run─▶ Ran ─report─▶ DelegationResult
//! ```
//!
//! [`Admitted`] is what admission settled (every check passed, a slot held, nothing counted).
//! `register` writes the child's record and hands over a [`Registered`]: a delegation with a
//! record, ready to run. A resumed or recovered child is a `Registered` from its stored
//! record ([`Registered::resumed`]). `begin` counts the attempt (or `rejoin` re-enters a
//! suspended one into the counters without counting it again); `run` does the work under
//! the delegation's timeout and cancellation and hands over a [`Ran`]; `report` writes the
//! one terminal report and what follows it (teardown, notices, wake-ups).

use std::time::Duration;

use arbor_protocol::ChildOrigin;

use crate::error::CoreResult;
use crate::supervisor::delegation::admitted::{
    Admitted, Control, Ended, HANDLE_CANCELLED, Terms, Worked,
};
use crate::supervisor::request::DelegationResult;
use crate::supervisor::runtime::Supervisor;

/// A delegation whose child has a record: ready to begin and run.
///
/// `a` is boxed: it is close to a kilobyte, and the delegation's future (boxed or spawned
/// whole) kept it at every layer.
pub(crate) struct Registered {
    sup: Supervisor,
    a: Box<Admitted>,
}

/// A delegation whose work is over (or never started): what its terminal report needs.
pub(crate) struct Ran {
    sup: Supervisor,
    a: Box<Admitted>,
    origin: ChildOrigin,
    worked: Worked,
    timed_out: bool,
}

impl Supervisor {
    /// Preflights the model and writes the child's record (reserving its name), handing
    /// over a [`Registered`]. On error nothing was written and nothing counted; the slot is
    /// released when `a` drops.
    pub(crate) async fn register(&self, mut a: Admitted) -> CoreResult<Registered> {
        self.write_record(&mut a).await?;
        Ok(Registered {
            sup: self.clone(),
            a: Box::new(a),
        })
    }
}

impl Registered {
    /// A child rebuilt from its stored record (resumed, recovered or a follow-up run): its
    /// record exists already.
    pub(crate) fn resumed(sup: &Supervisor, a: Admitted) -> Self {
        Self {
            sup: sup.clone(),
            a: Box::new(a),
        }
    }

    /// What admission settled.
    pub(crate) fn admitted(&self) -> &Admitted {
        &self.a
    }

    /// Counts the attempt and registers the delegation as live. Called synchronously at
    /// start, before an async launch returns its handle, so a failure of an ancestor counts
    /// every descendant already started.
    pub(crate) fn begin(&self) {
        let a = &self.a;
        self.sup.watch_session_end();
        self.sup.state().summary.start(
            a.terms.entry,
            &a.terms.delegation_id,
            a.terms.parents.clone(),
            a.terms.policy.lifetime,
        );
    }

    /// Re-enters a resumed delegation into the counters, as live, without counting a new
    /// attempt (its suspension was not terminal).
    pub(crate) fn rejoin(&self) {
        let a = &self.a;
        self.sup.state().summary.rejoin(
            a.terms.entry,
            &a.terms.delegation_id,
            a.terms.parents.clone(),
            a.terms.policy.lifetime,
        );
    }

    /// Begun already: runs to the terminal report and what follows it.
    pub(crate) async fn drive(self) -> CoreResult<DelegationResult> {
        self.run().await.report().await
    }

    /// Does the work (hook, factory, child run) under the delegation's timeout (which a
    /// nested resume may move) and its caller's cancellation.
    pub(crate) async fn run(self) -> Ran {
        let Self { sup, a } = self;
        let origin = ChildOrigin {
            child_id: a.terms.child_id.clone(),
            delegation_id: a.terms.delegation_id.clone(),
            depth: a.terms.depth,
        };
        let (deadline_tx, mut deadline_rx) = tokio::sync::watch::channel(
            tokio::time::Instant::now() + Duration::from_millis(a.terms.limits.timeout_ms),
        );
        let mut timed_out = false;
        let worked = {
            let work = sup.work(&a, &origin, &deadline_tx);
            tokio::pin!(work);
            let caller = a.control.caller.clone().unwrap_or_default();
            loop {
                let deadline = *deadline_rx.borrow_and_update();
                tokio::select! {
                    biased;
                    w = &mut work => break w,
                    _ = caller.cancelled(), if !a.control.token.is_cancelled() => {
                        a.control.reason.set("Delegation cancelled");
                        a.control.token.cancel();
                    }
                    changed = deadline_rx.changed() => { let _ = changed; }
                    _ = tokio::time::sleep_until(deadline), if !timed_out && !a.control.token.is_cancelled() => {
                        timed_out = true;
                        a.control.token.cancel();
                    }
                }
            }
        };
        Ran {
            sup,
            a,
            origin,
            worked,
            timed_out,
        }
    }
}

impl Ran {
    /// A claimed run's work, for the process it was claimed from (which reports it): its
    /// task-lifetime descendants here end with it, its slot here is released.
    pub(crate) fn here(self) -> Worked {
        self.a.control.token.cancel();
        self.worked
    }

    /// The one terminal report (events, counters, the `after` hook); then ends its
    /// task-lifetime descendants (nothing keeps running under a delegation that is over),
    /// releases its slot and runs what follows the child's run (notices, wake-ups).
    pub(crate) async fn report(self) -> CoreResult<DelegationResult> {
        let Self {
            sup,
            a,
            origin,
            worked,
            timed_out,
        } = self;
        let host_aborted = a.control.token.is_cancelled() && !timed_out;
        // Whether the child's run began (and so read what waited in its inbox).
        let started = matches!(worked, Worked::Ran { .. });
        let outcome = sup
            .terminal(&a, &origin, worked, timed_out, host_aborted)
            .await;
        a.control.token.cancel();
        // A hosted child its host (or its parent model) cancelled through its handle is
        // released: its record gets a `revoked` tombstone once its run has ended.
        let revoked = a.control.reason.get() == Some(HANDLE_CANCELLED);
        let Admitted {
            terms: Terms { mode, .. },
            record,
            replies_at_start,
            control: Control { slot, start, .. },
            ..
        } = *a;
        drop(slot);
        if let Some(record) = record {
            let ended = Ended {
                mode,
                follow_up: start.follow_up(),
                replies_at_start,
                host_aborted,
                started,
                revoked,
            };
            sup.after_run(&record, &outcome, ended).await;
        }
        outcome
    }
}
