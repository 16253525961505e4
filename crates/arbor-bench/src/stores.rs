//! Where a run keeps its sessions: in memory, in a SQLite file in a temporary folder, or in a
//! PostgreSQL schema of its own (on the server `ARBOR_BENCH_POSTGRES_URL` names, else
//! `ARBOR_STORE_URL`), dropped after the run; `ARBOR_BENCH_POSTGRES_ASYNC_COMMIT=1` commits
//! without waiting for the server's disk (`PostgresOptions::synchronous_commit(false)`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use arbor_store::{MemoryStore, Store};
use arbor_store_postgres::{PostgresOptions, PostgresStore};
use arbor_store_sqlite::SqliteStore;

use crate::counted::{Counted, Counts};

/// The environment variable naming the PostgreSQL server of `--store postgres`.
pub(crate) const POSTGRES_URL_ENV: &str = "ARBOR_BENCH_POSTGRES_URL";

/// The PostgreSQL server to measure on: [`POSTGRES_URL_ENV`], else `ARBOR_STORE_URL`; the
/// error says that `option` needs one.
pub(crate) fn postgres_url(option: &str) -> Result<String, String> {
    std::env::var(POSTGRES_URL_ENV)
        .or_else(|_| std::env::var("ARBOR_STORE_URL"))
        .map_err(|_| format!("{option} needs a PostgreSQL server: set {POSTGRES_URL_ENV}"))
}

/// A run's store, and what is removed after it.
#[derive(Debug)]
pub(crate) struct BenchStore {
    pub(crate) store: Arc<dyn Store>,
    /// Its calls so far, when counted (see [`StoreKind::open_counted`]).
    pub(crate) counts: Option<Arc<Counts>>,
    _dir: Option<tempfile::TempDir>,
    /// The PostgreSQL store and its schema, dropped by [`close`](Self::close).
    postgres: Option<(PostgresStore, String)>,
    /// The SQLite store, for its commit counts.
    sqlite: Option<Arc<SqliteStore>>,
}

impl BenchStore {
    /// The writes and commits of a SQLite store so far (group commit shares one commit
    /// between the writes that wait at the same moment); `None` on the other stores.
    pub(crate) fn write_stats(&self) -> Option<arbor_store_sqlite::WriteStats> {
        self.sqlite.as_ref().map(|s| s.write_stats())
    }

    /// Removes what the run left on a server (a PostgreSQL schema); a file goes with `self`.
    pub(crate) async fn close(self) -> Result<(), String> {
        if let Some((store, schema)) = self.postgres {
            store
                .drop_schema(&schema)
                .await
                .map_err(|e| format!("postgres: {e}"))?;
            store.close().await;
        }
        Ok(())
    }
}

/// The store kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreKind {
    Memory,
    Sqlite,
    Postgres,
}

impl StoreKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Sqlite => "sqlite",
            StoreKind::Postgres => "postgres",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "memory" => Some(StoreKind::Memory),
            "sqlite" => Some(StoreKind::Sqlite),
            "postgres" => Some(StoreKind::Postgres),
            _ => None,
        }
    }

    /// Whether it keeps its sessions durably (so costs a write per store call).
    pub(crate) fn durable(self) -> bool {
        self != StoreKind::Memory
    }

    /// A fresh, empty store: in memory, a SQLite file (WAL, the CLI's settings), or a new
    /// schema on the PostgreSQL server.
    pub(crate) async fn open(self) -> Result<BenchStore, String> {
        let mut bench = BenchStore {
            store: Arc::new(MemoryStore::new()),
            counts: None,
            _dir: None,
            postgres: None,
            sqlite: None,
        };
        match self {
            StoreKind::Memory => {}
            StoreKind::Sqlite => {
                let dir = tempfile::tempdir().map_err(|e| format!("temporary folder: {e}"))?;
                let store = SqliteStore::open(dir.path().join("bench.db"))
                    .map_err(|e| format!("sqlite: {e}"))?;
                let store = Arc::new(store);
                bench.store = store.clone();
                bench.sqlite = Some(store);
                bench._dir = Some(dir);
            }
            StoreKind::Postgres => {
                let url = postgres_url("--store postgres")?;
                static NEXT: AtomicU32 = AtomicU32::new(0);
                let schema = format!(
                    "arbor_bench_{}_{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                );
                let mut options = PostgresOptions::new();
                if std::env::var("ARBOR_BENCH_POSTGRES_ASYNC_COMMIT").is_ok_and(|v| v == "1") {
                    options = options.synchronous_commit(false);
                }
                let store = options
                    .schema(&schema)
                    .max_connections(40)
                    .connect(&url)
                    .await
                    .map_err(|e| format!("postgres: {e}"))?;
                bench.store = Arc::new(store.clone());
                bench.postgres = Some((store, schema));
            }
        }
        Ok(bench)
    }

    /// [`open`](Self::open), its calls counted. The wrapper costs an allocation per call,
    /// so timed runs never use it.
    pub(crate) async fn open_counted(self) -> Result<BenchStore, String> {
        let mut bench = self.open().await?;
        let counts = Arc::new(Counts::default());
        bench.store = Arc::new(Counted::new(bench.store, counts.clone()));
        bench.counts = Some(counts);
        Ok(bench)
    }
}
