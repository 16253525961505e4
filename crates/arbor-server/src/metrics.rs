//! `/metrics` in Prometheus' text format: runs and delegations by outcome, live children and
//! calls waiting for a decision (read from the store at each scrape, so they count every
//! process's work), the server's own request counters, and what this process's runs did
//! ([`RuntimeMetrics`], when the server was given one).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use arbor_store::{SessionQuery, Store};

use crate::runtime_metrics::RuntimeMetrics;

/// The server's own counters.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    requests: AtomicU64,
    errors: AtomicU64,
    runs_started: AtomicU64,
    runtime: Option<RuntimeMetrics>,
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

    /// The exposition text.
    pub(crate) async fn render(
        &self,
        store: &dyn Store,
    ) -> Result<String, arbor_store::StoreError> {
        let mut runs: BTreeMap<String, u64> = BTreeMap::new();
        let mut delegations: BTreeMap<String, u64> = BTreeMap::new();
        let mut live_children = 0u64;
        for root in store.list_sessions(SessionQuery::Roots).await? {
            *runs.entry(word(root.status)).or_default() += 1;
            for s in store.list_sessions(SessionQuery::Tree(root.id)).await? {
                if s.parent_id.is_none() {
                    continue;
                }
                *delegations.entry(word(s.status)).or_default() += 1;
                if s.status == arbor_protocol::SessionStatus::Running {
                    live_children += 1;
                }
            }
        }
        let mut out = String::new();
        let _ = writeln!(out, "# HELP arbor_runs Root runs in the store, by status.");
        let _ = writeln!(out, "# TYPE arbor_runs gauge");
        for (status, n) in &runs {
            let _ = writeln!(out, "arbor_runs{{status=\"{status}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP arbor_delegations Child sessions in the store, by status."
        );
        let _ = writeln!(out, "# TYPE arbor_delegations gauge");
        for (status, n) in &delegations {
            let _ = writeln!(out, "arbor_delegations{{status=\"{status}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP arbor_live_children Child sessions running now."
        );
        let _ = writeln!(out, "# TYPE arbor_live_children gauge");
        let _ = writeln!(out, "arbor_live_children {live_children}");
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
        // The approval queue: calls of suspended runs that wait for a decision.
        // A caller's suspension carries its children's calls too: each call counts once.
        let mut waiting = std::collections::HashSet::new();
        for c in store
            .list_checkpoints(arbor_core::approval::RUN_NAMESPACE)
            .await?
        {
            if let Ok(checkpoint) =
                serde_json::from_value::<arbor_core::approval::RunCheckpoint>(c.value)
            {
                waiting.extend(checkpoint.pending().into_iter().map(|p| p.id));
            }
        }
        let _ = writeln!(
            out,
            "# HELP arbor_approvals_pending Tool calls of suspended runs waiting for a decision."
        );
        let _ = writeln!(out, "# TYPE arbor_approvals_pending gauge");
        let _ = writeln!(out, "arbor_approvals_pending {}", waiting.len());
        if let Some(runtime) = &self.runtime {
            out.push_str(&runtime.render());
        }
        Ok(out)
    }
}

fn word(s: arbor_protocol::SessionStatus) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
