//! Scenario L: one long-lived supervisor under one host-attached root, through many
//! message-mode children, measuring whether its memory stays flat.
//!
//! The children are spawned in batches of the supervisor's live-child limit, each with a
//! name of its own; every [`FOLLOW_UP_EVERY`]th child then gets a host message, which runs
//! it again (a follow-up run) and takes a rate-bucket token. Each batch, and each batch's
//! follow-ups, finishes (the supervisor is quiet) and the root's inbox is drained before the
//! next. Resident memory is read once 1,000 children have run (warm-up) and at the end, and
//! the supervisor's tracked sessions at the end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arbor_core::inbox::Inbox;
use arbor_core::process::SupervisorProcess;
use arbor_core::supervisor::{
    ChildEntry, DelegationRequest, LimitsInput, Ownership, Sender, Supervisor,
};
use arbor_core::{Agent, SessionRef};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::SessionId;
use arbor_store::Store;

use crate::rss;
use crate::trees::turn;

/// Every this many children, one gets a host message after it finished.
pub(crate) const FOLLOW_UP_EVERY: u64 = 10;
/// The most sessions the supervisor may still track at the end: the host's root alone.
pub(crate) const MAX_TRACKED: u64 = 1;

/// The most L may grow on a durable store, in MB per 10,000 children after the warm-up,
/// when it runs long enough to tell growth from noise ([`GROWTH_CHECKED_FROM`] children).
/// Nothing of an ended child stays in the process there; the figure measured is about
/// 0.02 MB. An inbox that remembered every message id it ever held made it 1.2 MB.
pub(crate) const MAX_GROWTH_MB_PER_10K: f64 = 0.25;

/// The children from which L's growth on a durable store is checked.
pub(crate) const GROWTH_CHECKED_FROM: u64 = 20_000;
/// The least warm-up, in children.
pub(crate) const MIN_WARM_UP: u64 = 1000;
/// Children live at once: each batch is this many spawns.
pub(crate) const BATCH: u32 = 4;

/// What one long life measured.
pub(crate) struct LongLife {
    /// Wall time of all the children and follow-ups.
    pub(crate) elapsed: Duration,
    /// The host's root, whose aggregate holds every child's tokens.
    pub(crate) root: SessionId,
    /// Children run before the warm-up reading.
    pub(crate) warm_ops: u64,
    /// Resident memory after the warm-up, in kibibytes.
    pub(crate) warm_kib: u64,
    /// Resident memory at the end, in kibibytes.
    pub(crate) end_kib: u64,
    /// Sessions the supervisor tracks at the end.
    pub(crate) tracked: u64,
    /// R: every root it ran (their aggregates hold every call's tokens).
    pub(crate) roots: Vec<SessionId>,
}

/// Children before the warm-up reading: [`MIN_WARM_UP`] (SQLite's page cache fills over the
/// first few hundred), or half of a shorter run.
pub(crate) fn warm_up(ops: u64) -> u64 {
    MIN_WARM_UP.min(ops / 2).max(1)
}

/// Follow-up runs in a long life of `ops` children: one for every [`FOLLOW_UP_EVERY`]th.
pub(crate) fn follow_ups(ops: u64) -> u64 {
    ops.div_ceil(FOLLOW_UP_EVERY)
}

/// Runs `ops` message-mode children (and their follow-ups) under one root on `store`.
pub(crate) async fn run(store: &Arc<dyn Store>, ops: u64) -> Result<LongLife, String> {
    let e = |e: arbor_core::CoreError| e.to_string();
    let worker = Agent::builder("worker")
        .provider(ScriptedProvider::new(
            Script::new(vec![turn(ScriptedTurn::text("done"))]).repeat_last(true),
        ))
        .build()
        .map_err(e)?;
    let sup = Supervisor::builder(Ownership::user("bench", "bench"))
        .id("bench")
        .store(store.clone())
        .limits(LimitsInput {
            max_active_children: Some(BATCH),
            ..LimitsInput::default()
        })
        .child(ChildEntry::agent("worker", worker))
        .build()
        .map_err(e)?;
    let mut root = crate::trees::scripted("root", Vec::new())
        .build()
        .map_err(e)?
        .session()
        .store(store.clone())
        .create()
        .await
        .map_err(e)?;
    sup.attach(&mut root);
    let parent = SessionRef::from(root.record());
    // Waiting on an inbox that never gets mail waits until the supervisor is quiet.
    let none = Inbox::new();
    let warm_at = warm_up(ops);
    let mut warm = None;
    let mut done = 0;
    let start = Instant::now();
    while done < ops {
        let mut again = Vec::new();
        let batch = u64::from(BATCH).min(ops - done);
        for i in done..done + batch {
            let request = DelegationRequest {
                parent: Some(parent),
                name: Some(format!("w{i}")),
                ..DelegationRequest::new("worker", "go")
            };
            let handle = sup.spawn(request).await.map_err(e)?;
            if i % FOLLOW_UP_EVERY == 0 {
                again.push(handle.session_id);
            }
        }
        sup.wait_for_mail_or_quiet(&none).await;
        root.inbox().drain();
        if !again.is_empty() {
            for child in again {
                sup.send_message(Sender::Host, child, "again")
                    .await
                    .map_err(e)?;
            }
            sup.wait_for_mail_or_quiet(&none).await;
            root.inbox().drain();
        }
        done += batch;
        if warm.is_none() && done >= warm_at {
            warm = Some((done, rss::current_kib()));
        }
    }
    let elapsed = start.elapsed();
    let (warm_ops, warm_kib) = warm.unwrap_or((0, 0));
    Ok(LongLife {
        elapsed,
        root: root.id(),
        warm_ops,
        warm_kib,
        end_kib: rss::current_kib(),
        tracked: sup.tracked_sessions() as u64,
        roots: Vec::new(),
    })
}

