//! What each tenant may do ([`TenantPolicies`]): which named specs it may start, whether it
//! may send inline specs, which provider and model overrides it may ask for, and its quotas
//! (runs in flight, runs started per minute, tokens per UTC day), each refusal in the one
//! error shape: a spec it may not start is unknown to it (404, as another tenant's id), an
//! override it may not ask for is refused naming the field (400), a quota met is 429 naming
//! the limit, its maximum and what was observed.
//!
//! Quotas are counted for the runs this server starts ([`Quotas`]). A tenant's starts reserve
//! their place under the tenant's lock before anything is launched, so parallel starts never
//! pass a quota. Runs in flight are read back from the store when a start needs the count
//! (one read by key each), and a run's tokens count for the UTC day it ended in, kept in a
//! store checkpoint (`arbor.tenant.usage`), so servers that share a store share the count
//! and a restart keeps it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arbor_protocol::{SessionId, SessionStatus};
use arbor_store::Store;
use serde::Deserialize;
use tokio::time::Instant;

use crate::error::{ApiError, ApiResult, ErrorKind};

/// The store namespace of each tenant's tokens per UTC day.
pub const USAGE_NAMESPACE: &str = "arbor.tenant.usage";

/// One tenant's policy, or the default for tenants without one. A field left out takes the
/// default's value; left out there, the most open one for `specs` (every spec) and
/// `inline_specs` (as the server allows), none for the overrides, no quota.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TenantPolicy {
    /// The named specs it may start (`"*"`: every one).
    pub specs: Option<Vec<String>>,
    /// Whether it may send inline specs (only where the server runs them at all).
    pub inline_specs: Option<bool>,
    /// The providers it may name instead of a spec's own (`"*"`: any).
    pub providers: Option<Vec<String>>,
    /// The models it may name instead of a spec's own (`"*"`: any).
    pub models: Option<Vec<String>>,
    /// Its runs going on at once.
    pub max_runs_in_flight: Option<u32>,
    /// Its runs started in any 60 s.
    pub max_runs_per_minute: Option<u32>,
    /// Its runs' tokens in one UTC day (a run's whole tree, counted when it ends); a start is
    /// refused once the day's count and its runs in flight reach it.
    pub max_tokens_per_day: Option<u64>,
}

impl TenantPolicy {
    /// This policy, its missing fields taken from `default`.
    fn over(&self, default: &Self) -> Self {
        Self {
            specs: self.specs.clone().or_else(|| default.specs.clone()),
            inline_specs: self.inline_specs.or(default.inline_specs),
            providers: self.providers.clone().or_else(|| default.providers.clone()),
            models: self.models.clone().or_else(|| default.models.clone()),
            max_runs_in_flight: self.max_runs_in_flight.or(default.max_runs_in_flight),
            max_runs_per_minute: self.max_runs_per_minute.or(default.max_runs_per_minute),
            max_tokens_per_day: self.max_tokens_per_day.or(default.max_tokens_per_day),
        }
    }

    fn quota_counted(&self) -> bool {
        self.max_runs_in_flight.is_some() || self.max_tokens_per_day.is_some()
    }
}

fn listed(list: Option<&Vec<String>>, name: &str) -> bool {
    list.is_some_and(|l| l.iter().any(|s| s == "*" || s == name))
}

/// A tenant's webhook: its URL, and the environment variable that holds its signing secret
/// (the secret is never in the file).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct WebhookPolicy {
    /// Where its events are posted (`http://` or `https://`).
    pub url: String,
    /// The environment variable holding the secret that signs them (at least 16 bytes).
    pub secret_env: String,
}

/// Every tenant's policy. Without one (the default), every tenant may do what the server
/// allows, with no quota.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TenantPolicies {
    /// For tenants without their own.
    #[serde(default)]
    pub default: TenantPolicy,
    /// By tenant.
    #[serde(default)]
    pub tenants: BTreeMap<String, TenantPolicy>,
    /// Where each tenant's events are posted (see [`crate::WebhookTarget`]), by tenant.
    #[serde(default)]
    pub webhooks: BTreeMap<String, WebhookPolicy>,
    /// Whether any policy was given (without one, overrides are free, as before policies).
    #[serde(skip)]
    configured: bool,
}

