//! Group commit: the writes that wait at the same moment share one transaction and one
//! commit.
//!
//! A write on a tokio runtime is queued, and the first write of a batch spawns a flush task.
//! Every write that becomes ready before that task runs (the other children of a fan-out,
//! the other roots of a busy service) joins the queue; the flush runs them all in one
//! `BEGIN IMMEDIATE` transaction, each inside its own savepoint so that one refused write
//! (a conflict, a taken name) is rolled back alone, commits once, and only then answers each
//! caller. A write is reported stored only once its commit has landed, so what the store
//! reports survives a SIGKILL as before; it only shares its commit.
//!
//! Where the flush runs follows the store's rule (see [`SqliteStore`](crate::SqliteStore)):
//! on the runtime's thread with no busy wait when the connection and the file are free, else
//! on the blocking pool with the busy timeout. The flush is a task of its own: a caller that
//! stops waiting (a timeout, a cancelled run) never strands the writes queued behind it, and
//! its own write still lands or fails whole. The flush being a task, a write awaited on a
//! runtime needs that runtime to run its tasks meanwhile (as `Runtime::block_on` and every
//! worker thread do; a thread blocked in `futures::executor::block_on` on a current-thread
//! runtime would wait for ever).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use arbor_store::{StoreError, StoreErrorKind, StoreResult};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::error::{SqlResultExt, unavailable};
use crate::tx::{Begin, Tx};

/// What a write is: its work inside the transaction it is given.
pub(crate) type WriteFn<T> = dyn Fn(&Connection, &str) -> StoreResult<T> + Send;

/// How one queued write went inside a batch's transaction.
enum Step {
    /// Done; its changes stay in the transaction.
    Done,
    /// Refused (its own error kept); its changes were rolled back to its savepoint.
    Refused,
    /// The file is busy: the whole batch runs again where it may wait.
    Busy,
    /// The transaction cannot go on: it is rolled back whole.
    Abort(StoreError),
}

/// How a batch ended.
enum End {
    Committed,
    Busy,
    Failed(StoreError),
}

/// A queued write, its result type erased.
trait Job: Send {
    /// Runs the write in `tx`, inside a savepoint when `alone` is false.
    fn run(&mut self, tx: &Tx<'_>, path: &str, alone: bool) -> Step;
    /// Answers the caller: its own result if the batch committed or it was refused, else
    /// the batch's error.
    fn answer(&mut self, failed: Option<&StoreError>);
}

struct Queued<T> {
    write: Box<WriteFn<T>>,
    result: Option<StoreResult<T>>,
    reply: Option<oneshot::Sender<StoreResult<T>>>,
}

impl<T: Send> Job for Queued<T> {
    fn run(&mut self, tx: &Tx<'_>, path: &str, alone: bool) -> Step {
        self.result = None;
        if !alone && let Err(e) = tx.savepoint(path) {
            return Step::Abort(e);
        }
        let result = (self.write)(tx, path);
        let step = match &result {
            Err(e) if e.kind() == StoreErrorKind::Locked => Step::Busy,
            // Alone, a refused write ends the transaction: nothing of it is kept.
            Err(e) if alone => Step::Abort(e.clone()),
            Err(_) => match tx.roll_back_to_savepoint(path) {
                Ok(()) => Step::Refused,
                Err(e) => Step::Abort(e),
            },
            Ok(_) if alone => Step::Done,
            Ok(_) => match tx.release(path) {
                Ok(()) => Step::Done,
                Err(e) => Step::Abort(e),
            },
        };
        self.result = Some(result);
        step
    }

    fn answer(&mut self, failed: Option<&StoreError>) {
        let Some(reply) = self.reply.take() else {
            return;
        };
        let result = match (self.result.take(), failed) {
            // Its own refusal stands whatever became of the batch.
            (Some(Err(own)), _) => Err(own),
            (_, Some(failed)) => Err(failed.clone()),
            (Some(Ok(value)), None) => Ok(value),
            (None, None) => Err(StoreError::Corrupt(
                "a batched write was never run".to_owned(),
            )),
        };
        // The caller may have stopped waiting: its write landed (or not) all the same.
        let _ = reply.send(result);
    }
}

/// The queue of writes waiting for the next commit.
#[derive(Default)]
pub(crate) struct Batcher {
    queue: Mutex<Vec<Box<dyn Job>>>,
    /// A flush task is spawned and has not yet seen the queue empty.
    scheduled: AtomicBool,
    /// Batches committed, and the writes they held.
    commits: AtomicU64,
    writes: AtomicU64,
}

/// How a store's writes were committed (see [`SqliteStore::write_stats`](crate::SqliteStore::write_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteStats {
    /// Batched writes committed (a refused write rolled back inside a batch included).
    pub writes: u64,
    /// Commits that carried them.
    pub commits: u64,
}