/// Scenario R: `ops` conversations through one supervisor, each a root the host attaches,
/// runs (it delegates once, sync), closes and drops. The supervisor must keep nothing of a
/// closed root: at the end it tracks none (the last is let go with
/// `Supervisor::release_dropped`), and its memory stays flat after the warm-up.
pub(crate) async fn roots(store: &Arc<dyn Store>, ops: u64) -> Result<LongLife, String> {
    let e = |e: arbor_core::CoreError| e.to_string();
    let (root, sup) = crate::trees::one_child(store).map_err(e)?;
    let warm_at = warm_up(ops);
    let mut warm = None;
    let mut roots = Vec::with_capacity(usize::try_from(ops).unwrap_or(0));
    let start = Instant::now();
    for done in 1..=ops {
        let mut session = sup.root_session(&root, |b| b).await.map_err(e)?;
        let result = session
            .run("task", arbor_core::RunOptions::default())
            .await
            .map_err(e)?;
        if result.status != arbor_protocol::RunStatus::Succeeded {
            return Err(format!("a root run ended {:?}", result.status));
        }
        sup.close_session(session.id());
        roots.push(session.id());
        drop(session);
        if warm.is_none() && done >= warm_at {
            warm = Some((done, rss::current_kib()));
        }
    }
    let elapsed = start.elapsed();
    sup.release_dropped();
    let (warm_ops, warm_kib) = warm.unwrap_or((0, 0));
    Ok(LongLife {
        elapsed,
        root: roots.last().copied().unwrap_or_default(),
        warm_ops,
        warm_kib,
        end_kib: rss::current_kib(),
        tracked: (sup.tracked_sessions() + sup.closed_sessions()) as u64,
        roots,
    })
}

/// Resident growth per 10,000 children after the warm-up, in mebibytes (negative when the
/// set shrank).
pub(crate) fn growth_per_10k_mb(life: &LongLife, ops: u64) -> f64 {
    let after = ops.saturating_sub(life.warm_ops);
    if after == 0 {
        return 0.0;
    }
    let grown = life.end_kib as f64 - life.warm_kib as f64;
    grown / 1024.0 * 10_000.0 / after as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warm_up_is_a_thousand_or_half() {
        assert_eq!(warm_up(100_000), 1000);
        assert_eq!(warm_up(3000), 1000);
        assert_eq!(warm_up(400), 200);
        assert_eq!(warm_up(1), 1);
        assert_eq!(follow_ups(400), 40);
        assert_eq!(follow_ups(401), 41);
    }

    #[test]
    fn growth_is_scaled_to_ten_thousand_children_after_the_warm_up() {
        let life = |warm_kib, end_kib| LongLife {
            elapsed: Duration::ZERO,
            root: SessionId::new(),
            warm_ops: 1000,
            warm_kib,
            end_kib,
            tracked: 1,
            roots: Vec::new(),
        };
        // 512 KiB over the 2,000 children after the warm-up: 2.5 MiB per 10,000.
        assert_eq!(growth_per_10k_mb(&life(10_240, 10_752), 3000), 2.5);
        assert_eq!(growth_per_10k_mb(&life(10_752, 10_240), 3000), -2.5);
        assert_eq!(growth_per_10k_mb(&life(10_240, 10_752), 1000), 0.0);
    }
}
