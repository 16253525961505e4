//! The handlers, one file per resource: [`health`] (`/healthz`, `/readyz`, `/metrics`),
//! [`runs`] (`/v1/specs`, `/v1/runs`), [`sessions`] (`/v1/sessions/...`). The routes that
//! mount them are in [`crate::app`].

pub(crate) mod approvals;
pub(crate) mod ending;
pub(crate) mod events;
pub(crate) mod feed;
pub(crate) mod headline;
pub(crate) mod health;
pub(crate) mod host;
pub(crate) mod host_views;
pub(crate) mod listing;
pub(crate) mod runs;
pub(crate) mod sessions;
pub(crate) mod tree;
pub(crate) mod tree_tools;
pub(crate) mod work;

use std::time::Duration;

/// The largest request body accepted, in bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// How long a request (other than an event stream) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
