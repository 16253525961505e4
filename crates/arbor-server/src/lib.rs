//! # arbor-server
//!
//! arbor's HTTP service: a small, strict, versioned API under `/v1` over the runtime and
//! its store, for hosts in any language. Every failure answers in one JSON shape
//! (`{"error": {"kind", "message", "field"?, "limit"?}}`, see [`ApiError`]); unknown JSON
//! fields and query parameters are refused by name; bodies are capped; every id is scoped
//! to its tenant, and another tenant's id gets the same 404 as an unknown one.
//!
//! The server owns the API, the tenant wall and the store's views. Starting a run from a
//! named spec is its host's: a [`Launcher`] (`arbor serve` plugs in the CLI's; a Rust host
//! may plug in a closure with [`launcher_fn`]).
//!
//! ```no_run
//! use std::sync::Arc;
//! use arbor_server::{Server, Tenants, launcher_fn, ApiError};
//!
//! # async fn host() -> std::io::Result<()> {
//! let store: Arc<dyn arbor_store::Store> = Arc::new(arbor_store::MemoryStore::new());
//! let launcher = launcher_fn(["hello"], |run| async move {
//!     // Build the tree for `run.spec`, create its root with `meta.tenant = run.tenant`,
//!     // start it in the background, and return the root's session id.
//!     Err::<arbor_protocol::SessionId, _>(ApiError::not_found("spec"))
//! });
//! let server = Server::builder(store)
//!     .launcher(launcher)
//!     .tenants(Tenants::open())
//!     .build();
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7700").await?;
//! server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```
//!
//! The routes (see `GET /v1/openapi.json` for the whole document):
//!
//! | route | what |
//! | --- | --- |
//! | `GET /` | the web view: the live tree of a run, approvals, cancel, transcripts |
//! | `GET /healthz`, `GET /readyz`, `GET /metrics` | liveness, readiness, Prometheus text |
//! | `GET /v1/specs` | the specs this server can start |
//! | `POST /v1/runs`, `GET /v1/runs`, `GET /v1/runs/{id}` | start a root run; the tenant's runs; one's status and tree |
//! | `GET /v1/runs/{id}/events` | whole-tree snapshots over SSE, on every change |
//! | `GET /v1/sessions/{id}` | one session, with both token totals |
//! | `GET /v1/sessions/{id}/children` | its children, as `arbor ls --json` lists them |
//! | `GET /v1/sessions/{id}/transcript` | its transcript, paged (`after`, `limit`) |
//! | `GET /v1/sessions/{id}/events` | its entries and status changes over SSE, resumable (`Last-Event-ID`) |
//! | `POST /v1/sessions/{id}/children` | spawn a child under a session (`sync`, `join`, `message`) |
//! | `GET /v1/sessions/{id}/delegations/{d}`, `POST …/cancel` | wait for a child (`wait_ms`); cancel it |
//! | `POST /v1/sessions/{id}/messages`, `DELETE /v1/sessions/{id}` | message a session; delete a child |
//! | `POST /v1/sessions/{id}/cancel` | cancel a session's run going on in this server |
//! | `GET`, `POST /v1/sessions/{id}/approvals` | what waits for a decision there; decide |
//! | `POST /v1/runs/{id}/resume` | let the tree go on with its decisions |
//! | `GET /a2a/{spec}/.well-known/agent-card.json`, `POST /a2a/{spec}`, `/a2a/{spec}/rest/…` | A2A v1.0 (JSON-RPC and HTTP+JSON, SSE): a task is a root run of the spec; `INPUT_REQUIRED` while it waits for decisions |

mod a2a;
mod api;
mod app;
mod auth;
mod controls;
mod error;
mod extract;
mod feed;
pub mod idempotency;
mod launcher;
mod listen;
mod mcp;
mod metrics;
mod openapi;
mod policy;
mod runtime_metrics;
mod state;
mod suspended;
mod views;
mod web;
mod webhook;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arbor_store::Store;