impl TenantPolicies {
    /// No policy: every tenant may start every spec, send inline specs where the server runs
    /// them, and ask for any override, with no quota.
    pub fn open() -> Self {
        Self::default()
    }

    /// The policies of a TOML document: a `[default]` table and `[tenants.NAME]` tables,
    /// each with the fields of [`TenantPolicy`]. The error names the field at fault.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let mut policies: Self = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        policies.configured = true;
        Ok(policies)
    }

    /// `tenant`'s policy, the default's fields filling its gaps.
    pub fn of(&self, tenant: &str) -> TenantPolicy {
        match self.tenants.get(tenant) {
            Some(p) => p.over(&self.default),
            None => self.default.clone(),
        }
    }

    /// Whether any tenant may send inline specs (a server runs them only then).
    pub fn any_inline(&self) -> bool {
        self.default.inline_specs == Some(true)
            || self.tenants.values().any(|p| p.inline_specs == Some(true))
    }

    /// Whether `tenant` may start the named `spec`.
    pub(crate) fn may_start(&self, tenant: &str, spec: &str) -> bool {
        let p = self.of(tenant);
        p.specs.is_none() || listed(p.specs.as_ref(), spec)
    }

    /// Refuses what `tenant`'s policy does not allow of a start: inline text, a provider or
    /// a model override, each naming its field.
    pub(crate) fn check_start(
        &self,
        tenant: &str,
        inline: bool,
        provider: Option<&str>,
        model: Option<&str>,
    ) -> ApiResult<()> {
        let p = self.of(tenant);
        if inline && p.inline_specs == Some(false) {
            return Err(ApiError::field(
                "spec_text",
                "inline specs are refused for this tenant (its policy: inline_specs = false)",
            ));
        }
        if !self.configured {
            return Ok(());
        }
        for (field, asked, allowed) in [
            ("provider", provider, p.providers.as_ref()),
            ("model", model, p.models.as_ref()),
        ] {
            if let Some(asked) = asked
                && !listed(allowed, asked)
            {
                return Err(ApiError::field(
                    field,
                    format!(
                        "this tenant may not choose the {field} {asked:?} (its policy's {field}s \
                         list the ones it may)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// What one tenant's runs use now.
#[derive(Debug, Default)]
struct Use {
    /// Places reserved for starts under way, by number.
    reserved: Vec<u64>,
    /// Roots this server started that may still run.
    in_flight: Vec<SessionId>,
    /// When its recent runs started (the last 60 s).
    starts: VecDeque<Instant>,
    next: u64,
}

/// The quotas' counts, by tenant.
#[derive(Debug, Default)]
pub(crate) struct Quotas {
    tenants: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Use>>>>,
}

/// A start's reserved place, given back when dropped unless the start [`landed`].
///
/// [`landed`]: Reservation::landed
#[derive(Debug)]
pub(crate) struct Reservation {
    state: Option<(Arc<tokio::sync::Mutex<Use>>, u64)>,
    /// Whether the run is followed until it ends (a quota counts runs in flight or tokens).
    tracked: bool,
}

impl Reservation {
    /// The start created `root`: it holds the place from now until it ends. Never waits, so
    /// a request dropped here (its client gone) cannot leave the place reserved.
    pub(crate) fn landed(mut self, root: SessionId) {
        let Some((use_, n)) = self.state.take() else {
            return;
        };
        let tracked = self.tracked;
        let land = move |u: &mut Use| {
            u.reserved.retain(|r| *r != n);
            if tracked {
                u.in_flight.push(root);
            }
        };
        if let Ok(mut u) = use_.try_lock() {
            land(&mut u);
        } else if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { land(&mut *use_.lock().await) });
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some((use_, n)) = self.state.take() {
            // A start that failed: its place is free again (at once when the lock is free,
            // else as soon as it is).
            if let Ok(mut u) = use_.try_lock() {
                u.reserved.retain(|r| *r != n);
            } else if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    use_.lock().await.reserved.retain(|r| *r != n);
                });
            }
        }
    }
}

/// The UTC day of `now`, as days since the epoch.
fn utc_day(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400)
}

fn refused(name: &str, maximum: u64, observed: u64, what: &str) -> ApiError {
    let mut e = ApiError::new(
        ErrorKind::Limit,
        format!("This tenant's {what} is {maximum} ({name}); it has {observed}: try again later"),
    );
    e.error.limit = Some(crate::error::LimitBody {
        name: name.to_owned(),
        maximum,
        observed,
    });
    e
}

impl Quotas {
    fn of(&self, tenant: &str) -> Arc<tokio::sync::Mutex<Use>> {
        let mut tenants = self
            .tenants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        tenants.entry(tenant.to_owned()).or_default().clone()
    }

    /// Reserves a place for one more start of `tenant` under `policy`, or the quota it
    /// would pass (429). Nothing is reserved without a quota.
    pub(crate) async fn admit(
        &self,
        store: &dyn Store,
        tenant: &str,
        policy: &TenantPolicy,
    ) -> ApiResult<Reservation> {
        if !policy.quota_counted() && policy.max_runs_per_minute.is_none() {
            return Ok(Reservation {
                state: None,
                tracked: false,
            });
        }
        let use_ = self.of(tenant);
        let mut u = use_.lock().await;
        let now = Instant::now();
        while u
            .starts
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            u.starts.pop_front();
        }
        if let Some(max) = policy.max_runs_per_minute {
            let observed = u.starts.len() as u64;
            if observed >= u64::from(max) {
                return Err(refused(
                    "max_runs_per_minute",
                    u64::from(max),
                    observed,
                    "most runs started per minute",
                ));
            }
        }
        let live_tokens = if policy.quota_counted() {
            self.settle(store, tenant, &mut u).await?
        } else {
            0
        };
        if let Some(max) = policy.max_runs_in_flight {
            let observed = (u.in_flight.len() + u.reserved.len()) as u64;
            if observed >= u64::from(max) {
                return Err(refused(
                    "max_runs_in_flight",
                    u64::from(max),
                    observed,
                    "most runs in flight",
                ));
            }
        }
        if let Some(max) = policy.max_tokens_per_day {
            let ended = day_usage(store, tenant, utc_day(SystemTime::now()))
                .await?
                .0;
            let observed = ended + live_tokens;
            if observed >= max {
                return Err(refused(
                    "max_tokens_per_day",
                    max,
                    observed,
                    "most tokens per UTC day",
                ));
            }
        }
        u.next += 1;
        let n = u.next;
        u.reserved.push(n);
        u.starts.push_back(now);
        drop(u);
        Ok(Reservation {
            state: Some((use_, n)),
            tracked: policy.quota_counted(),
        })
    }

    /// Drops the tenant's runs that ended (adding their tokens to the day they ended in);
    /// the tokens of those still going. A run leaves the list only once its tokens are
    /// counted, so a request dropped meanwhile (or a store error) loses none.
    async fn settle(&self, store: &dyn Store, tenant: &str, u: &mut Use) -> ApiResult<u64> {
        let mut live = 0u64;
        for root in u.in_flight.clone() {
            let Some(record) = store.session(root).await? else {
                u.in_flight.retain(|r| *r != root);
                continue;
            };
            let tokens = record
                .own_usage
                .total_tokens
                .saturating_add(record.attributed_usage.total_tokens);
            if matches!(
                record.status,
                SessionStatus::Idle | SessionStatus::Running | SessionStatus::Suspended
            ) {
                live = live.saturating_add(tokens);
            } else {
                add_day_usage(store, tenant, utc_day(SystemTime::now()), tokens).await?;
                u.in_flight.retain(|r| *r != root);
            }
        }
        Ok(live)
    }
}

