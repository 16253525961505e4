//! The launcher `arbor serve` gives the server ([`SpecLauncher`]): it runs the specs of
//! `--specs` (and inline ones when allowed) as `arbor run` would, in the background; resumes
//! a tree with its decisions; cancels runs; and hosts a tree whose run is over for a host's
//! calls, releasing it once idle. It keeps the trees this process runs by root, so a second
//! run of a tree here (a resume while it goes on, say) is refused.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use arbor_protocol::SessionId;
use arbor_server::{ApiError, ErrorKind, Launcher, StartRun};
use arbor_store::Store;
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::drive::{
    Overrides, Start, create_root, end_tree, preflight_root, prepare, prepare_with,
};
use crate::fail::Fail;
use crate::owner;

mod claims;
mod settle;

use crate::store::io_reason;
use claims::{Busy, Joined, Running, Trees, hold_until_idle, host_idle, trees};
use settle::{forget_result, run_to_rest};

/// Runs the specs of `--specs` for the server.
#[derive(Debug)]
pub(crate) struct SpecLauncher {
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

impl SpecLauncher {
    /// A launcher of `specs` (by name) over `store`; its runs end when `runs` is cancelled,
    /// and `tracker` holds their tasks.
    pub(crate) fn new(
        specs: BTreeMap<String, PathBuf>,
        inline: bool,
        store: Arc<dyn Store>,
        runs: CancellationToken,
        tracker: TaskTracker,
    ) -> Self {
        Self {
            inline,
            specs: Arc::new(specs),
            store,
            runs,
            tracker,
            running: Arc::default(),
        }
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
        let mut overrides = Overrides {
            repository: None,
            provider: run.provider.clone(),
            model: run.model.clone(),
            controls: None,
            budget: run.budget,
        };
        let mut prepared = prepare_with(&shown, &text, &overrides, false)
            .await
            .map_err(|f| override_error(&run, f))?;
        // The request's controls on the root, after its provider and model (so a refusal
        // names `controls`) and before the provider is asked anything: one the root's
        // provider cannot carry is refused.
        if let Some(c) = &run.controls {
            prepared
                .spec
                .override_root(None, None, Some(c))
                .map_err(|e| ApiError::field("controls", format!("{shown}: {e}")))?;
            overrides.controls = Some(c.clone());
        }
        preflight_root(&prepared.spec)
            .await
            .map_err(|f| override_error(&run, f))?;
        let task = run
            .task
            .clone()
            .unwrap_or_else(|| prepared.spec.task.clone());
        if task.trim().is_empty() {
            return Err(ApiError::field(
                "task",
                "no task: the request gives none and the spec has none",
            ));
        }
        let token = self.runs.child_token();
        let extra = run.root_meta();
        let (built, mut session) = create_root(
            &prepared,
            &overrides,
            &self.store,
            &token,
            (extra, run.root_id),
        )
        .await
        .map_err(|f| build_error(&run, f))?;
        let id = session.id();
        let lease = owner::Heartbeat::start(self.store.clone(), id, token.clone());
        let claim = Running::claim(&self.running, id);
        if let Some(c) = &claim {
            c.live(&token, &built);
        }
        let store = self.store.clone();
        self.tracker.spawn(async move {
            let _lease = lease;
            if let Some(sup) = &built.supervisor {
                sup.attach(&mut session);
            }
            let hosted = run_to_rest(
                &built,
                &mut session,
                Start::Task(task),
                &token,
                claim.as_ref(),
                &store,
            )
            .await;
            wind_down(&built, hosted, &token).await;
        });
        Ok(id)
    }

    async fn resume(&self, root: SessionId) -> Result<(), ApiError> {
        self.resume_tree(root).await
    }

    async fn child_work(
        &self,
        root: SessionId,
    ) -> Result<Option<arbor_coding::ChildWork>, ApiError> {
        let record = arbor_core::registry::session(self.store.as_ref(), root).await?;
        let Some(spec) = crate::spec::Spec::from_definition(&record.meta["definition"])
            .map_err(|e| ApiError::internal(&e))?
        else {
            return Ok(None);
        };
        Ok(crate::tree::child_work(&spec, self.store.clone())?)
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
        match tree.supervisor {
            Some(sup) => Ok(sup.cancel_session(session).await?),
            None => Ok(false),
        }
    }

    fn supervisor(&self, root: SessionId) -> Option<arbor_core::supervisor::Supervisor> {
        trees(&self.running)
            .get(&root)
            .and_then(|t| t.supervisor.clone())
    }