pub use api::approvals::{
    ApprovalsView, DecideRequest, DecisionInput, PendingView, QuestionView, ResumeView,
    SuspensionView, VerdictInput,
};
pub use api::host::{
    AnswerView, DelegationState, DeletedView, HandleView, MAX_WAIT_MS, MessageRequest, ReceiptView,
    SpawnRequest, WaitAnswer,
};
pub use api::listing::{DEFAULT_PAGE, MAX_LIST_PAGE, RunList, RunSummary};
pub use api::runs::{MAX_LABEL_BYTES, MAX_LABELS, MAX_SPEC_BYTES, MAX_TASK_BYTES};
pub use api::sessions::MAX_PAGE;
pub use api::tree::{NodeView, TreeSnapshot};
pub use api::{MAX_BODY_BYTES, REQUEST_TIMEOUT};
pub use auth::{LOCAL_TENANT, Tenant, Tenants};
pub use controls::{ControlsSchema, ToolChoiceSchema};
pub use error::{ApiError, ApiResult, ErrorBody, ErrorKind, LimitBody};
pub use feed::{FEED_KEEP, FEED_NAMESPACE, FeedEntry, FeedEvent};
pub use launcher::{FnLauncher, Launcher, StartRun, launcher_fn};
pub use listen::ServerLimits;
pub use openapi::ApiDoc;
pub use policy::{TenantPolicies, TenantPolicy, USAGE_NAMESPACE, WebhookPolicy};
pub use runtime_metrics::{MetricSink, RuntimeMetrics};
pub use views::{
    BudgetRequest, CancelView, ChildrenView, CostTotals, RunResultView, RunView, SessionView,
    SpecList, StartRunRequest, Totals, TranscriptPage, TreeView,
};
pub use webhook::{
    FIRST_BACKOFF, MAX_BACKOFF, SEND_TIMEOUT, WEBHOOK_NAMESPACE, WebhookTarget, signature,
};

use crate::metrics::Metrics;
use crate::state::AppState;

/// A configured server. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Server {
    state: AppState,
}

/// Builds a [`Server`].
#[derive(Debug)]
#[must_use]
pub struct ServerBuilder {
    store: Arc<dyn Store>,
    launcher: Option<Arc<dyn Launcher>>,
    tenants: Tenants,
    mcp: state::McpConfig,
    runtime: Option<RuntimeMetrics>,
    limits: ServerLimits,
    policies: TenantPolicies,
    webhooks: Vec<WebhookTarget>,
    webhook_client: Option<reqwest::Client>,
}

impl ServerBuilder {
    /// Posts each tenant's events to its webhook (see [`WebhookTarget`]), with `client`
    /// (a host's TLS setup; for `http://` receivers any client does).
    pub fn webhooks(mut self, targets: Vec<WebhookTarget>, client: reqwest::Client) -> Self {
        self.webhooks = targets;
        self.webhook_client = Some(client);
        self
    }

    /// What each tenant may do: specs, inline specs, overrides, quotas (default: what the
    /// server allows, no quota).
    pub fn policies(mut self, policies: TenantPolicies) -> Self {
        self.policies = policies;
        self
    }