/// A tenant's tokens of runs that ended on `day`, and the checkpoint's version.
async fn day_usage(store: &dyn Store, tenant: &str, day: u64) -> ApiResult<(u64, u64)> {
    let key = format!("{tenant}/{day}");
    Ok(match store.checkpoint(USAGE_NAMESPACE, &key).await? {
        Some(c) => (c.value["tokens"].as_u64().unwrap_or(0), c.version),
        None => (0, 0),
    })
}

/// Adds `tokens` to a tenant's count for `day` (compare and swap: servers sharing the store
/// add up).
async fn add_day_usage(store: &dyn Store, tenant: &str, day: u64, tokens: u64) -> ApiResult<()> {
    let key = format!("{tenant}/{day}");
    for _ in 0..16 {
        let (now, version) = day_usage(store, tenant, day).await?;
        let value = serde_json::json!({"tokens": now.saturating_add(tokens)});
        match store
            .put_checkpoint(USAGE_NAMESPACE, &key, &value, version)
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == arbor_store::StoreErrorKind::Conflict => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::new(
        ErrorKind::Unavailable,
        "The tenant's token count changed too often to update: try again",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_takes_the_defaults_gaps_and_overrides_are_listed_or_refused() {
        let p = TenantPolicies::from_toml(
            "[default]\nspecs = [\"a\"]\nmodels = [\"m1\"]\nmax_runs_in_flight = 2\n\
             [tenants.t]\nspecs = [\"*\"]\nproviders = [\"openai\"]\n",
        )
        .unwrap();
        assert!(p.may_start("t", "b") && p.may_start("u", "a") && !p.may_start("u", "b"));
        assert_eq!(p.of("t").max_runs_in_flight, Some(2));
        assert!(
            p.check_start("t", false, Some("openai"), Some("m1"))
                .is_ok()
        );
        let e = p
            .check_start("t", false, Some("anthropic"), None)
            .unwrap_err();
        assert_eq!(e.error.field.as_deref(), Some("provider"));
        let e = p.check_start("u", false, None, Some("m2")).unwrap_err();
        assert_eq!(e.error.field.as_deref(), Some("model"));
        // No policy at all: overrides are free, every spec may start.
        let open = TenantPolicies::open();
        assert!(open.may_start("x", "any"));
        assert!(open.check_start("x", true, Some("p"), Some("m")).is_ok());
        let e = TenantPolicies::from_toml("[default]\nmax_runs = 1\n").unwrap_err();
        assert!(e.contains("max_runs"), "{e}");
    }

    /// Parallel admissions of one tenant never pass `max_runs_in_flight`, and a failed
    /// start's place comes back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn parallel_admissions_never_pass_the_quota() {
        let store: Arc<dyn Store> = Arc::new(arbor_store::MemoryStore::new());
        let quotas = Arc::new(Quotas::default());
        let policy = TenantPolicy {
            max_runs_in_flight: Some(3),
            ..TenantPolicy::default()
        };
        let tries: Vec<_> = (0..32)
            .map(|_| {
                let (store, quotas, policy) = (store.clone(), quotas.clone(), policy.clone());
                tokio::spawn(async move { quotas.admit(store.as_ref(), "t", &policy).await })
            })
            .collect();
        let mut admitted = Vec::new();
        for t in tries {
            if let Ok(place) = t.await.unwrap() {
                admitted.push(place);
            }
        }
        assert_eq!(admitted.len(), 3);
        drop(admitted.pop());
        let again = quotas.admit(store.as_ref(), "t", &policy).await;
        assert!(again.is_ok(), "a dropped place came back");
        let e = quotas
            .admit(store.as_ref(), "t", &policy)
            .await
            .unwrap_err();
        assert_eq!(e.error.limit.unwrap().observed, 3);
    }
}