    async fn host(&self, root: SessionId) -> Result<arbor_core::supervisor::Supervisor, ApiError> {
        let claim = match Running::join_for_host(&self.running, root).await {
            Joined::Claimed(claim) => claim,
            Joined::Live(sup) => return Ok(sup),
            Joined::Starting => {
                return Err(conflict("The tree is being started or resumed: try again"));
            }
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
        let built = crate::tree::build(&spec, store.clone(), token.clone()).await?;
        let sup = built
            .supervisor
            .clone()
            .ok_or_else(|| conflict("The tree's root has no children to spawn"))?;
        claim.live(&token, &built);
        claim.hosted();
        let watched = sup.clone();
        self.tracker.spawn(async move {
            let (_claim, _lease) = (claim, lease);
            hold_until_idle(&watched, &token).await;
            tracing::info!(root = %root, "released the hosted tree");
            end_tree(&built).await;
        });
        Ok(sup)
    }

    async fn open_root(&self, tenant: &str, spec: &str) -> Result<arbor_mcp::HostedRoot, ApiError> {
        let path = self
            .specs
            .get(spec)
            .ok_or_else(|| ApiError::not_found("spec"))?;
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ApiError::internal(&format!("cannot read {shown}: {}", io_reason(&e))))?;
        let prepared = prepare(&shown, &text, &Overrides::default())
            .await
            .map_err(|f| ApiError::new(ErrorKind::Validation, f.message))?;
        let token = self.runs.child_token();
        let extra = serde_json::json!({"tenant": tenant, "via": "mcp"});
        let opened = crate::mcp::open_root(&prepared, &self.store, &token, extra)
            .await
            .map_err(|f| match f.code {
                crate::fail::EXIT_USAGE => ApiError::new(ErrorKind::Validation, f.message),
                _ => ApiError::internal(&f.message),
            })?;
        let id = opened.session.id();
        let lease = owner::Heartbeat::start(self.store.clone(), id, token.clone());
        let claim = Running::claim(&self.running, id);
        if let Some(c) = &claim {
            c.live(&token, &opened.built);
            c.hosted();
        }
        let root = opened.root.clone();
        let store = self.store.clone();
        self.tracker.spawn(async move {
            // Held until the client's session ends (or the server shuts down).
            let (_lease, _claim) = (lease, claim);
            token.cancelled().await;
            tracing::info!(root = %id, "the MCP client's root ended");
            opened.root.supervisor().shutdown().await;
            opened.built.close().await;
            crate::mcp::close_root(&store, id).await;
        });
        Ok(root)
    }

    async fn delete_offline(
        &self,
        root: SessionId,
        parent: SessionId,
        child: SessionId,
        by: &str,
        reason: &str,
    ) -> Result<arbor_core::supervisor::Deleted, ApiError> {
        // Held while the tombstone is written: no run of the tree starts here meanwhile.
        let _claim = Running::claim(&self.running, root)
            .ok_or_else(|| conflict("The run is going on: try again"))?;
        let root_record = arbor_core::registry::session(self.store.as_ref(), root).await?;
        // Never under a live run of another process: it would finish the child anyway.
        crate::owner::delete_stored(
            &self.store,
            &root_record,
            parent,
            &child.to_string(),
            by,
            reason,
        )
        .await
        .map_err(|f| match f.code {
            crate::fail::EXIT_STORE => ApiError::internal(&f.message),
            _ => conflict(f.message),
        })
    }
}

/// How long a resume in place may take to begin before its request is answered anyway.
const RESUME_BEGINS: std::time::Duration = std::time::Duration::from_secs(10);

/// What [`SpecLauncher::resume_in_place`] did.
enum InPlace {
    /// The root goes on in the tree that quieted.
    Resumed,
    /// The tree does not quiet: its run goes on, or it is held for a host.
    NotQuieting,
    /// It quieted until a moment ago: its run has ended, and the tree is being released.
    Ended,
}

impl SpecLauncher {
    /// While the tree quiets here (its root's run stopped on a call waiting for a decision,
    /// runs of its message-mode children still going): resumes the root in that tree once
    /// its own calls are all decided (refused, naming how many wait, before), and the
    /// decided children nobody awaits with it.
    async fn resume_in_place(&self, root: SessionId) -> Result<InPlace, ApiError> {
        if !Running::quieting(&self.running, root) {
            return Ok(InPlace::NotQuieting);
        }
        let store = self.store.as_ref();
        match arbor_core::approval::suspensions(store, root)
            .await?
            .into_iter()
            .next()
        {
            Some(w) if !w.pending.is_empty() => {
                return Err(conflict(format!(
                    "{} call(s) still wait for a decision: decide them first",
                    w.pending.len()
                )));
            }
            Some(_) => {}
            None => return Ok(InPlace::NotQuieting),
        }
        // The decided children nobody awaits go on in it too (held past the run's end until
        // idle, as while a run goes on), before the root does: its end cannot outrun them.
        self.resume_detached_live(root).await?;
        let Some(begun) = Running::wake_quieting(&self.running, root) else {
            return Ok(InPlace::Ended);
        };
        tracing::info!(root = %root, "resuming the root in its tree, whose runs still go on");
        // Answered once the resume has begun (its last result dropped): a reader after this
        // answer never takes the suspension it was resumed from for its end.
        if tokio::time::timeout(RESUME_BEGINS, begun.notified())
            .await
            .is_err()
        {
            tracing::warn!(root = %root, "a resume in place had not begun within its bound");
        }
        Ok(InPlace::Resumed)
    }

