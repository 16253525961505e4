//! Integration tests of arbor-core, driven by the scripted provider.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod suite;
