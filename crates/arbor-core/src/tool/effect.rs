//! Tool effects and idempotency keys.
//!
//! A tool declares what it does outside the runtime ([`ToolEffect`]). A call of a tool that
//! declares an [`ToolEffect::Idempotent`] external effect gets a stable idempotency key in
//! its [`ToolContext`](crate::ToolContext): `arbor:tool-effect:v1:<sha256 hex>` of the session,
//! run and call ids, the same when that call is resumed or retried, so the tool can hand it
//! to the outside system (a payment API's idempotency key, say). With an [`EffectStore`]
//! configured (on the agent, or on a supervisor, which gives it to every child), the runtime
//! records each such call's result once it succeeds, and a call whose effect was recorded
//! is never executed again: a resume after a crash, or a call found in flight, gets the
//! recorded result instead.
//!
//! [`StoreEffects`] keeps the records durably in the session store (checkpoint namespace
//! [`EFFECT_NAMESPACE`]); a host with its own ledger implements [`EffectStore`].

use std::fmt;
use std::sync::Arc;

use arbor_protocol::{RunId, SessionId};
use arbor_store::{Store, StoreError};
use async_trait::async_trait;
use sha2::{Digest, Sha256};

use crate::error::{CoreError, CoreResult};

/// The store namespace of effect records.
pub const EFFECT_NAMESPACE: &str = "effect";
/// The prefix of every idempotency key.
pub const EFFECT_KEY_PREFIX: &str = "arbor:tool-effect:v1:";

/// What a tool does outside the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ToolEffect {
    /// Nothing outside (a lookup, a computation): the default.
    #[default]
    None,
    /// It changes something outside, and a repeat is harmless or its own concern.
    External,
    /// It changes something outside and must not be repeated: its calls get an idempotency
    /// key, and with an effect store a recorded call is never executed again.
    Idempotent,
}

/// The idempotency key of call `call_id` of run `run` of `session`.
pub fn effect_key(session: SessionId, run: RunId, call_id: &str) -> String {
    let digest = Sha256::digest(format!("{session}:{run}:{call_id}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{EFFECT_KEY_PREFIX}{hex}")
}

/// Where the results of idempotent effects are recorded. Shared by every agent of a tree.
#[async_trait]
pub trait EffectStore: fmt::Debug + Send + Sync {
    /// The result recorded for `key`, if its effect was recorded done.
    async fn done(&self, key: &str) -> CoreResult<Option<String>>;

    /// Records the effect `key` done with `result`. The first record stands: recording a
    /// key again changes nothing.
    async fn record(&self, key: &str, result: &str) -> CoreResult<()>;
}

#[async_trait]
impl<T: EffectStore + ?Sized> EffectStore for Arc<T> {
    async fn done(&self, key: &str) -> CoreResult<Option<String>> {
        (**self).done(key).await
    }

    async fn record(&self, key: &str, result: &str) -> CoreResult<()> {
        (**self).record(key, result).await
    }
}

/// Effect records kept durably in a [`Store`] (its checkpoints, namespace
/// [`EFFECT_NAMESPACE`]).
#[derive(Debug, Clone)]
pub struct StoreEffects {
    store: Arc<dyn Store>,
}

impl StoreEffects {
    /// Records kept in `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }
}

#[async_trait]
impl EffectStore for StoreEffects {
    async fn done(&self, key: &str) -> CoreResult<Option<String>> {
        let found = self.store.checkpoint(EFFECT_NAMESPACE, key).await?;
        Ok(found.and_then(|c| c.value["result"].as_str().map(str::to_owned)))
    }

    async fn record(&self, key: &str, result: &str) -> CoreResult<()> {
        let value = serde_json::json!({ "result": result });
        match self
            .store
            .put_checkpoint(EFFECT_NAMESPACE, key, &value, 0)
            .await
        {
            Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
            Err(e) => Err(CoreError::Store(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_per_call_and_differ_between_calls() {
        let (s, r) = (SessionId::new(), RunId::new());
        let k = effect_key(s, r, "c1");
        assert_eq!(k, effect_key(s, r, "c1"));
        assert_ne!(k, effect_key(s, r, "c2"));
        assert_ne!(k, effect_key(s, RunId::new(), "c1"));
        assert!(k.starts_with("arbor:tool-effect:v1:"));
        assert_eq!(k.len(), EFFECT_KEY_PREFIX.len() + 64);
    }

    #[tokio::test]
    async fn the_first_record_stands() {
        let effects = StoreEffects::new(Arc::new(arbor_store::MemoryStore::new()));
        assert_eq!(effects.done("k").await.unwrap(), None);
        effects.record("k", "charged 5").await.unwrap();
        effects.record("k", "charged 6").await.unwrap();
        assert_eq!(
            effects.done("k").await.unwrap().as_deref(),
            Some("charged 5")
        );
    }
}
