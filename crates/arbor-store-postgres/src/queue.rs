//! Child runs as claimable work: the queue workers take children from, with PostgreSQL as the
//! coordination engine (no consensus of arbor's own).
//!
//! - A host [`enqueue`](WorkQueue::enqueue)s a child run (its session must exist); `NOTIFY
//!   arbor_work` wakes idle workers at commit.
//! - A worker [`claim`](WorkQueue::claim)s runs with `FOR UPDATE SKIP LOCKED` (claimers never
//!   wait for each other's rows) under a lease that it renews by
//!   [`heartbeat`](WorkQueue::heartbeat). A run whose lease ran out is claimable again: a
//!   takeover is the next claim, with `attempt` one higher.
//! - A tree's `max_active` is enforced in the claiming transaction: the live claims of the
//!   whole tree (every depth: the contract's `maxActiveChildren` is a global count) are
//!   counted under a transaction-scoped advisory lock on its root, so two workers can never
//!   both take its last slot, whichever parents their runs have.
//! - A worker reports with [`finish`](WorkQueue::finish), which lands only while its claim
//!   holds (the same attempt, still claimed): a worker that lost its lease never reports
//!   beside the one that took over. `NOTIFY arbor_child_done` wakes the waiting parent.
//! - [`cancel`](WorkQueue::cancel) ends a queued run at once and flags a claimed one; the
//!   worker hears it at its next heartbeat.
//!
//! Lease times are the database's clock (`clock_timestamp()`), so hosts whose clocks differ
//! agree on when a lease ran out.

use std::time::Duration;

use arbor_protocol::SessionId;
use arbor_store::{StoreError, StoreResult};
use serde_json::Value;
use sqlx::postgres::{PgListener, PgRow};
use sqlx::{PgConnection, Postgres, Row, Transaction};

use crate::error::{Failure, OpResult, UNIQUE_VIOLATION, constraint, corrupt, sqlstate};
use crate::retry::{retrying, settle};
use crate::store::PostgresStore;

/// The channel that wakes idle workers.
pub const WORK_CHANNEL: &str = "arbor_work";
/// The channel that says a child run finished (its payload: the session id).
pub const DONE_CHANNEL: &str = "arbor_child_done";
/// The channel that says a child run relayed events (its payload: the session id).
pub const EVENTS_CHANNEL: &str = "arbor_child_events";

/// The database's clock in milliseconds since the Unix epoch, in SQL.
const NOW_MS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

/// A child run to hand to a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildRun {
    /// The child's session (created before it is enqueued).
    pub session: SessionId,
    /// Its parent.
    pub parent: SessionId,
    /// The tree's root.
    pub root: SessionId,
    /// What the worker needs to run it: the host's own JSON.
    pub payload: Value,
    /// The most live children of its tree at once, every depth (`None`: no limit).
    pub max_active: Option<u32>,
}

/// Where a child run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// Waiting for a worker.
    Queued,
    /// A worker holds it (or held it: see [`WorkQueue::claim`] on leases that ran out).
    Claimed,
    /// Finished; its outcome reported.
    Done,
    /// Ended in failure; its outcome reported.
    Failed,
    /// Cancelled before a worker finished it.
    Cancelled,
}

impl RunState {
    fn parse(text: &str) -> StoreResult<Self> {
        Ok(match text {
            "queued" => Self::Queued,
            "claimed" => Self::Claimed,
            "done" => Self::Done,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            other => return Err(corrupt(format_args!("child run state {other:?}"))),
        })
    }
}

/// A run a worker holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// The child's session.
    pub session: SessionId,
    /// Its parent.
    pub parent: SessionId,
    /// The tree's root.
    pub root: SessionId,
    /// What the host enqueued.
    pub payload: Value,
    /// Which claim of this run it is, from 1: above 1, a takeover (the run goes on from its
    /// store, not from scratch).
    pub attempt: u64,
}

/// What a heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The claim holds, renewed; `cancel` when someone asked for the run to stop.
    Held {
        /// The run was cancelled: stop it and [`finish`](WorkQueue::finish) it.
        cancel: bool,
    },
    /// Another worker took the run over (this one's lease ran out), or it was cancelled
    /// while queued: stop without reporting.
    Lost,
}

/// What a wake-up was for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// Work was enqueued, or a claim may have freed.
    Work,
    /// This child run finished.
    Finished(SessionId),
    /// This child run relayed events.
    Events(SessionId),
}