    /// While the tree's run goes on here: resumes, in the background, the children below it
    /// nobody awaits whose suspended runs have everything decided (an async child whose
    /// question was answered, say). Whether there was any.
    async fn resume_detached_live(&self, root: SessionId) -> Result<bool, ApiError> {
        let ready: Vec<SessionId> =
            arbor_core::process::detached_suspensions(self.store.as_ref(), root)
                .await?
                .into_iter()
                .filter(|s| s.pending.is_empty())
                .map(|s| s.session_id)
                .collect();
        if ready.is_empty() {
            return Ok(false);
        }
        // Held past the run's end until idle: its end must not shut the resumed ones down.
        let Some(sup) = Running::live_held(&self.running, root) else {
            return Ok(false);
        };
        for child in &ready {
            let (sup, child) = (sup.clone(), *child);
            self.tracker.spawn(async move {
                if let Err(e) = sup.resume_child(child).await {
                    tracing::info!(session = %child, "a decided child did not go on: {e}");
                }
            });
        }
        Ok(!ready.is_empty())
    }

    /// The tree claimed for a resume; `None` when its run goes on here and the decided
    /// children nobody awaits were resumed in it instead.
    async fn claim_for_resume(&self, id: SessionId) -> Result<Option<Running>, ApiError> {
        let mut claimed = Running::claim_when_released(&self.running, id).await;
        // A host's call while it quiets marks it hosted-to-be: it still quiets.
        if matches!(claimed, Err(Busy::Running | Busy::Hosted)) {
            match self.resume_in_place(id).await? {
                InPlace::Resumed => return Ok(None),
                // Its run ended meanwhile: the tree is released in a moment.
                InPlace::Ended => claimed = Running::claim_when_released(&self.running, id).await,
                InPlace::NotQuieting => {}
            }
        }
        match claimed {
            Ok(claim) => Ok(Some(claim)),
            // The run goes on: the decided children nobody awaits go on in it now.
            Err(Busy::Running) if self.resume_detached_live(id).await? => Ok(None),
            Err(Busy::Hosted) => Err(conflict(format!(
                "The tree is hosted for the host's calls until {} s after its last child \
                 ended: resume it then",
                host_idle().as_secs()
            ))),
            Err(Busy::Running) => Err(conflict(
                "The run is still going: nothing to resume yet (no child of it waits with \
                 everything decided)",
            )),
        }
    }

