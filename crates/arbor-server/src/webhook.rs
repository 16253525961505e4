//! Webhooks, for hosts that cannot hold a stream: each event of a tenant's feed (see
//! [`crate::feed`]) is `POST`ed to the tenant's URL, in order, as the JSON of its
//! [`FeedEntry`], with
//!
//! - `X-Arbor-Event-Id: <tenant>:<seq>` (the same on a retry: a receiver drops repeats by it),
//! - `X-Arbor-Event: <type>`,
//! - `X-Arbor-Signature: sha256=<hex>`, the HMAC-SHA256 of the body under the tenant's
//!   secret.
//!
//! A 2xx answer delivers it; anything else (or no answer within [`SEND_TIMEOUT`]) is retried
//! with backoff from [`FIRST_BACKOFF`] doubling to [`MAX_BACKOFF`], so each event arrives at
//! least once. How far a tenant's webhook has got is kept in the store (namespace
//! `arbor.webhook`), so a restart goes on where it stopped; a webhook configured anew starts
//! at the feed's end.

use std::sync::Arc;
use std::time::Duration;

use arbor_store::{Store, StoreErrorKind};
use hmac::{KeyInit, Mac};
use tokio_util::sync::CancellationToken;

use crate::feed::{Feed, FeedEntry};

/// The namespace of each tenant's delivery cursor.
pub const WEBHOOK_NAMESPACE: &str = "arbor.webhook";
/// The first wait after a failed delivery.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait between attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long one delivery may take.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How often an idle deliverer looks for new events.
const IDLE: Duration = Duration::from_millis(250);

/// Where one tenant's events go, and the secret that signs them.
#[derive(Clone)]
pub struct WebhookTarget {
    tenant: String,
    url: String,
    secret: Arc<[u8]>,
}

impl std::fmt::Debug for WebhookTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookTarget")
            .field("tenant", &self.tenant)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl WebhookTarget {
    /// `tenant`'s events to `url` (`http://` or `https://`), signed with `secret` (at least
    /// 16 bytes). The error says which is wrong.
    pub fn new(
        tenant: impl Into<String>,
        url: impl Into<String>,
        secret: impl AsRef<[u8]>,
    ) -> Result<Self, String> {
        let url = url.into();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "webhook url {url:?} must start with http:// or https://"
            ));
        }
        if secret.as_ref().len() < 16 {
            return Err("a webhook secret is at least 16 bytes".to_owned());
        }
        Ok(Self {
            tenant: tenant.into(),
            url,
            secret: Arc::from(secret.as_ref()),
        })
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
}

/// `sha256=<hex>`: the HMAC-SHA256 of `body` under `secret`, as `X-Arbor-Signature` carries
/// it.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let Ok(mut mac) = hmac::Hmac::<hmac_sha2::Sha256>::new_from_slice(secret) else {
        // HMAC takes a key of any length.
        return String::new();
    };
    mac.update(body);
    let bytes = mac.finalize().into_bytes();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Where the tenant's deliveries stand: the last event delivered and the cursor's version.
async fn cursor(store: &dyn Store, feed: &Feed, tenant: &str) -> Option<(u64, u64)> {
    match store.checkpoint(WEBHOOK_NAMESPACE, tenant).await {
        Ok(Some(c)) => Some((c.value["delivered"].as_u64().unwrap_or(0), c.version)),
        Ok(None) => {
            // Configured anew: from the feed's end.
            let last = feed.last(tenant).await.ok()?;
            let value = serde_json::json!({"delivered": last});
            match store
                .put_checkpoint(WEBHOOK_NAMESPACE, tenant, &value, 0)
                .await
            {
                Ok(version) => Some((last, version)),
                Err(_) => None,
            }
        }
        Err(e) => {
            tracing::warn!(%tenant, "webhook: its cursor cannot be read: {e}");
            None
        }
    }
}

/// Posts one event; whether the receiver took it (2xx).
async fn send(client: &reqwest::Client, target: &WebhookTarget, entry: &FeedEntry) -> bool {
    let Ok(body) = serde_json::to_vec(entry) else {
        return false;
    };
    let sent = client
        .post(&target.url)
        .timeout(SEND_TIMEOUT)
        .header("content-type", "application/json")
        .header(
            "x-arbor-event-id",
            format!("{}:{}", target.tenant, entry.seq),
        )
        .header("x-arbor-event", entry.event.kind())
        .header("x-arbor-signature", signature(&target.secret, &body))
        .body(body)
        .send()
        .await;
    match sent {
        Ok(resp) if resp.status().is_success() => true,
        Ok(resp) => {
            tracing::warn!(tenant = %target.tenant, seq = entry.seq, status = %resp.status(), "webhook: the receiver refused an event; retrying");
            false
        }
        Err(e) => {
            tracing::warn!(tenant = %target.tenant, seq = entry.seq, "webhook: delivery failed: {e}; retrying");
            false
        }
    }
}

/// Delivers `target`'s events until `closing`.
pub(crate) async fn deliver(
    store: Arc<dyn Store>,
    feed: Arc<Feed>,
    client: reqwest::Client,
    target: WebhookTarget,
    closing: CancellationToken,
) {
    let mut backoff = FIRST_BACKOFF;
    let pause = |d: Duration| {
        let closing = closing.clone();
        async move {
            tokio::select! {
                () = tokio::time::sleep(d) => {}
                () = closing.cancelled() => {}
            }
        }
    };
    while !closing.is_cancelled() {
        let Some((mut delivered, mut version)) =
            cursor(store.as_ref(), &feed, &target.tenant).await
        else {
            pause(backoff).await;
            continue;
        };
        let entries = match feed.after(&target.tenant, delivered).await {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(tenant = %target.tenant, "webhook: the feed cannot be read: {e:?}");
                pause(backoff).await;
                continue;
            }
        };
        if entries.is_empty() {
            pause(IDLE).await;
            continue;
        }
        for entry in entries {
            if closing.is_cancelled() {
                return;
            }
            if !send(&client, &target, &entry).await {
                pause(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                break;
            }
            backoff = FIRST_BACKOFF;
            delivered = entry.seq;
            let value = serde_json::json!({"delivered": delivered});
            match store
                .put_checkpoint(WEBHOOK_NAMESPACE, &target.tenant, &value, version)
                .await
            {
                Ok(v) => version = v,
                // Another server delivers too: read where it got.
                Err(e) if e.kind() == StoreErrorKind::Conflict => break,
                Err(e) => {
                    tracing::warn!(tenant = %target.tenant, "webhook: its cursor cannot be kept: {e}");
                    break;
                }
            }
        }
    }
}