    /// What the server holds at most: connections, event streams (in all, per tenant), and
    /// how long it waits for headers and at shutdown (default [`ServerLimits::default`]).
    pub fn limits(mut self, limits: ServerLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Adds what `runtime` counted (runs, tokens, tool calls, refusals, provider latency
    /// and retries, store writes) to `/metrics`; install [`RuntimeMetrics::layer`] in the
    /// process's subscriber for it to count.
    pub fn runtime_metrics(mut self, runtime: RuntimeMetrics) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// Who starts runs (without one, `POST /v1/runs` knows no spec).
    pub fn launcher(mut self, launcher: impl Launcher) -> Self {
        self.launcher = Some(Arc::new(launcher));
        self
    }

    /// The tenants and their tokens (default: open, as [`LOCAL_TENANT`]).
    pub fn tenants(mut self, tenants: Tenants) -> Self {
        self.tenants = tenants;
        self
    }

    /// More `Host` names MCP answers to, besides `localhost`, `127.0.0.1` and `::1`
    /// (DNS-rebinding protection; a name without a port matches any port).
    pub fn mcp_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.mcp.hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// The spec `/mcp` serves (default: the launcher's only spec; each spec is also at
    /// `/mcp/{name}`).
    pub fn mcp_default(mut self, spec: impl Into<String>) -> Self {
        self.mcp.default = Some(spec.into());
        self
    }

    /// The server.
    pub fn build(self) -> Server {
        let feed = Arc::new(feed::Feed::new(self.store.clone()));
        let watcher = Arc::new(feed::Watcher::new(feed.clone()));
        Server {
            state: AppState {
                store: self.store,
                launcher: self.launcher,
                tenants: self.tenants,
                metrics: Arc::new(Metrics::new(self.runtime)),
                draining: Arc::new(AtomicBool::new(false)),
                closing: tokio_util::sync::CancellationToken::new(),
                mcp: self.mcp,
                streams: Arc::new(state::StreamSlots::new(&self.limits)),
                limits: self.limits,
                policies: Arc::new(self.policies),
                quotas: Arc::default(),
                feed,
                watcher,
                webhooks: Arc::new((self.webhooks, self.webhook_client)),
            },
        }
    }
}

impl Server {
    /// Starts building a server over `store`.
    pub fn builder(store: Arc<dyn Store>) -> ServerBuilder {
        ServerBuilder {
            store,
            launcher: None,
            tenants: Tenants::open(),
            mcp: state::McpConfig::default(),
            runtime: None,
            limits: ServerLimits::default(),
            policies: TenantPolicies::open(),
            webhooks: Vec::new(),
            webhook_client: None,
        }
    }

    /// The routes, to serve or to mount in a larger app.
    pub fn router(&self) -> axum::Router {
        app::router(self.state.clone())
            .merge(mcp::router(&self.state))
            .merge(a2a::router(&self.state))
    }

    /// `GET /metrics` alone, every series, without a token: for a separate address that
    /// only the metrics scraper reaches (`arbor serve --metrics-listen`).
    pub fn metrics_router(&self) -> axum::Router {
        axum::Router::new()
            .route("/metrics", axum::routing::get(api::health::all_metrics))
            .with_state(self.state.clone())
    }

    /// Serves [`metrics_router`](Self::metrics_router) on `listener` until `shutdown`
    /// resolves.
    pub async fn serve_metrics(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        listen::serve(
            listener,
            self.metrics_router(),
            &self.state.limits,
            shutdown,
            || {},
        )
        .await
    }

    /// Stops admitting new runs (`POST /v1/runs` and `/readyz` answer 503); requests in
    /// flight finish.
    pub fn drain(&self) {
        self.state.draining.store(true, Ordering::Release);
    }

    /// Serves on `listener` until `shutdown` resolves; then drains (no new runs), ends the
    /// event streams, lets the other requests in flight finish and returns.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let draining = self.state.draining.clone();
        let closing = self.state.closing.clone();
        let watching = tokio::spawn(self.state.watcher.clone().run(closing.clone()));
        if let (targets, Some(client)) = &*self.state.webhooks {
            for target in targets {
                tokio::spawn(webhook::deliver(
                    self.state.store.clone(),
                    self.state.feed.clone(),
                    client.clone(),
                    target.clone(),
                    closing.clone(),
                ));
            }
        }
        let app = self.router();
        let served = listen::serve(listener, app, &self.state.limits, shutdown, move || {
            draining.store(true, Ordering::Release);
            closing.cancel();
            tracing::info!("shutting down: no new runs; finishing the requests in flight");
        })
        .await;
        // The feed's last round: the runs the shutdown cancelled end `aborted` there too.
        if tokio::time::timeout(std::time::Duration::from_secs(3), watching)
            .await
            .is_err()
        {
            tracing::warn!("shutdown: the event feed's last round did not finish");
        }
        served
    }
}
