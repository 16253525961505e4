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
use std::sync::Arc;

use arbor_protocol::SessionId;
use arbor_server::{ApiError, ErrorKind, Launcher, Server, StartRun, Tenants};
use arbor_store::Store;
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::ServeArgs;
use crate::fail::Fail;
use crate::run::{Overrides, Start, create_root, prepare, run_tree};
use crate::store::{StoreChoice, io_reason};
use crate::{output, owner};

/// Runs the command until a termination signal; `Ok(0)` after a clean shutdown.
pub(crate) async fn serve(args: ServeArgs) -> Result<u8, Fail> {
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
    let choice = StoreChoice::from_args(args.memory, args.store.as_deref())?;
    let store = choice.open()?;
    owner::sweep(&store).await?;
    let runs = CancellationToken::new();
    let tracker = TaskTracker::new();
    let launcher = SpecLauncher {
        inline: args.allow_inline_specs,
        specs: Arc::new(specs),
        store: store.clone(),
        runs: runs.clone(),
        tracker: tracker.clone(),
        running: Arc::default(),
    };
    let names = launcher.specs();
    let server = Server::builder(store)
        .launcher(launcher)
        .tenants(tenants.clone())
        .build();
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
            shutdown_signal().await;
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

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
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

/// Runs the specs of `--specs` for the server.
#[derive(Debug)]
struct SpecLauncher {
    /// Whether inline specs run (`--allow-inline-specs`).
    inline: bool,
    specs: Arc<BTreeMap<String, PathBuf>>,
    store: Arc<dyn Store>,
    /// Cancelled at shutdown: every run ends.
    runs: CancellationToken,
    tracker: TaskTracker,
    /// The trees this process runs now, by root: a resume of one is refused, and a cancel
    /// reaches its runs.
    running: Trees,
}

/// A tree running in this process: its run's token and its supervisor (once built).
#[derive(Debug, Clone, Default)]
struct LiveTree {
    token: Option<CancellationToken>,
    supervisor: Option<arbor_core::supervisor::Supervisor>,
    /// Hosted for a host's calls (no root run): released once idle.
    hosted: bool,
}

/// How long a hosted tree stays after its last child ended: `ARBOR_HOST_IDLE_MS`, else 30 s.
fn host_idle() -> std::time::Duration {
    let ms = std::env::var("ARBOR_HOST_IDLE_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(30_000);
    std::time::Duration::from_millis(ms.max(100))
}

type Trees = Arc<std::sync::Mutex<std::collections::HashMap<SessionId, LiveTree>>>;

fn trees(t: &Trees) -> std::sync::MutexGuard<'_, std::collections::HashMap<SessionId, LiveTree>> {
    t.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Holds a root in [`SpecLauncher::running`] while its run goes on.
struct Running {
    set: Trees,
    root: SessionId,
}

impl Running {
    /// Claims `root`, or `None` if this process runs it already.
    fn claim(set: &Trees, root: SessionId) -> Option<Self> {
        let mut map = trees(set);
        if map.contains_key(&root) {
            return None;
        }
        map.insert(root, LiveTree::default());
        Some(Self {
            set: set.clone(),
            root,
        })
    }

    /// Records what a cancel needs.
    fn live(&self, token: &CancellationToken, built: &crate::tree::Built) {
        if let Some(t) = trees(&self.set).get_mut(&self.root) {
            t.token = Some(token.clone());
            t.supervisor = built.supervisor.clone();
        }
    }

    /// Marks the tree hosted (no root run: a cancel of the root cancels nothing).
    fn hosted(&self) {
        if let Some(t) = trees(&self.set).get_mut(&self.root) {
            t.hosted = true;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        trees(&self.set).remove(&self.root);
    }
}

fn conflict(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::Conflict, message)
}

#[async_trait]
impl Launcher for SpecLauncher {
    fn specs(&self) -> Vec<String> {
        self.specs.keys().cloned().collect()
    }

    fn accepts_inline(&self) -> bool {
        self.inline
    }

    async fn start(&self, run: StartRun) -> Result<SessionId, ApiError> {
        let (shown, text) = match &run.spec_text {
            Some(text) if self.inline => ("inline spec".to_owned(), text.clone()),
            Some(_) => return Err(ApiError::field("spec_text", "inline specs are refused")),
            None => {
                let path = self
                    .specs
                    .get(&run.spec)
                    .ok_or_else(|| ApiError::not_found("spec"))?;
                let shown = path.display().to_string();
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ApiError::internal(&format!("cannot read {shown}: {}", io_reason(&e)))
                })?;
                (shown, text)
            }
        };
        let overrides = Overrides {
            repository: None,
            provider: run.provider.clone(),
            model: run.model.clone(),
        };
        let prepared = prepare(&shown, &text, &overrides)
            .await
            .map_err(|f| override_error(&run, f))?;
        let token = self.runs.child_token();
        let extra = serde_json::json!({"tenant": run.tenant});
        let (built, mut session) = create_root(&prepared, &overrides, &self.store, &token, extra)
            .await
            .map_err(|f| ApiError::internal(&f.message))?;
        let id = session.id();
        let lease = owner::Heartbeat::start(self.store.clone(), id, token.clone());
        let claim = Running::claim(&self.running, id);
        if let Some(c) = &claim {
            c.live(&token, &built);
        }
        let task = run.task.unwrap_or_else(|| prepared.spec.task.clone());
        self.tracker.spawn(async move {
            let _lease = lease;
            let _claim = claim;
            if let Some(sup) = &built.supervisor {
                sup.attach(&mut session);
            }
            match run_tree(&built, &mut session, Start::Task(task), &token).await {
                Ok(r) => tracing::info!(root = %id, status = ?r.status, "run ended"),
                Err(e) => tracing::warn!(root = %id, "run failed: {e}"),
            }
        });
        Ok(id)
    }

    async fn resume(&self, root: SessionId) -> Result<(), ApiError> {
        self.resume_tree(root).await
    }

    async fn cancel(&self, root: SessionId, session: SessionId) -> Result<bool, ApiError> {
        let Some(tree) = trees(&self.running).get(&root).cloned() else {
            return Ok(false);
        };
        if session == root {
            if tree.hosted {
                return Ok(false);
            }
            return Ok(tree.token.is_some_and(|t| {
                let running = !t.is_cancelled();
                t.cancel();
                running
            }));
        }
        Ok(tree.supervisor.is_some_and(|s| s.cancel_session(session)))
    }

    fn supervisor(&self, root: SessionId) -> Option<arbor_core::supervisor::Supervisor> {
        trees(&self.running)
            .get(&root)
            .and_then(|t| t.supervisor.clone())
    }

    async fn host(&self, root: SessionId) -> Result<arbor_core::supervisor::Supervisor, ApiError> {
        let Some(claim) = Running::claim(&self.running, root) else {
            return self
                .supervisor(root)
                .ok_or_else(|| conflict("The tree is being started or resumed: try again"));
        };
        let store = &self.store;
        let record = arbor_core::registry::session(store.as_ref(), root).await?;
        let spec = crate::spec::Spec::from_definition(&record.meta["definition"])
            .map_err(|e| ApiError::internal(&e))?
            .ok_or_else(|| conflict("The run keeps no definition to rebuild its agents from"))?;
        let token = self.runs.child_token();
        let lease = owner::take_over(store, &record, &token)
            .await
            .map_err(|f| conflict(f.message))?;
        let built = crate::tree::build(&spec, store.clone(), token.clone())?;
        let sup = built
            .supervisor
            .clone()
            .ok_or_else(|| conflict("The tree's root has no children to spawn"))?;
        claim.live(&token, &built);
        claim.hosted();
        let (watched, idle) = (sup.clone(), host_idle());
        self.tracker.spawn(async move {
            let (_claim, _lease, _built) = (claim, lease, built);
            let mut quiet_since = std::time::Instant::now();
            loop {
                tokio::select! {
                    () = token.cancelled() => break,
                    () = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
                }
                if watched.active_children() > 0 || watched.running_handles() > 0 {
                    quiet_since = std::time::Instant::now();
                } else if quiet_since.elapsed() >= idle {
                    break;
                }
            }
            tracing::info!(root = %root, "released the hosted tree");
            watched.shutdown().await;
        });
        Ok(sup)
    }

    async fn delete_offline(
        &self,
        root: SessionId,
        parent: SessionId,
        child: SessionId,
        by: &str,
        reason: &str,
    ) -> Result<arbor_core::supervisor::Deleted, ApiError> {
        use arbor_core::registry::{self, DeleteTarget};
        // Held while the tombstone is written: no run of the tree starts here meanwhile.
        let _claim = Running::claim(&self.running, root)
            .ok_or_else(|| conflict("The run is going on: try again"))?;
        let store = &self.store;
        let root_record = registry::session(store.as_ref(), root).await?;
        // Never under a live run of another process: it would finish the child anyway.
        let _lease = owner::take_over(store, &root_record, &CancellationToken::new())
            .await
            .map_err(|f| conflict(f.message))?;
        let (session_id, tombstone, already) =
            match registry::delete_target(store.as_ref(), parent, &child.to_string()).await? {
                DeleteTarget::Deleted(id, t) => (id, t, true),
                DeleteTarget::Live(record) => {
                    let t = registry::write_tombstone(store.as_ref(), &record, by, reason).await?;
                    (record.id, t, false)
                }
            };
        arbor_core::supervisor::detached::close_dead_suspensions(store.as_ref(), root).await?;
        Ok(arbor_core::supervisor::Deleted {
            session_id,
            tombstone,
            run_cancelled: false,
            cancelled: Vec::new(),
            already,
        })
    }
}