impl Batcher {
    /// The writes and commits of the batches so far.
    pub(crate) fn stats(&self) -> WriteStats {
        WriteStats {
            writes: self.writes.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
        }
    }

    fn committed(&self, writes: usize) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.writes
            .fetch_add(u64::try_from(writes).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a flush needs of the store.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) conn: Arc<Mutex<Connection>>,
    pub(crate) path: Arc<str>,
    pub(crate) busy_timeout: Duration,
    /// Whether a batch is tried on the runtime's thread first.
    pub(crate) inline_first: bool,
    pub(crate) batcher: Arc<Batcher>,
}

impl Shared {
    /// Queues `write` for the next commit on `runtime` and waits for its result.
    pub(crate) async fn write<T: Send + 'static>(
        &self,
        runtime: &tokio::runtime::Handle,
        write: Box<WriteFn<T>>,
    ) -> StoreResult<T> {
        let (reply, answer) = oneshot::channel();
        lock(&self.batcher.queue).push(Box::new(Queued {
            write,
            result: None,
            reply: Some(reply),
        }));
        if !self.batcher.scheduled.swap(true, Ordering::AcqRel) {
            runtime.spawn(self.clone().flush());
        }
        answer.await.unwrap_or_else(|_| {
            Err(unavailable(
                &self.path,
                "the store operation did not run (its runtime is shutting down)",
            ))
        })
    }

    /// Commits batches until the queue is empty.
    async fn flush(self) {
        // Dropped unfinished (the runtime shutting down): the next write schedules anew.
        let mut scheduled = Scheduled(Some(self.clone()));
        loop {
            let mut jobs = std::mem::take(&mut *lock(&self.batcher.queue));
            if jobs.is_empty() {
                self.batcher.scheduled.store(false, Ordering::Release);
                // A write queued after the take but before the flag fell found it set.
                if lock(&self.batcher.queue).is_empty()
                    || self.batcher.scheduled.swap(true, Ordering::AcqRel)
                {
                    scheduled.0 = None;
                    return;
                }
                continue;
            }
            tracing::trace!(writes = jobs.len(), "one commit for a batch of writes");
            if self.inline_first
                && let Some(conn) = try_lock(&self.conn)
            {
                // Never wait for another connection here: a busy file sends it to the pool.
                let end = match conn.busy_timeout(Duration::ZERO).at(&self.path) {
                    Ok(()) => run(&conn, &self.path, &mut jobs),
                    Err(e) => End::Failed(e),
                };
                drop(conn);
                if !matches!(end, End::Busy) {
                    if matches!(end, End::Committed) {
                        self.batcher.committed(jobs.len());
                    }
                    answer(&mut jobs, &end, &self.path);
                    continue;
                }
            }
            let (conn, path, busy_timeout, batcher) = (
                self.conn.clone(),
                self.path.clone(),
                self.busy_timeout,
                self.batcher.clone(),
            );
            let pooled = tokio::task::spawn_blocking(move || {
                let conn = lock(&conn);
                let end = match conn.busy_timeout(busy_timeout).at(&path) {
                    Ok(()) => run(&conn, &path, &mut jobs),
                    Err(e) => End::Failed(e),
                };
                if matches!(end, End::Committed) {
                    batcher.committed(jobs.len());
                }
                answer(&mut jobs, &end, &path);
            })
            .await;
            if let Err(e) = pooled {
                // Its callers hear that their writes did not run (their replies dropped).
                tracing::warn!(error = %e, "a batch of store writes did not finish on the pool");
            }
        }
    }
}

/// Clears [`Batcher::scheduled`] when a flush is dropped before it saw the queue empty (its
/// runtime went away, or a write panicked), and schedules a new flush for the writes still
/// queued, so none waits for the next write to come along.
struct Scheduled(Option<Shared>);