    async fn resume_tree(&self, id: SessionId) -> Result<(), ApiError> {
        let store = &self.store;
        let Some(claim) = self.claim_for_resume(id).await? else {
            return Ok(());
        };
        let root = arbor_core::registry::session(store.as_ref(), id).await?;
        let spec = crate::spec::Spec::from_definition(&root.meta["definition"])
            .map_err(|e| ApiError::internal(&e))?
            .ok_or_else(|| conflict("The run keeps no definition to rebuild its agents from"))?;
        owner::not_run_elsewhere(&root).map_err(|f| conflict(f.message))?;
        // A delete a crash cut short leaves what its child waited on open: closed now, its
        // calls handed over.
        let closed = arbor_core::process::abandon_dead_suspensions(store.as_ref(), id).await?;
        owner::let_go(store.as_ref(), &root, closed).await;
        let own = arbor_core::approval::suspensions(store.as_ref(), id)
            .await?
            .into_iter()
            .next();
        let (ready, undecided): (Vec<_>, Vec<_>) =
            arbor_core::process::detached_suspensions(store.as_ref(), id)
                .await?
                .into_iter()
                .partition(|s| s.pending.is_empty());
        if let Some(w) = own.as_ref().filter(|w| !w.pending.is_empty()) {
            return Err(conflict(format!(
                "{} call(s) still wait for a decision: decide them first",
                w.pending.len()
            )));
        }
        // Nothing waits for a decision: the runs a crash interrupted go on, as `arbor
        // resume` continues them (refused, saying why, when none can).
        let crashed = match (&own, ready.is_empty()) {
            (None, true) => Some(
                crate::resume::Crashed::read(store.as_ref(), &root, &ready, &undecided)
                    .await
                    .map_err(|f| conflict(f.message))?,
            ),
            _ => None,
        };
        let token = self.runs.child_token();
        let lease = owner::take_over(store, &root, &token)
            .await
            .map_err(|f| conflict(f.message))?;
        let built = crate::tree::build(&spec, store.clone(), token.clone()).await?;
        let mut session = built.root.open_session(store.clone(), id).await?;
        claim.live(&token, &built);
        // The root runs again: the result kept from its last run no longer says where it
        // stands, so a reader waiting for the run to stop (a client's `wait_run`) does not
        // take the suspension it was resumed from for its end.
        if own.is_some() || session.record().status == arbor_protocol::SessionStatus::Interrupted {
            forget_result(store, id).await;
        }
        let store = store.clone();
        self.tracker.spawn(async move {
            let _lease = lease;
            let mut continued = Vec::new();
            if let Some(sup) = &built.supervisor {
                sup.attach(&mut session);
                if let Some(crashed) = &crashed {
                    match crate::resume::close_orphaned_suspensions(sup, &store, &crashed.sessions)
                        .await
                    {
                        Ok(notes) => {
                            for note in notes {
                                tracing::info!(root = %id, "{note}");
                            }
                        }
                        Err(f) => tracing::warn!(root = %id, "{}", f.message),
                    }
                    for child in crashed.message_children() {
                        tracing::info!(root = %id, child = %child.id, "continuing an interrupted message-mode child");
                        let (sup, child) = (sup.clone(), child.id);
                        continued.push(tokio::spawn(async move { sup.continue_child(child).await }));
                    }
                }
                crate::resume::resume_children(sup, store.as_ref(), &ready, &undecided).await;
            }
            let root_interrupted =
                session.record().status == arbor_protocol::SessionStatus::Interrupted;
            if own.is_none() && !root_interrupted {
                // Only children went on: the root runs on what they send it, if anything.
                for child in continued {
                    if let Ok(Err(e)) = child.await {
                        tracing::warn!(root = %id, "a child could not be continued: {e}");
                    }
                }
            }
            let start = match own {
                Some(w) => Start::Resume(w.run_id),
                None if root_interrupted => Start::Continue(None),
                None if !session.inbox().is_empty() => Start::Inbox,
                None => {
                    wind_down(&built, claim.run_ended(), &token).await;
                    return;
                }
            };
            let hosted =
                run_to_rest(&built, &mut session, start, &token, Some(&claim), &store).await;
            wind_down(&built, hosted, &token).await;
        });
        Ok(())
    }
}

/// Ends a tree whose run is over: held until idle first when it is `hosted` (a host's
/// call reached it while the run went on: see [`Running::run_ended`]), then its children
/// and MCP servers end. The claim itself ends when the caller drops it.
async fn wind_down(built: &crate::tree::Built, hosted: bool, token: &CancellationToken) {
    if hosted && let Some(sup) = &built.supervisor {
        tracing::info!("a host's call reached the tree during its run: hosted until idle");
        hold_until_idle(sup, token).await;
    }
    end_tree(built).await;
}

/// A tree that could not be built or its root created. Building starts the root's MCP
/// servers, the one part that fails as a factory does (`Supervisor`): a server of an inline
/// spec that cannot start is the request's fault (400 naming `spec_text`, the message naming
/// the server); one of a named spec is the server's, for now (503). A configuration the
/// runtime refuses is the request's (400); the store failing is the server's (500).
fn build_error(run: &StartRun, fail: Fail) -> ApiError {
    if fail.is(arbor_core::CoreErrorKind::Supervisor) {
        return if run.spec_text.is_some() {
            ApiError::field("spec_text", fail.message)
        } else {
            ApiError::new(ErrorKind::Unavailable, fail.message)
        };
    }
    match fail.code {
        crate::fail::EXIT_USAGE => override_error(run, fail),
        _ => ApiError::internal(&fail.message),
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
    } else if run.controls.is_some() {
        "controls"
    } else {
        return ApiError::new(ErrorKind::Validation, fail.message);
    };
    ApiError::field(field, fail.message)
}