impl SpecLauncher {
    async fn resume_tree(&self, id: SessionId) -> Result<(), ApiError> {
        let store = &self.store;
        let claim = Running::claim(&self.running, id).ok_or_else(|| {
            if trees(&self.running).get(&id).is_some_and(|t| t.hosted) {
                conflict(format!(
                    "The tree is hosted for the host's calls until {} s after its last child \
                     ended: resume it then",
                    host_idle().as_secs()
                ))
            } else {
                conflict("The run is still going: nothing to resume yet")
            }
        })?;
        let root = arbor_core::registry::session(store.as_ref(), id).await?;
        let spec = crate::spec::Spec::from_definition(&root.meta["definition"])
            .map_err(|e| ApiError::internal(&e))?
            .ok_or_else(|| conflict("The run keeps no definition to rebuild its agents from"))?;
        owner::not_run_elsewhere(&root).map_err(|f| conflict(f.message))?;
        arbor_core::supervisor::detached::close_dead_suspensions(store.as_ref(), id).await?;
        let own = arbor_core::approval::suspensions(store.as_ref(), id)
            .await?
            .into_iter()
            .next();
        let (ready, undecided): (Vec<_>, Vec<_>) =
            arbor_core::supervisor::detached_suspensions(store.as_ref(), id)
                .await?
                .into_iter()
                .partition(|s| s.pending.is_empty());
        match &own {
            Some(w) if !w.pending.is_empty() => {
                return Err(conflict(format!(
                    "{} call(s) still wait for a decision: decide them first",
                    w.pending.len()
                )));
            }
            None if ready.is_empty() && !undecided.is_empty() => {
                let calls: usize = undecided.iter().map(|s| s.pending.len()).sum();
                return Err(conflict(format!(
                    "{calls} call(s) below the root still wait for a decision: decide them first"
                )));
            }
            None if ready.is_empty() => {
                return Err(conflict("Nothing waits for a decision: nothing to resume"));
            }
            _ => {}
        }
        let token = self.runs.child_token();
        let lease = owner::take_over(store, &root, &token)
            .await
            .map_err(|f| conflict(f.message))?;
        let built = crate::tree::build(&spec, store.clone(), token.clone())?;
        let mut session = built.root.open_session(store.clone(), id).await?;
        claim.live(&token, &built);
        let store = store.clone();
        self.tracker.spawn(async move {
            let (_lease, _claim) = (lease, claim);
            if let Some(sup) = &built.supervisor {
                sup.attach(&mut session);
                crate::resume::resume_children(sup, store.as_ref(), &ready, &undecided).await;
            }
            let start = match own {
                Some(w) => Start::Resume(w.run_id),
                None if !session.inbox().is_empty() => Start::Inbox,
                None => {
                    if let Some(sup) = &built.supervisor {
                        sup.shutdown().await;
                    }
                    return;
                }
            };
            match run_tree(&built, &mut session, start, &token).await {
                Ok(r) => tracing::info!(root = %id, status = ?r.status, "resumed run ended"),
                Err(e) => tracing::warn!(root = %id, "resumed run failed: {e}"),
            }
        });
        Ok(())
    }
}

/// A spec that fails its checks: an inline one is at fault itself; a named one with the
/// request's overrides, the override is.
fn override_error(run: &StartRun, fail: Fail) -> ApiError {
    let field = if run.spec_text.is_some() {
        "spec_text"
    } else if run.provider.is_some() {
        "provider"
    } else if run.model.is_some() {
        "model"
    } else {
        return ApiError::new(ErrorKind::Validation, fail.message);
    };
    ApiError::field(field, fail.message)
}
