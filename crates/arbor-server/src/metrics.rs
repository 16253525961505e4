//! `/metrics` in Prometheus' text format, for whom may read it ([`Scope`]).
//!
//! - **From the store**, by tenant: runs and delegations by status, live children, calls
//!   waiting for a decision, what the tenant's sessions spent (`arbor_cost_micros`, each
//!   turn once: the sum of every session's own cost). They count every process's work. One query counts them
//!   ([`Store::census`]); the result is kept [`CENSUS_TTL`], and one scrape at a time
//!   refreshes it, so a flood of scrapes costs the store one query per period and no memory
//!   that grows with the store's history.
//! - **Of this process**: the server's request counters, and what its runs did
//!   ([`RuntimeMetrics`], when the server was given one). They mix every tenant, so only an
//!   operator (or an open server, or the `--metrics-listen` address) sees them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arbor_protocol::SessionStatus;
use arbor_store::Store;
use tokio::time::Instant;

use crate::auth::LOCAL_TENANT;
use crate::runtime_metrics::RuntimeMetrics;

/// How long the store's counts are kept before a scrape reads them again.
pub(crate) const CENSUS_TTL: Duration = Duration::from_secs(5);

/// What a caller of `/metrics` sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Every tenant's series, and the process's own.
    All,
    /// This tenant's series only.
    Tenant(String),
}

/// One tenant's counts from the store.
#[derive(Debug, Default, Clone)]
struct TenantCounts {
    runs: BTreeMap<&'static str, u64>,
    delegations: BTreeMap<&'static str, u64>,
    live_children: u64,
    approvals_pending: u64,
    cost_micros: u64,
}

/// The store's counts, by tenant.
#[derive(Debug, Default)]
struct Census {
    tenants: BTreeMap<String, TenantCounts>,
}

/// The server's own counters, and the store's counts as last read.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    requests: AtomicU64,
    errors: AtomicU64,
    runs_started: AtomicU64,
    runtime: Option<RuntimeMetrics>,
    /// The census and when it was read; the lock makes one scrape at a time refresh it.
    census: tokio::sync::Mutex<Option<(Instant, Arc<Census>)>>,
}

impl Metrics {
    pub(crate) fn new(runtime: Option<RuntimeMetrics>) -> Self {
        Self {
            runtime,
            ..Self::default()
        }
    }

    pub(crate) fn request(&self, failed: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn run_started(&self) {
        self.runs_started.fetch_add(1, Ordering::Relaxed);
    }

    /// The census, read again if older than [`CENSUS_TTL`].
    async fn census(&self, store: &dyn Store) -> Result<Arc<Census>, arbor_store::StoreError> {
        let mut kept = self.census.lock().await;
        if let Some((at, census)) = kept.as_ref()
            && at.elapsed() < CENSUS_TTL
        {
            return Ok(census.clone());
        }
        let census = Arc::new(read_census(store).await?);
        *kept = Some((Instant::now(), census.clone()));
        Ok(census)
    }

    /// The exposition text for `scope`.
    pub(crate) async fn render(
        &self,
        store: &dyn Store,
        scope: &Scope,
    ) -> Result<String, arbor_store::StoreError> {
        let census = self.census(store).await?;
        let empty = TenantCounts::default();
        let shown: Vec<(&str, &TenantCounts)> = match scope {
            Scope::All => census
                .tenants
                .iter()
                .map(|(t, c)| (t.as_str(), c))
                .collect(),
            Scope::Tenant(t) => vec![(t.as_str(), census.tenants.get(t).unwrap_or(&empty))],
        };
        let mut out = String::new();
        gauge(
            &mut out,
            "arbor_runs",
            "Root runs in the store, by tenant and status.",
        );
        for (tenant, c) in &shown {
            for (status, n) in &c.runs {
                let _ = writeln!(
                    out,
                    "arbor_runs{{tenant=\"{tenant}\",status=\"{status}\"}} {n}"
                );
            }
        }
        gauge(
            &mut out,
            "arbor_delegations",
            "Child sessions in the store, by tenant and status.",
        );
        for (tenant, c) in &shown {
            for (status, n) in &c.delegations {
                let _ = writeln!(
                    out,
                    "arbor_delegations{{tenant=\"{tenant}\",status=\"{status}\"}} {n}"
                );
            }
        }
        gauge(
            &mut out,
            "arbor_live_children",
            "Child sessions running now, by tenant.",
        );
        for (tenant, c) in &shown {
            let _ = writeln!(
                out,
                "arbor_live_children{{tenant=\"{tenant}\"}} {}",
                c.live_children
            );
        }
        gauge(
            &mut out,
            "arbor_approvals_pending",
            "Tool calls of suspended runs waiting for a decision, by tenant.",
        );
        for (tenant, c) in &shown {
            let _ = writeln!(
                out,
                "arbor_approvals_pending{{tenant=\"{tenant}\"}} {}",
                c.approvals_pending
            );
        }
        gauge(
            &mut out,
            "arbor_cost_micros",
            "What the tenant's sessions in the store spent, by tenant: micro-units of the price table's currency, each turn once.",
        );
        for (tenant, c) in &shown {
            let _ = writeln!(
                out,
                "arbor_cost_micros{{tenant=\"{tenant}\"}} {}",
                c.cost_micros
            );
        }
        if *scope == Scope::All {
            self.render_process(&mut out);
        }
        Ok(out)
    }

    /// The process's own counters (every tenant's requests and runs together).
    fn render_process(&self, out: &mut String) {
        let counters = [
            (
                "arbor_http_requests_total",
                "HTTP requests served.",
                &self.requests,
            ),
            (
                "arbor_http_errors_total",
                "HTTP requests that failed.",
                &self.errors,
            ),
            (
                "arbor_runs_started_total",
                "Root runs this server started.",
                &self.runs_started,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        if let Some(runtime) = &self.runtime {
            out.push_str(&runtime.render());
        }
    }
}

fn gauge(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
}

/// Counts the store: sessions by tenant, root or not and status in one query; the calls
/// waiting for a decision from the run checkpoints (one per suspended run).
async fn read_census(store: &dyn Store) -> Result<Census, arbor_store::StoreError> {
    let mut census = Census::default();
    for row in store.census("tenant").await? {
        let tenant = row.group.unwrap_or_else(|| LOCAL_TENANT.to_owned());
        let counts = census.tenants.entry(tenant).or_default();
        let by_status = if row.root {
            &mut counts.runs
        } else {
            &mut counts.delegations
        };
        *by_status.entry(row.status.as_str()).or_default() += row.sessions;
        counts.cost_micros = counts.cost_micros.saturating_add(row.own_cost_micros);
        if !row.root && row.status == SessionStatus::Running {
            counts.live_children += row.sessions;
        }
    }
    // A caller's suspension carries its children's calls too: each call counts once.
    let mut waiting: HashMap<String, HashSet<String>> = HashMap::new();
    for s in crate::suspended::suspended_runs(store).await? {
        let tenant = s.root.map_or_else(|| LOCAL_TENANT.to_owned(), |(_, t)| t);
        waiting
            .entry(tenant)
            .or_default()
            .extend(s.checkpoint.pending().into_iter().map(|p| p.id));
    }
    for (tenant, calls) in waiting {
        census.tenants.entry(tenant).or_default().approvals_pending = calls.len() as u64;
    }
    Ok(census)
}
