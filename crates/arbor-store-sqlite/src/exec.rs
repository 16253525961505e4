//! Where a store operation runs: on the calling thread when its connection is free, else on
//! tokio's blocking pool; reads on the writer's connection or the reader's; writes through
//! the group commit of [`crate::batch`]. See [`crate::store`]'s module docs for the rules.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

use arbor_store::{StoreError, StoreErrorKind, StoreResult};
use rusqlite::Connection;

use crate::error::{SqlResultExt, unavailable};
use crate::store::SqliteStore;
use crate::tx::{Begin, Tx};

impl SqliteStore {
    /// Runs `f` on the connection: on this thread without waiting if nothing is busy, else
    /// on tokio's blocking pool (see the module docs). `f` may run twice: its first try is
    /// rolled back when it meets a busy file.
    pub(crate) async fn call<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: Fn(&mut Connection, &str) -> StoreResult<T> + Send + 'static,
    {
        self.run(self.shared.inline_first, f).await
    }

    /// [`call`](Self::call) for `f` that only reads. On the writer's connection if it is free
    /// at once (its page cache holds what was just written); else, while a batch is being
    /// committed on it, on the reader connection where there is one, which never waits for
    /// that batch: a write is reported only once committed, and a read transaction begun
    /// after that sees it.
    pub(crate) async fn call_read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: Fn(&mut Connection, &str) -> StoreResult<T> + Send + 'static,
    {
        let Some(reader) = &self.reader else {
            return self.call(f).await;
        };
        if self.shared.inline_first
            && tokio::runtime::Handle::try_current().is_ok()
            && let Some(mut conn) = try_lock(&self.shared.conn)
        {
            conn.busy_timeout(Duration::ZERO).at(&self.shared.path)?;
            match f(&mut conn, &self.shared.path) {
                Err(err) if err.kind() == StoreErrorKind::Locked => {}
                out => return out,
            }
        }
        self.run_on(reader, self.shared.inline_first, f).await
    }

    /// [`call`](Self::call), trying this thread first only if `inline_first`.
    pub(crate) async fn run<T, F>(&self, inline_first: bool, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: Fn(&mut Connection, &str) -> StoreResult<T> + Send + 'static,
    {
        self.run_on(&self.shared.conn, inline_first, f).await
    }

    /// [`run`](Self::run) on `conn`.
    pub(crate) async fn run_on<T, F>(
        &self,
        conn: &Arc<Mutex<Connection>>,
        inline_first: bool,
        f: F,
    ) -> StoreResult<T>
    where
        T: Send + 'static,
        F: Fn(&mut Connection, &str) -> StoreResult<T> + Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            let mut conn = lock(conn);
            conn.busy_timeout(self.shared.busy_timeout)
                .at(&self.shared.path)?;
            return f(&mut conn, &self.shared.path);
        };
        if inline_first && let Some(mut conn) = try_lock(conn) {
            // Never wait for another connection here: a busy file sends `f` to the pool.
            conn.busy_timeout(Duration::ZERO).at(&self.shared.path)?;
            match f(&mut conn, &self.shared.path) {
                Err(err) if err.kind() == StoreErrorKind::Locked => {}
                out => return out,
            }
        }
        let conn = Arc::clone(conn);
        let path = Arc::clone(&self.shared.path);
        let busy_timeout = self.shared.busy_timeout;
        let job = move || {
            let mut conn = lock(&conn);
            conn.busy_timeout(busy_timeout).at(&path)?;
            f(&mut conn, &path)
        };
        match runtime.spawn_blocking(job).await {
            Ok(out) => out,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(err) => Err(unavailable(
                &self.shared.path,
                format_args!("the store operation did not run: {err}"),
            )),
        }
    }

    /// Runs `f` in one transaction of `behavior`, committed only if `f` succeeds.
    pub(crate) async fn transaction<T, F>(&self, begin: Begin, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: Fn(&Connection, &str) -> StoreResult<T> + Send + 'static,
    {
        self.call(move |conn, path| {
            let tx = Tx::begin(conn, begin, path)?;
            let out = f(&tx, path)?;
            tx.commit(path)?;
            Ok(out)
        })
        .await
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction, committed only if `f` succeeds.
    pub(crate) async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: Fn(&Connection, &str) -> StoreResult<T> + Send + 'static,
    {
        if self.read_only {
            return Err(StoreError::Invalid(format!(
                "store {} is open read-only: it cannot be written",
                self.shared.path
            )));
        }
        match tokio::runtime::Handle::try_current() {
            // Writes waiting at the same moment share one commit.
            Ok(runtime) => self.shared.write(&runtime, Box::new(f)).await,
            Err(_) => self.transaction(Begin::Immediate, f).await,
        }
    }

    /// Runs `f` in one read transaction, so its statements see one snapshot.
    pub(crate) async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: Fn(&Connection, &str) -> StoreResult<T> + Send + 'static,
    {
        self.call_read(move |conn, path| {
            let tx = Tx::begin(conn, Begin::Deferred, path)?;
            let out = f(&tx, path)?;
            tx.commit(path)?;
            Ok(out)
        })
        .await
    }
}

// A panic inside an operation drops its transaction, which rolls back: the connection is
// usable even if the lock is poisoned.
fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    conn.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The connection if no other operation holds it.
fn try_lock(conn: &Mutex<Connection>) -> Option<MutexGuard<'_, Connection>> {
    match conn.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}
