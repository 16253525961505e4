//! SQLite backend of the arbor store.
//!
//! [`SqliteStore`] keeps every session record and transcript in one SQLite file, in WAL mode
//! with foreign keys on and a busy timeout. The schema is built by numbered migrations
//! (`migrations/NNNN_name.sql`, embedded in the binary) applied at open and tracked with
//! `PRAGMA user_version`; a file written by a newer arbor, or one that is not an arbor store,
//! is refused without being modified.
//!
//! The writer's connection sits behind a mutex. A file opened read-write has a second
//! connection that only reads: a read runs on the writer's connection when that is free (its
//! page cache is warm), else on the reader, so reads never wait for a batch of writes being
//! committed, nor it for them (WAL mode: a read sees every write reported stored, never one
//! half done). An operation runs on the calling thread when the
//! connection and the file are free (SQLite work on an uncontended file takes microseconds),
//! and on tokio's blocking pool when it has to wait for another process's lock (up to the
//! busy timeout), so timers, timeouts and other tasks stay on time. Every write is part of
//! one `BEGIN IMMEDIATE` transaction, so it lands whole or not at all, also against other
//! processes using the same file; writes that wait at the same moment (the children of a
//! fan-out, the roots of a busy service) share one transaction and one commit, each in its
//! own savepoint, and each is reported stored only once that commit has landed
//! ([`SqliteStore::write_stats`] says how many commits carried how many writes). A write
//! that cannot get the file within the busy timeout fails with
//! [`StoreError::Locked`](arbor_store::StoreError::Locked). Files arbor creates are readable
//! by their owner only (0600).
//!
//! ```no_run
//! use std::time::Duration;
//! use arbor_store_sqlite::{SqliteOptions, SqliteStore, Synchronous};
//!
//! # fn main() -> Result<(), arbor_store::StoreError> {
//! let store = SqliteStore::open("state/arbor.db")?;
//! let durable = SqliteOptions::new()
//!     .busy_timeout(Duration::from_secs(1))
//!     .synchronous(Synchronous::Full)
//!     .open("state/other.db")?;
//! # let _ = (store, durable);
//! # Ok(())
//! # }
//! ```

mod batch;
mod codec;
mod error;
mod exec;
mod open;
mod ops;
mod options;
mod perms;
mod repair;
mod schema;
mod sql;
mod store;
mod tx;

pub use batch::WriteStats;
pub use options::{CHECKPOINT_PAGES, SqliteOptions, Synchronous};
pub use schema::SCHEMA_VERSION;
pub use store::SqliteStore;