impl Drop for Scheduled {
    fn drop(&mut self) {
        let Some(shared) = self.0.take() else {
            return;
        };
        tracing::debug!("a flush ended before its queue was empty");
        shared.batcher.scheduled.store(false, Ordering::Release);
        if !lock(&shared.batcher.queue).is_empty()
            && !shared.batcher.scheduled.swap(true, Ordering::AcqRel)
        {
            match tokio::runtime::Handle::try_current() {
                // A runtime shutting down cancels it at once: its writers are gone too.
                Ok(runtime) => drop(runtime.spawn(shared.flush())),
                Err(_) => shared.batcher.scheduled.store(false, Ordering::Release),
            }
        }
    }
}

fn try_lock(conn: &Mutex<Connection>) -> Option<MutexGuard<'_, Connection>> {
    match conn.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Runs `jobs` in one transaction and commits it.
fn run(conn: &Connection, path: &str, jobs: &mut [Box<dyn Job>]) -> End {
    let tx = match Tx::begin(conn, Begin::Immediate, path) {
        Ok(tx) => tx,
        Err(e) if e.kind() == StoreErrorKind::Locked => return End::Busy,
        Err(e) => return End::Failed(e),
    };
    let alone = jobs.len() == 1;
    for job in jobs.iter_mut() {
        match job.run(&tx, path, alone) {
            Step::Done | Step::Refused => {}
            // Dropping the transaction rolls it back.
            Step::Busy => return End::Busy,
            Step::Abort(e) => return End::Failed(e),
        }
    }
    match tx.commit(path) {
        Ok(()) => End::Committed,
        Err(e) if e.kind() == StoreErrorKind::Locked => End::Busy,
        Err(e) => End::Failed(e),
    }
}

/// Answers every job of a batch that ended with `end`.
fn answer(jobs: &mut [Box<dyn Job>], end: &End, path: &str) {
    let busy;
    let failed = match end {
        End::Committed => None,
        End::Failed(e) => Some(e),
        End::Busy => {
            busy = StoreError::Locked {
                path: path.to_owned(),
            };
            Some(&busy)
        }
    };
    for job in jobs {
        job.answer(failed);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn shared() -> Shared {
        let conn =
            crate::open::connect_in_memory(":memory:", &crate::options::SqliteOptions::default())
                .unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER NOT NULL)")
            .unwrap();
        Shared {
            conn: Arc::new(Mutex::new(conn)),
            path: ":memory:".into(),
            busy_timeout: Duration::from_secs(1),
            inline_first: true,
            batcher: Arc::default(),
        }
    }

    fn insert(n: i64) -> Box<WriteFn<()>> {
        Box::new(move |tx, path| {
            tx.execute("INSERT INTO t (n) VALUES (?1)", [n])
                .at(path)
                .map(drop)
        })
    }

    /// A write that panics takes its batch down with it: its caller and its batch's hear
    /// that their writes did not run, and a write queued while that batch ran still lands
    /// without waiting for another write to come along.
    #[tokio::test(flavor = "current_thread")]
    async fn a_panicking_write_strands_nobody_queued_behind_it() {
        let store = shared();
        let runtime = tokio::runtime::Handle::current();
        // The panicking write first queues another, as a writer on another thread would
        // while the batch runs.
        let (reply, queued) = oneshot::channel();
        let reply = Mutex::new(Some(reply));
        let batcher = store.batcher.clone();
        let boom: Box<WriteFn<()>> = Box::new(move |_, _| {
            if let Some(reply) = lock(&reply).take() {
                lock(&batcher.queue).push(Box::new(Queued {
                    write: insert(2),
                    result: None,
                    reply: Some(reply),
                }));
            }
            panic!("a bug in a write")
        });
        let (first, second) = (store.clone(), store.clone());
        let (rt1, rt2) = (runtime.clone(), runtime);
        let a = tokio::spawn(async move { first.write(&rt1, boom).await });
        let b = tokio::spawn(async move { second.write(&rt2, insert(1)).await });
        let all = async { (a.await.unwrap(), b.await.unwrap(), queued.await.unwrap()) };
        let (a, b, c) = tokio::time::timeout(Duration::from_secs(10), all)
            .await
            .expect("a write was stranded");
        assert!(a.unwrap_err().to_string().contains("did not run"));
        assert!(b.unwrap_err().to_string().contains("did not run"));
        c.unwrap();
        let rows: Vec<i64> = {
            let conn = lock(&store.conn);
            let mut stmt = conn.prepare("SELECT n FROM t ORDER BY n").unwrap();
            stmt.query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        assert_eq!(
            rows,
            [2],
            "the panicking batch rolled back; the next one landed"
        );
    }
}
