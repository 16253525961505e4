//! `arbor serve`: the HTTP service ([`arbor_server`]) over the store, with the CLI's spec
//! runner as its launcher: `POST /v1/runs {"spec": NAME}` runs `--specs DIR/NAME.toml` as
//! `arbor run` would (the same checks, the same definition kept with the root, the same
//! owner lease), in the background, for the calling tenant. With `--allow-inline-specs`
//! a request may carry its own spec (`spec_text`), checked the same way.
//!
//! Tenants: `--tokens FILE` (lines `tenant sha256:<hex>`; `arbor serve --hash-token TENANT`
//! prints one) or `ARBOR_TOKENS=tenant=token,…`. With neither, the server is open as the
//! tenant `local` and listens on loopback only (another address is refused).
//!
//! Shutdown (Ctrl-C, SIGTERM): no new runs are admitted, the runs in flight are cancelled
//! (their roots end `aborted`, as under `arbor run`), the requests in flight finish, the
//! store is flushed as each run's terminal write lands, and the process exits 0.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use arbor_server::{Launcher, Server, Tenants};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::ServeArgs;
use crate::drive::{Overrides, prepare};
use crate::fail::Fail;
use crate::launcher::SpecLauncher;
use crate::store::{StoreChoice, io_reason};
use crate::{owner, render::output};

/// Runs the command until a termination signal; `Ok(0)` after a clean shutdown.
pub(crate) async fn serve(
    args: ServeArgs,
    runtime: Option<arbor_server::RuntimeMetrics>,
) -> Result<u8, Fail> {
    if let Some(tenant) = &args.hash_token {
        return hash_token(tenant);
    }
    let tenants = tenants(args.tokens.as_deref())?;
    let listen: SocketAddr = args.listen.parse().map_err(|_| {
        Fail::usage(format!(
            "--listen {:?} is not an address such as 127.0.0.1:7700",
            args.listen
        ))
    })?;
    if tenants.is_open() && !listen.ip().is_loopback() {
        return Err(Fail::usage(format!(
            "--listen {listen}: without tokens (--tokens FILE or ARBOR_TOKENS) the server \
             listens on loopback only"
        )));
    }
    let specs = match &args.specs {
        Some(dir) => read_specs(dir).await?,
        None => BTreeMap::new(),
    };
    if let Some(spec) = &args.mcp_spec
        && !specs.contains_key(spec)
    {
        let names: Vec<&str> = specs.keys().map(String::as_str).collect();
        return Err(Fail::usage(format!(
            "--mcp-spec {spec:?}: no such spec in --specs (specs: {})",
            names.join(", ")
        )));
    }
    let choice = StoreChoice::from_args(args.memory, args.store.as_deref())?;
    let store = crate::workers::open_store(&choice, args.workers, "--workers").await?;
    owner::sweep(&store).await?;
    let policies = policies(args.tenant_policy.as_deref(), args.allow_inline_specs)?;
    let runs = CancellationToken::new();
    let tracker = TaskTracker::new();
    let launcher = SpecLauncher::new(
        specs,
        args.allow_inline_specs || policies.any_inline(),
        store.clone(),
        runs.clone(),
        tracker.clone(),
    );
    let names = launcher.specs();
    let mut builder = Server::builder(store)
        .launcher(launcher)
        .tenants(tenants.clone())
        .policies(policies.clone())
        .limits(limits(&args)?);
    let hooks = webhooks(&policies, args.tenant_policy.as_deref())?;
    if !hooks.is_empty() {
        let client = arbor_model::http::tls_client(std::time::Duration::from_secs(5))
            .map_err(Fail::usage)?;
        builder = builder.webhooks(hooks, client);
    }
    if !args.mcp_host.is_empty() {
        builder = builder.mcp_hosts(args.mcp_host.iter().cloned());
    }
    if let Some(spec) = &args.mcp_spec {
        builder = builder.mcp_default(spec.clone());
    }
    if let Some(runtime) = runtime {
        builder = builder.runtime_metrics(runtime);
    }
    let server = builder.build();
    // Every listener is up before the line that says the server listens.
    if let Some(addr) = &args.metrics_listen {
        serve_metrics(&server, addr, runs.clone()).await?;
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| Fail::usage(format!("cannot listen on {listen}: {}", io_reason(&e))))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Fail::usage(e.to_string()))?;
    output::err(&format!(
        "arbor serve: listening on http://{bound} (store {}, {} spec(s){})",
        choice.name(),
        names.len(),
        if tenants.is_open() {
            "; no tokens configured: open as tenant `local`, loopback only"
        } else {
            ""
        }
    ));
    let stop = runs.clone();
    server
        .serve(listener, async move {
            crate::interrupt::shutdown_signal().await;
            output::err("arbor serve: shutting down (no new runs; cancelling the runs in flight)");
            stop.cancel();
        })
        .await
        .map_err(|e| Fail::usage(format!("the server failed: {e}")))?;
    tracker.close();
    tracker.wait().await;
    output::err("arbor serve: stopped");
    Ok(0)
}

