//! Storage for arbor.
//!
//! [`Store`] is the one trait every backend implements: session records (with a version for
//! compare-and-swap updates) and their append-only transcripts. [`MemoryStore`] is the
//! in-memory backend (the library's default); `arbor-store-sqlite` is the embedded durable one
//! and `arbor-store-postgres` the shared one, both storing a record as the [`row::SessionRow`]
//! this crate defines, so they decode (and refuse damaged rows) alike.
//! With the `conformance` feature, the `conformance` module holds the suite every backend's
//! tests run, so the backends cannot drift apart; with the `testing` feature, the `testing`
//! module holds a store wrapper that holds or fails one chosen write, for tests that force a
//! fault.

mod error;
mod memory;
mod meta;
mod meta_field;
mod page;
mod record;
pub mod row;
mod store;

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "testing")]
pub mod testing;

pub use error::{StoreError, StoreErrorKind};
pub use memory::MemoryStore;
pub use meta::Meta;
pub use page::{MAX_PAGE_ROOTS, RootPage, meta_key_is_valid};
pub use record::{
    Attribution, AttributionTarget, Checkpoint, SessionQuery, SessionRecord, SessionUpdate,
    StatusCount, Tombstone, census_key_is_valid,
};
pub use store::{Store, StoreResult};
