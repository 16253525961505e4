//! SQLite backend of the arbor store.
//!
//! [`SqliteStore`] keeps every session record and transcript in one SQLite file, in WAL mode
//! with foreign keys on and a busy timeout. The schema is built by numbered migrations
//! (`migrations/NNNN_name.sql`, embedded in the binary) applied at open and tracked with
//! `PRAGMA user_version`; a file written by a newer arbor, or one that is not an arbor store,
//! is refused without being modified.
//!
//! The connection sits behind a mutex and every operation runs on tokio's blocking pool,
//! never on the runtime's own threads: a call waiting for another process's lock (up to the
//! busy timeout) leaves timers, timeouts and other tasks on time. Every write is one
//! `BEGIN IMMEDIATE` transaction, so it lands whole or not at all, also against other
//! processes using the same file. A write that cannot get the file within the busy timeout
//! fails with [`StoreError::Locked`](arbor_store::StoreError::Locked). Files arbor creates are
//! readable by their owner only (0600).
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

mod codec;
mod error;
mod open;
mod ops;
mod options;
mod perms;
mod repair;
mod schema;
mod sql;
mod store;

pub use options::{SqliteOptions, Synchronous};
pub use schema::SCHEMA_VERSION;
pub use store::SqliteStore;