/// The queue of child runs on a [`PostgresStore`], as one worker (or host) sees it.
#[derive(Debug, Clone)]
pub struct WorkQueue {
    store: PostgresStore,
    /// Who claims through this handle (the host's own text: host, process, start).
    worker: String,
    lease_ms: i64,
}

impl WorkQueue {
    /// The queue of `store`, claiming as `worker` under leases of `lease` (at least 100 ms).
    pub fn new(store: &PostgresStore, worker: impl Into<String>, lease: Duration) -> Self {
        let lease_ms = i64::try_from(lease.as_millis())
            .unwrap_or(i64::MAX)
            .max(100);
        Self {
            store: store.clone(),
            worker: worker.into(),
            lease_ms,
        }
    }

    /// Queues `run`. A session whose earlier run ended (done, failed or cancelled: a
    /// suspended run resumed with its decisions, say) is queued again as a new hand-over: its
    /// next claim is a first one (`attempt` 1), not a takeover.
    /// `AlreadyExists` while a run of the session is queued or claimed, `NotFound` when it or
    /// its parent does not exist.
    pub async fn enqueue(&self, run: &ChildRun) -> StoreResult<()> {
        let payload = serde_json::to_string(&run.payload)
            .map_err(|e| StoreError::Invalid(format!("child run payload: {e}")))?;
        let max_active = run.max_active.map(i64::from);
        retrying!(&self.store, async {
            let mut tx = self.store.pool().begin().await?;
            let out: OpResult<_> = async {
                let sql = format!(
                    "INSERT INTO child_runs (session_id, parent_id, root_id, state, payload, \
                     max_active, enqueued_at, updated_at) \
                     VALUES ($1, $2, $3, 'queued', $4, $5, {NOW_MS}, {NOW_MS}) \
                     ON CONFLICT (session_id) DO UPDATE SET state = 'queued', \
                     payload = EXCLUDED.payload, max_active = EXCLUDED.max_active, owner = NULL, \
                     lease_until = NULL, outcome = NULL, cancel_requested = FALSE, attempts = 0, \
                     enqueued_at = EXCLUDED.enqueued_at, updated_at = EXCLUDED.updated_at \
                     WHERE child_runs.state IN ('done', 'failed', 'cancelled')"
                );
                let inserted = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                    .bind(run.session.to_string())
                    .bind(run.parent.to_string())
                    .bind(run.root.to_string())
                    .bind(&payload)
                    .bind(max_active)
                    .execute(&mut *tx)
                    .await;
                let already = || StoreError::AlreadyExists {
                    what: "child run",
                    id: run.session.to_string(),
                };
                match inserted {
                    // Queued or claimed already: the conflict's update did not apply.
                    Ok(done) if done.rows_affected() == 0 => return Err(already().into()),
                    Ok(_) => {}
                    Err(err) => {
                        return Err(match sqlstate(&err).as_deref() {
                            Some(UNIQUE_VIOLATION)
                                if constraint(&err) == Some("child_runs_pkey") =>
                            {
                                already().into()
                            }
                            Some(crate::error::FOREIGN_KEY_VIOLATION) => {
                                StoreError::session_not_found(run.session).into()
                            }
                            _ => err.into(),
                        });
                    }
                }
                notify(&mut tx, WORK_CHANNEL, &run.session.to_string()).await?;
                Ok(())
            }
            .await;
            settle(tx, out).await
        })
    }

