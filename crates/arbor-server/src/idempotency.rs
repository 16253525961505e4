//! `Idempotency-Key` on `POST /v1/runs`: a client that retries a start (its connection
//! dropped, its process restarted) with the same key gets the run the first request started,
//! never a second one.
//!
//! The key is claimed in the store before anything starts (store namespace
//! [`NAMESPACE`], keyed by a hash of the tenant and the key, compare-and-swap from nothing):
//! the claim names the root's id, chosen then, and a fingerprint of the request. The run is
//! created with that id, so however the claims and the starts interleave, across requests and
//! processes, the store's unique ids let one root exist for a key. A retry with the same
//! request answers with that run (`200`); with another request under the same key, `409`.
//! A start that fails outright (a bad spec, say) gives the key back.

use arbor_protocol::{SessionId, Timestamp};
use arbor_store::{Store, StoreError};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{ApiError, ApiResult, ErrorKind};

/// The store namespace of claimed keys.
pub const NAMESPACE: &str = "idempotency";
/// The header.
pub const HEADER: &str = "idempotency-key";
/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 255;

/// A claimed key, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claim {
    /// The root the key's run has (or will have).
    root: SessionId,
    /// A fingerprint of the request that claimed it.
    request: String,
    /// When it was claimed (ms since the epoch).
    at: Timestamp,
}

/// What a request with a key does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claimed {
    /// The key is this request's: start the run as `root`.
    Start(SessionId),
    /// An earlier request with the key claimed `root`: answer with its run (starting it,
    /// as `root`, if that request died before it could).
    Replay(SessionId),
}

/// The request's key, if it carries one (checked: 1 to 255 visible ASCII characters).
pub(crate) fn key_of(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(value) = headers.get(HEADER) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::field(
            "Idempotency-Key",
            format!("Idempotency-Key must be 1 to {MAX_KEY_BYTES} visible ASCII characters"),
        )
    };
    let text = value.to_str().map_err(|_| bad())?;
    if text.is_empty()
        || text.len() > MAX_KEY_BYTES
        || !text.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
    {
        return Err(bad());
    }
    Ok(Some(text.to_owned()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Claims `key` for `tenant`'s request `fingerprint` (see the module doc).
pub(crate) async fn claim(
    store: &dyn Store,
    tenant: &str,
    key: &str,
    fingerprint: &str,
) -> ApiResult<Claimed> {
    let slot = hex(&Sha256::digest(format!("{tenant}\n{key}").as_bytes()));
    for _ in 0..4 {
        if let Some(c) = store.checkpoint(NAMESPACE, &slot).await? {
            let claim: Claim = serde_json::from_value(c.value)
                .map_err(|e| ApiError::internal(&format!("an idempotency claim: {e}")))?;
            if claim.request != fingerprint {
                return Err(ApiError::new(
                    ErrorKind::Conflict,
                    "This Idempotency-Key was used for another request: use a new key for a \
                     new run",
                ));
            }
            return Ok(Claimed::Replay(claim.root));
        }
        let claim = Claim {
            root: SessionId::new(),
            request: fingerprint.to_owned(),
            at: Timestamp::now(),
        };
        let value = serde_json::to_value(&claim)
            .map_err(|e| ApiError::internal(&format!("an idempotency claim: {e}")))?;
        match store.put_checkpoint(NAMESPACE, &slot, &value, 0).await {
            Ok(_) => return Ok(Claimed::Start(claim.root)),
            // Claimed meanwhile by another request: read its claim.
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::new(
        ErrorKind::Conflict,
        "This Idempotency-Key is being claimed by another request: retry",
    ))
}

/// Gives `key` back after its start failed outright, so a corrected retry can start.
pub(crate) async fn release(store: &dyn Store, tenant: &str, key: &str) {
    let slot = hex(&Sha256::digest(format!("{tenant}\n{key}").as_bytes()));
    if let Ok(Some(c)) = store.checkpoint(NAMESPACE, &slot).await
        && let Err(e) = store.delete_checkpoint(NAMESPACE, &slot, c.version).await
    {
        tracing::warn!(error = %e, "an idempotency key could not be given back");
    }
}

/// The fingerprint of a start request: what must be the same for a retry.
pub(crate) fn fingerprint(parts: &[Option<&str>]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        match p {
            Some(text) => {
                h.update([1u8]);
                h.update((text.len() as u64).to_le_bytes());
                h.update(text.as_bytes());
            }
            None => h.update([0u8]),
        }
    }
    hex(&h.finalize())
}
