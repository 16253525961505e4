//! PostgreSQL backend of the arbor store.
//!
//! [`PostgresStore`] keeps session records, transcripts and checkpoints in a PostgreSQL
//! database that many processes share: several `arbor` hosts, a service and its workers. It
//! passes the same conformance suite as the SQLite and in-memory stores, so everything built
//! on the [`Store`](arbor_store::Store) trait (the runtime, the registry, approvals) runs on
//! it unchanged.
//!
//! - **Schema.** Numbered migrations (`migrations/NNNN_name.sql`, embedded in the binary) are
//!   applied at connect inside one transaction holding an advisory lock, and recorded in
//!   `arbor_migrations`; a schema written by a newer arbor, or a `sessions` table that is not
//!   an arbor store's, is refused untouched. [`PostgresOptions::schema`] keeps the tables in a
//!   schema of their own, so stores can share a database.
//! - **Writes.** Each write is one transaction that locks the rows it reads before changing
//!   them, so it lands whole or not at all, also against other processes; a transaction that
//!   PostgreSQL aborts to break a deadlock is run again, and so is an operation whose
//!   connection was lost before it committed (the server restarted or failed over): an
//!   outage shorter than the acquire timeout is ridden out. Uniqueness (ids, sibling names,
//!   checkpoint keys) is enforced by the database's own constraints.
//! - **Credentials** come from the URL (or the environment the caller reads it from); the
//!   password is never stored and never shown: errors name the server as
//!   [`PostgresStore::server`] does, without it.
//! - **Driver.** sqlx (runtime queries, no compile-time macros, so building needs no
//!   database), with its pool and rustls for `sslmode=require`.
//!
//! ```no_run
//! use arbor_store::{SessionRecord, Store};
//! use arbor_store_postgres::{PostgresOptions, PostgresStore};
//!
//! # async fn demo() -> Result<(), arbor_store::StoreError> {
//! let url = std::env::var("ARBOR_STORE_URL").unwrap_or_default();
//! let store = PostgresStore::connect(&url).await?;
//! let root = SessionRecord::new_root("root", "planner", "model-a");
//! store.create_session(&root).await?;
//! assert_eq!(store.session(root.id).await?.map(|r| r.name), Some("root".to_owned()));
//!
//! // Another deployment's tables, in the same database.
//! let other = PostgresOptions::new()
//!     .schema("team_b")
//!     .max_connections(4)
//!     .connect(&url)
//!     .await?;
//! # let _ = other;
//! # Ok(())
//! # }
//! ```

mod census;
mod codec;
mod error;
mod migrate;
mod options;
mod queue;
mod retry;
mod store;

pub use error::redacted_url;
pub use migrate::SCHEMA_VERSION;
pub use options::PostgresOptions;
pub use queue::{
    ChildRun, Claim, DONE_CHANNEL, EVENTS_CHANNEL, Heartbeat, RunState, WORK_CHANNEL, Wake,
    Wakeups, WorkQueue,
};
pub use store::PostgresStore;