    /// Claims up to `max` runs: queued ones, and claimed ones whose lease ran out (a
    /// takeover), oldest first, skipping rows another claimer holds and runs whose tree has
    /// `max_active` live claims already.
    pub async fn claim(&self, max: usize) -> StoreResult<Vec<Claim>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let scan = i64::try_from(max.saturating_mul(4).max(16)).unwrap_or(i64::MAX);
        retrying!(&self.store, async {
            let mut tx = self.store.pool().begin().await?;
            let out: OpResult<_> = async {
                let sql = format!(
                    "SELECT session_id, root_id, max_active FROM child_runs \
                     WHERE state = 'queued' OR (state = 'claimed' AND lease_until < {NOW_MS}) \
                     ORDER BY enqueued_at, session_id FOR UPDATE SKIP LOCKED LIMIT $1"
                );
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                    .bind(scan)
                    .fetch_all(&mut *tx)
                    .await?;
                let mut open = Vec::with_capacity(rows.len());
                for row in &rows {
                    let session: String = row.try_get(0)?;
                    let root: String = row.try_get(1)?;
                    let max_active: Option<i64> = row.try_get(2)?;
                    open.push((root, session, max_active));
                }
                // Trees' slot locks in one order, so claimers never wait on each other in a
                // circle.
                open.sort();
                let mut claims = Vec::new();
                let mut locked: Option<String> = None;
                for (root, session, max_active) in open {
                    if claims.len() >= max {
                        break;
                    }
                    if let Some(limit) = max_active {
                        if locked.as_deref() != Some(root.as_str()) {
                            sqlx::query("SELECT pg_advisory_xact_lock(8, hashtext($1))")
                                .bind(&root)
                                .execute(&mut *tx)
                                .await?;
                            locked = Some(root.clone());
                        }
                        if live_in(&mut tx, &root, Some(&session)).await?
                            >= u64::try_from(limit).unwrap_or(0)
                        {
                            continue;
                        }
                    }
                    let sql = format!(
                        "UPDATE child_runs SET state = 'claimed', owner = $2, \
                         lease_until = {NOW_MS} + $3, attempts = attempts + 1, updated_at = {NOW_MS} \
                         WHERE session_id = $1 \
                         RETURNING session_id, parent_id, root_id, payload, attempts"
                    );
                    let row = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                        .bind(&session)
                        .bind(&self.worker)
                        .bind(self.lease_ms)
                        .fetch_one(&mut *tx)
                        .await?;
                    claims.push(claim_from_row(&row)?);
                }
                Ok(claims)
            }
            .await;
            settle(tx, out).await
        })
    }

    /// Renews `claim`'s lease, and says whether the run was cancelled or the claim lost. A
    /// run is cancelled when someone asked ([`cancel`](Self::cancel)), and when its session,
    /// or any session above it, was deleted (a tombstone written by any process, on any host).
    pub async fn heartbeat(&self, claim: &Claim) -> StoreResult<Heartbeat> {
        let sql = format!(
            "WITH RECURSIVE chain (id, parent_id, tombstone, hops) AS ( \
               SELECT id, parent_id, tombstone, 0 FROM sessions WHERE id = $1 \
               UNION ALL \
               SELECT s.id, s.parent_id, s.tombstone, c.hops + 1 FROM sessions s \
               JOIN chain c ON s.id = c.parent_id WHERE c.hops < 64 \
             ) \
             UPDATE child_runs SET lease_until = {NOW_MS} + $4, updated_at = {NOW_MS} \
             WHERE session_id = $1 AND state = 'claimed' AND owner = $2 AND attempts = $3 \
             RETURNING cancel_requested \
               OR EXISTS (SELECT 1 FROM chain WHERE tombstone IS NOT NULL)"
        );
        retrying!(&self.store, async {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(claim.session.to_string())
                .bind(&self.worker)
                .bind(attempt(claim))
                .bind(self.lease_ms)
                .fetch_optional(self.store.pool())
                .await?;
            Ok(match row {
                Some(row) => Heartbeat::Held {
                    cancel: row.try_get(0)?,
                },
                None => Heartbeat::Lost,
            })
        })
    }

    /// Reports `claim`'s run finished (`ok`) or failed, with its outcome. `false`, writing
    /// nothing, when the claim no longer holds (taken over, or cancelled while queued).
    pub async fn finish(&self, claim: &Claim, ok: bool, outcome: &Value) -> StoreResult<bool> {
        let outcome = serde_json::to_string(outcome)
            .map_err(|e| StoreError::Invalid(format!("child run outcome: {e}")))?;
        let sql = format!(
            "UPDATE child_runs SET state = $4, outcome = $5, lease_until = NULL, \
             updated_at = {NOW_MS} \
             WHERE session_id = $1 AND state = 'claimed' AND owner = $2 AND attempts = $3"
        );
        retrying!(&self.store, async {
            let mut tx = self.store.pool().begin().await?;
            let out: OpResult<_> = async {
                let done = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                    .bind(claim.session.to_string())
                    .bind(&self.worker)
                    .bind(attempt(claim))
                    .bind(if ok { "done" } else { "failed" })
                    .bind(&outcome)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    == 1;
                if done {
                    notify(&mut tx, DONE_CHANNEL, &claim.session.to_string()).await?;
                    // Its slot is free: a worker may claim a sibling now.
                    notify(&mut tx, WORK_CHANNEL, &claim.session.to_string()).await?;
                }
                Ok(done)
            }
            .await;
            settle(tx, out).await
        })
    }

    /// Cancels a run: a queued one is `Cancelled` at once, a claimed one is flagged (its
    /// worker hears it at its next heartbeat); a finished one stays as it is. Returns the
    /// state after. `NotFound` for a session never queued.
    pub async fn cancel(&self, session: SessionId) -> StoreResult<RunState> {
        let sql = format!(
            "UPDATE child_runs SET \
             state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END, \
             cancel_requested = cancel_requested OR state = 'claimed', updated_at = {NOW_MS} \
             WHERE session_id = $1 RETURNING state"
        );
        retrying!(&self.store, async {
            let mut tx = self.store.pool().begin().await?;
            let out: OpResult<_> = async {
                let row = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                    .bind(session.to_string())
                    .fetch_optional(&mut *tx)
                    .await?
                    .ok_or_else(|| StoreError::NotFound {
                        what: "child run",
                        id: session.to_string(),
                    })?;
                let state = RunState::parse(&row.try_get::<String, _>(0)?)?;
                if state == RunState::Cancelled {
                    notify(&mut tx, DONE_CHANNEL, &session.to_string()).await?;
                }
                Ok(state)
            }
            .await;
            settle(tx, out).await
        })
    }

    /// Where `session`'s run is, with its outcome once reported; `None` if never queued.
    pub async fn state(
        &self,
        session: SessionId,
    ) -> StoreResult<Option<(RunState, Option<Value>)>> {
        retrying!(&self.store, async {
            let row = sqlx::query("SELECT state, outcome FROM child_runs WHERE session_id = $1")
                .bind(session.to_string())
                .fetch_optional(self.store.pool())
                .await?;
            let Some(row) = row else { return Ok(None) };
            let state = RunState::parse(&row.try_get::<String, _>(0)?)?;
            let outcome = row
                .try_get::<Option<String>, _>(1)?
                .map(|o| serde_json::from_str(&o))
                .transpose()
                .map_err(|e| corrupt(format_args!("child run outcome: {e}")))?;
            Ok(Some((state, outcome)))
        })
    }

    /// The tree's live children (every depth): claimed, under a lease that has not run out.
    pub async fn live(&self, root: SessionId) -> StoreResult<u64> {
        retrying!(&self.store, async {
            let mut conn = self.store.pool().acquire().await?;
            live_in(&mut conn, &root.to_string(), None).await
        })
    }

    /// Relays `events` (JSON, in order) of `claim`'s run to whoever streams them, with one
    /// notification. Nothing is written when the claim no longer holds.
    pub async fn relay(&self, claim: &Claim, events: &[Value]) -> StoreResult<()> {
        if events.is_empty() {
            return Ok(());
        }
        let mut texts = Vec::with_capacity(events.len());
        for e in events {
            texts.push(
                serde_json::to_string(e)
                    .map_err(|e| StoreError::Invalid(format!("child event: {e}")))?,
            );
        }
        retrying!(&self.store, async {
            let mut tx = self.store.pool().begin().await?;
            let out: OpResult<_> = async {
                let written = sqlx::query(
                    "INSERT INTO child_events (session_id, event) \
                     SELECT $1, e FROM UNNEST($2::TEXT[]) WITH ORDINALITY AS t(e, n) \
                     WHERE EXISTS (SELECT 1 FROM child_runs WHERE session_id = $1 \
                       AND state = 'claimed' AND owner = $3 AND attempts = $4) \
                     ORDER BY n",
                )
                .bind(claim.session.to_string())
                .bind(&texts)
                .bind(&self.worker)
                .bind(attempt(claim))
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if written > 0 {
                    notify(&mut tx, EVENTS_CHANNEL, &claim.session.to_string()).await?;
                }
                Ok(())
            }
            .await;
            settle(tx, out).await
        })
    }

    /// The events `session`'s run relayed after position `after`, in order, with their
    /// positions.
    pub async fn events_after(
        &self,
        session: SessionId,
        after: u64,
    ) -> StoreResult<Vec<(u64, Value)>> {
        retrying!(&self.store, async {
            let rows = sqlx::query(
                "SELECT seq, event FROM child_events WHERE session_id = $1 AND seq > $2 \
                 ORDER BY seq",
            )
            .bind(session.to_string())
            .bind(i64::try_from(after).unwrap_or(i64::MAX))
            .fetch_all(self.store.pool())
            .await?;
            let mut events = Vec::with_capacity(rows.len());
            for row in rows {
                let seq: i64 = row.try_get(0)?;
                let text: String = row.try_get(1)?;
                let event = serde_json::from_str(&text)
                    .map_err(|e| corrupt(format_args!("child event: {e}")))?;
                events.push((u64::try_from(seq).unwrap_or(0), event));
            }
            Ok(events)
        })
    }

    /// Forgets the events `session`'s run relayed (once its run was reported).
    pub async fn forget_events(&self, session: SessionId) -> StoreResult<()> {
        retrying!(&self.store, async {
            sqlx::query("DELETE FROM child_events WHERE session_id = $1")
                .bind(session.to_string())
                .execute(self.store.pool())
                .await?;
            Ok(())
        })
    }

    /// A listener for wake-ups: work enqueued or freed, and runs finished.
    pub async fn listen(&self) -> StoreResult<Wakeups> {
        let out: OpResult<PgListener> = async {
            let mut listener = PgListener::connect_with(self.store.pool()).await?;
            listener
                .listen_all([WORK_CHANNEL, DONE_CHANNEL, EVENTS_CHANNEL])
                .await?;
            Ok(listener)
        }
        .await;
        self.store
            .finish_op(out)
            .map(|listener| Wakeups { listener })
    }
}