/// Serves `/metrics` alone on `addr` until `stop` is cancelled (the shutdown).
async fn serve_metrics(server: &Server, addr: &str, stop: CancellationToken) -> Result<(), Fail> {
    let at: SocketAddr = addr.parse().map_err(|_| {
        Fail::usage(format!(
            "--metrics-listen {addr:?} is not an address such as 127.0.0.1:9464"
        ))
    })?;
    let listener = tokio::net::TcpListener::bind(at).await.map_err(|e| {
        Fail::usage(format!(
            "--metrics-listen: cannot listen on {at}: {}",
            io_reason(&e)
        ))
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| Fail::usage(e.to_string()))?;
    output::err(&format!(
        "arbor serve: metrics on http://{bound}/metrics (no token: keep it off public networks)"
    ));
    let served = server
        .clone()
        .serve_metrics(listener, async move { stop.cancelled().await });
    tokio::spawn(async move {
        if let Err(e) = served.await {
            tracing::warn!("the metrics listener failed: {e}");
        }
    });
    Ok(())
}

/// The server's limits: the flags, and the timings from the environment
/// (`ARBOR_HEADER_TIMEOUT_MS`, default 10000; `ARBOR_SHUTDOWN_GRACE_MS`, default 10000).
fn limits(args: &ServeArgs) -> Result<arbor_server::ServerLimits, Fail> {
    let ms = |name: &str, default: u64| -> Result<std::time::Duration, Fail> {
        match std::env::var(name) {
            Ok(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|ms| (1..=600_000).contains(ms))
                .map(std::time::Duration::from_millis)
                .ok_or_else(|| Fail::usage(format!("{name}={v:?}: a number of ms, 1 to 600000"))),
            Err(_) => Ok(std::time::Duration::from_millis(default)),
        }
    };
    Ok(arbor_server::ServerLimits::default()
        .max_connections(args.max_connections as usize)
        .max_streams(args.max_streams as usize)
        .max_streams_per_tenant(args.max_streams_per_tenant as usize)
        .header_timeout(ms("ARBOR_HEADER_TIMEOUT_MS", 10_000)?)
        .shutdown_grace(ms("ARBOR_SHUTDOWN_GRACE_MS", 10_000)?))
}

/// The tenants' policies from `file`; a tenant whose policy says nothing of inline specs
/// may send them as `--allow-inline-specs` says.
fn policies(file: Option<&Path>, inline: bool) -> Result<arbor_server::TenantPolicies, Fail> {
    let Some(file) = file else {
        return Ok(arbor_server::TenantPolicies::open());
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| Fail::usage(format!("cannot read {}: {}", file.display(), io_reason(&e))))?;
    let mut policies = arbor_server::TenantPolicies::from_toml(&text)
        .map_err(|e| Fail::usage(format!("--tenant-policy {}: {}", file.display(), e.trim())))?;
    if policies.default.inline_specs.is_none() {
        policies.default.inline_specs = Some(inline);
    }
    Ok(policies)
}

/// The tenants' webhooks of the policy file, each secret read from its variable.
fn webhooks(
    policies: &arbor_server::TenantPolicies,
    file: Option<&Path>,
) -> Result<Vec<arbor_server::WebhookTarget>, Fail> {
    let shown = file.map(|f| f.display().to_string()).unwrap_or_default();
    policies
        .webhooks
        .iter()
        .map(|(tenant, hook)| {
            let at = format!("--tenant-policy {shown}: webhooks.{tenant}");
            let secret = std::env::var(&hook.secret_env).map_err(|_| {
                Fail::usage(format!(
                    "{at}: secret_env {:?} is not set (it holds the signing secret)",
                    hook.secret_env
                ))
            })?;
            arbor_server::WebhookTarget::new(tenant, &hook.url, secret.trim())
                .map_err(|e| Fail::usage(format!("{at}: {e}")))
        })
        .collect()
}

fn hash_token(tenant: &str) -> Result<u8, Fail> {
    let mut token = String::new();
    std::io::stdin()
        .read_line(&mut token)
        .map_err(|e| Fail::usage(format!("cannot read the token on stdin: {e}")))?;
    let token = token.trim();
    if token.len() < 16 {
        return Err(Fail::usage(
            "the token (read on stdin) must be at least 16 characters",
        ));
    }
    output::out(&Tenants::file_line(tenant, token));
    Ok(0)
}

fn tenants(file: Option<&Path>) -> Result<Tenants, Fail> {
    if let Some(file) = file {
        let text = std::fs::read_to_string(file).map_err(|e| {
            Fail::usage(format!("cannot read {}: {}", file.display(), io_reason(&e)))
        })?;
        return Tenants::from_file_text(&text)
            .map_err(|e| Fail::usage(format!("{}: {e}", file.display())));
    }
    match std::env::var("ARBOR_TOKENS") {
        Ok(value) if !value.trim().is_empty() => {
            Tenants::from_env_value(&value).map_err(|e| Fail::usage(format!("ARBOR_TOKENS: {e}")))
        }
        _ => Ok(Tenants::open()),
    }
}

/// Every `*.toml` of `dir`, by file stem, each checked as `arbor run` checks a spec. One
/// that does not pass is not offered, and the server says why at start (one line naming
/// the file): a directory of examples may hold specs that need what a server cannot give
/// them (a repository to work on, say).
async fn read_specs(dir: &Path) -> Result<BTreeMap<String, PathBuf>, Fail> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Fail::usage(format!("--specs {}: {}", dir.display(), io_reason(&e))))?;
    let mut specs = BTreeMap::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Fail::usage(format!("cannot read {}: {}", path.display(), io_reason(&e)))
        })?;
        if let Err(fail) = prepare(&path.display().to_string(), &text, &Overrides::default()).await
        {
            // The message names the file.
            output::err(&format!(
                "arbor serve: not offering a spec: {}",
                output::one_line(&fail.message)
            ));
            continue;
        }
        specs.insert(name.to_owned(), path);
    }
    Ok(specs)
}