/// Wake-ups from the queue's channels. A missed one is never fatal: waiters also poll.
#[derive(Debug)]
pub struct Wakeups {
    listener: PgListener,
}

impl Wakeups {
    /// The next wake-up within `within`; `None` when none came (poll then). A lost
    /// connection is reconnected by the listener, and reads as a `Work` wake-up so that
    /// the caller polls what it may have missed.
    pub async fn next(&mut self, within: Duration) -> Option<Wake> {
        match tokio::time::timeout(within, self.listener.recv()).await {
            Err(_) => None,
            Ok(Err(err)) => {
                tracing::debug!(%err, "queue listener reconnecting");
                Some(Wake::Work)
            }
            Ok(Ok(note)) if note.channel() == DONE_CHANNEL => match note.payload().parse() {
                Ok(id) => Some(Wake::Finished(id)),
                Err(_) => Some(Wake::Work),
            },
            Ok(Ok(note)) if note.channel() == EVENTS_CHANNEL => match note.payload().parse() {
                Ok(id) => Some(Wake::Events(id)),
                Err(_) => Some(Wake::Work),
            },
            Ok(Ok(_)) => Some(Wake::Work),
        }
    }
}

async fn notify(tx: &mut Transaction<'_, Postgres>, channel: &str, payload: &str) -> OpResult<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Live claims in the tree of `root` (claimed, lease not run out), `except` one session.
async fn live_in(conn: &mut PgConnection, root: &str, except: Option<&str>) -> OpResult<u64> {
    let sql = format!(
        "SELECT COUNT(*) FROM child_runs WHERE root_id = $1 AND state = 'claimed' \
         AND lease_until >= {NOW_MS} AND session_id <> COALESCE($2, '')"
    );
    let n: i64 = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
        .bind(root)
        .bind(except)
        .fetch_one(conn)
        .await?
        .try_get(0)?;
    Ok(n as u64)
}

fn attempt(claim: &Claim) -> i64 {
    i64::try_from(claim.attempt).unwrap_or(i64::MAX)
}

fn claim_from_row(row: &PgRow) -> OpResult<Claim> {
    let id = |i: usize, name: &str| -> OpResult<SessionId> {
        let text: String = row.try_get(i)?;
        text.parse()
            .map_err(|_| Failure::Store(corrupt(format_args!("child run {name}: {text:?}"))))
    };
    let payload: String = row.try_get(3)?;
    Ok(Claim {
        session: id(0, "session_id")?,
        parent: id(1, "parent_id")?,
        root: id(2, "root_id")?,
        payload: serde_json::from_str(&payload)
            .map_err(|e| corrupt(format_args!("child run payload: {e}")))?,
        attempt: row.try_get::<i64, _>(4)? as u64,
    })
}
