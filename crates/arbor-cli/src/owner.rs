//! Which process owns a tree's runs, so a later process can tell a crash from a run still
//! going: the root's record keeps `meta.owner` (host, process id, start time, and a lease the
//! owner renews by heartbeat), and any
//! command that opens a durable store first marks as `interrupted` the sessions of trees
//! whose owner is gone and that were still in flight: `running` ones, and `idle` ones (created
//! by a delegation whose child never started). A `suspended` session waits for decisions and
//! stays as it is (`arbor resume` goes on with it); finished ones keep their outcome. A second
//! process working on the same store never touches the runs of a first one that is still
//! alive.
//!
//! Liveness is never a guess. On the owner's host it is the process itself: gone (or its id
//! reused by a later process) is dead at once. From another host sharing the store it is the
//! lease: the owner renews `meta.owner.renewed_ms` every third of its term (`lease_ms`,
//! 30 s unless `ARBOR_OWNER_LEASE_MS` says otherwise), and an owner whose lease ran out
//! counts as gone. An owner that finds the tree taken over while it was stalled past its
//! term stops its run (its token is cancelled) instead of going on beside the new owner.

use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::{SessionId, SessionStatus};
use arbor_store::{SessionQuery, SessionUpdate, Store, StoreError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::fail::Fail;

/// The owner's lease term unless `ARBOR_OWNER_LEASE_MS` sets another (at least 300 ms).
const DEFAULT_LEASE_MS: u64 = 30_000;

/// This process's lease term, in milliseconds.
fn lease_ms() -> u64 {
    std::env::var("ARBOR_OWNER_LEASE_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_LEASE_MS, |ms| ms.max(300))
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// This process, as `meta.owner` records it, with a fresh lease.
pub(crate) fn current() -> Value {
    let pid = std::process::id();
    json!({
        "pid": pid,
        "start": start_time(pid),
        "host": arbor_core::process::lease::ProcessId::current().host,
        "renewed_ms": now_ms(),
        "lease_ms": lease_ms(),
    })
}

/// Whether `owner` names this very process.
fn is_me(owner: &Value) -> bool {
    let me = current();
    owner["pid"] == me["pid"] && owner["start"] == me["start"] && owner["host"] == me["host"]
}

/// Keeps this process's lease on a tree while it runs it: renews it every third of its
/// term, and cancels the run's token if it finds the tree taken over (it stalled past its
/// term and another host's process took it). Dropping it stops the renewals.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Heartbeat {
    /// Starts renewing this process's lease on the tree of root `root`.
    pub(crate) fn start(store: Arc<dyn Store>, root: SessionId, run: CancellationToken) -> Self {
        let every = Duration::from_millis(lease_ms() / 3);
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match renew(store.as_ref(), root).await {
                    Renewal::Renewed => {}
                    Renewal::Lost(by) => {
                        tracing::warn!(%root, owner = %by, "another process took over the tree; stopping this run");
                        crate::render::output::err(&format!(
                            "error: another process ({by}) took over the tree of {root} while                              this one was stalled past its lease; stopping"
                        ));
                        run.cancel();
                        return;
                    }
                    Renewal::Gone => return,
                }
            }
        });
        Self { task }
    }
}

/// What one renewal found.
enum Renewal {
    Renewed,
    /// Another process owns the tree now (named).
    Lost(String),
    /// The root is gone or deleted: nothing to keep.
    Gone,
}

/// Renews this process's lease on `root` (compare-and-swap, retried while the record
/// changes under it).
async fn renew(store: &dyn Store, root: SessionId) -> Renewal {
    for _ in 0..8 {
        let record = match store.session(root).await {
            Ok(Some(r)) if r.tombstone.is_none() => r,
            Ok(_) => return Renewal::Gone,
            Err(e) => {
                tracing::warn!(%root, error = %e, "could not read the tree's owner to renew the lease");
                return Renewal::Renewed;
            }
        };
        let owner = &record.meta["owner"];
        if !is_me(owner) {
            return Renewal::Lost(format!(
                "process {} on {}",
                owner["pid"],
                owner["host"].as_str().unwrap_or("an unknown host")
            ));
        }
        let mut meta = record.meta.clone();
        meta["owner"]["renewed_ms"] = Value::from(now_ms());
        let update = SessionUpdate {
            expected_version: Some(record.version),
            meta: Some(meta.into_value()),
            ..SessionUpdate::default()
        };
        match store.update_session(root, &update).await {
            Ok(_) => return Renewal::Renewed,
            Err(StoreError::Conflict { .. }) => continue,
            Err(StoreError::Deleted { .. }) => return Renewal::Gone,
            Err(e) => {
                tracing::warn!(%root, error = %e, "could not renew the tree's lease");
                return Renewal::Renewed;
            }
        }
    }
    Renewal::Renewed
}

/// Refuses (exit 2, naming the process) while another live process owns the tree of `root`.
pub(crate) fn not_run_elsewhere(root: &arbor_store::SessionRecord) -> Result<(), Fail> {
    let owner = &root.meta["owner"];
    let mine = owner["pid"].as_u64() == Some(u64::from(std::process::id()));
    if !owner.is_null() && !mine && alive(owner) {
        let host = owner["host"].as_str().unwrap_or("this host");
        return Err(Fail::usage(format!(
            "the tree of {} is being run by process {} on {host}; wait until it ends (or stop \
             it), then try again",
            root.id, owner["pid"]
        )));
    }
    Ok(())
}

/// Makes this process the owner of the tree of `root` (compare-and-swap on its record) and
/// keeps its lease while the returned heartbeat lives (`run` is cancelled if the tree is
/// taken over meanwhile). Refused while another live process owns it: one process runs a
/// tree's sessions at a time, and a command never runs or deletes what another process is
/// running.
pub(crate) async fn take_over(
    store: &Arc<dyn Store>,
    root: &arbor_store::SessionRecord,
    run: &CancellationToken,
) -> Result<Heartbeat, Fail> {
    let mut record = root.clone();
    // A write that changed no owner is no rival: this very process's own lease renewed
    // meanwhile (a run it is still finishing), or a child's usage attributed to the root by
    // a worker that still runs it (right after the parent was killed). Read the record again
    // and retry; a live owner elsewhere is refused at the top of the loop.
    for _ in 0..TAKE_OVER_TRIES {
        not_run_elsewhere(&record)?;
        let mut meta = record.meta.clone();
        meta["owner"] = current();
        let update = SessionUpdate {
            expected_version: Some(record.version),
            meta: Some(meta.into_value()),
            ..SessionUpdate::default()
        };
        match store.update_session(record.id, &update).await {
            Ok(_) => return Ok(Heartbeat::start(store.clone(), record.id, run.clone())),
            Err(arbor_store::StoreError::Conflict { .. }) => match store.session(record.id).await {
                Ok(Some(now)) if is_me(&now.meta["owner"]) || !alive(&now.meta["owner"]) => {
                    record = now;
                }
                Ok(_) => break,
                Err(e) => return Err(Fail::store(e.to_string())),
            },
            Err(e) => return Err(Fail::store(e.to_string())),
        }
    }
    Err(Fail::usage(format!(
        "another process took over the tree of {} meanwhile; try again",
        root.id
    )))
}

/// How often [`take_over`] reads the root again after a write that changed no owner.
const TAKE_OVER_TRIES: usize = 64;

/// The start time of process `pid` in clock ticks since boot (Linux), which tells a live
/// process from a later one that reused its id.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22, counted after the command name (which may hold spaces) closes.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process `owner` names still runs: on this host, whether the process exists
/// (with the same start time); on another host, or where `/proc` cannot tell, whether its
/// lease was renewed within its term.
fn alive(owner: &Value) -> bool {
    let Some(pid) = owner["pid"].as_u64().and_then(|p| u32::try_from(p).ok()) else {
        return false;
    };
    let here = arbor_core::process::lease::ProcessId::current();
    if owner["host"].as_str().is_some_and(|h| h != here.host)
        || !std::path::Path::new("/proc/self/stat").exists()
    {
        return lease_held(owner, now_ms());
    }
    if pid == std::process::id() {
        return true;
    }
    match (start_time(pid), owner["start"].as_u64()) {
        (Some(now), Some(then)) => now == then,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// Whether `owner`'s lease still ran at `now` (a record without one never renewed it).
fn lease_held(owner: &Value, now: u64) -> bool {
    match (owner["renewed_ms"].as_u64(), owner["lease_ms"].as_u64()) {
        (Some(renewed), Some(term)) => now < renewed.saturating_add(term),
        _ => false,
    }
}

/// Whether a session of a tree whose owner is gone was cut off: running, or created and
/// never started (waiting for a slot included). Suspended sessions are resumable and finished
/// ones keep their outcome.
fn cut_off(status: SessionStatus) -> bool {
    status.is_live() || matches!(status, SessionStatus::Idle | SessionStatus::Queued)
}

/// Marks `interrupted` every session of a tree whose owner process is gone that was running or
/// never started; returns how many were marked.
///
/// It reads only what can need it: the sessions left `running` or never started (`idle`),
/// through the store's status index, and the root of each of their trees; its cost does not
/// grow with the finished trees the store holds. A child whose run a worker queue holds
/// (queued, or claimed, its lease running or not) is left to it.
pub(crate) async fn sweep(store: &Arc<dyn Store>) -> Result<usize, Fail> {
    let fail = |e: arbor_store::StoreError| Fail::store(e.to_string());
    let mut marked = 0;
    let mut by_root: std::collections::BTreeMap<SessionId, Vec<arbor_store::SessionRecord>> =
        std::collections::BTreeMap::new();
    for status in [
        SessionStatus::Running,
        SessionStatus::Idle,
        SessionStatus::Queued,
    ] {
        debug_assert!(cut_off(status));
        for s in store
            .list_sessions(SessionQuery::Status(status))
            .await
            .map_err(fail)?
        {
            by_root.entry(s.root_id).or_default().push(s);
        }
    }
    for (root_id, cut) in by_root {
        let owner = match cut.iter().find(|s| s.id == root_id) {
            Some(root) => root.meta["owner"].clone(),
            None => match store.session(root_id).await.map_err(fail)? {
                Some(root) => root.meta["owner"].clone(),
                None => Value::Null,
            },
        };
        if alive(&owner) {
            continue;
        }
        // Children handed to workers run on without the process that handed them over.
        let ids: Vec<SessionId> = cut.iter().map(|s| s.id).collect();
        let held = store.held_by_queue(&ids).await.map_err(fail)?;
        for s in cut.iter().filter(|s| !held.contains(&s.id)) {
            let update = SessionUpdate {
                expected_version: Some(s.version),
                ..SessionUpdate::status(SessionStatus::Interrupted)
            };
            match store.update_session(s.id, &update).await {
                Ok(_) => marked += 1,
                // Someone else settled it meanwhile: theirs stands.
                Err(arbor_store::StoreError::Conflict { .. }) => {}
                Err(e) => return Err(fail(e)),
            }
        }
    }
    if marked > 0 {
        tracing::info!(marked, "marked the runs of dead processes interrupted");
    }
    Ok(marked)
}

/// Deletes the child `selector` names under `parent` in the tree of `root`, run by no live
/// process (this one takes the tree's lease while it writes): the tombstone, then whatever
/// of the tree waited for approval and nobody can resume now (also after a crash cut an
/// earlier delete short), whose calls that will never be answered go to the providers of
/// the agents that made them (a remote A2A task waiting for input is cancelled). Returns the
/// child, its tombstone and whether it was deleted
/// before. `arbor rm` and `arbor serve` (a delete on a tree it does not run) share it.
pub(crate) async fn delete_stored(
    store: &std::sync::Arc<dyn arbor_store::Store>,
    root: &arbor_store::SessionRecord,
    parent: SessionId,
    selector: &str,
    by: &str,
    reason: &str,
) -> Result<arbor_core::supervisor::Deleted, Fail> {
    // What the selector names is read first: a refused delete (no such child, the root
    // itself) or one of a child deleted already takes no lease and writes nothing.
    if let arbor_core::registry::DeleteTarget::Deleted(id, t) =
        arbor_core::registry::delete_target(store.as_ref(), parent, selector)
            .await
            .map_err(Fail::core)?
    {
        // Unless a delete a crash cut short left a suspension to close (below, leased).
        let waiting = store
            .list_sessions(arbor_store::SessionQuery::Tree(root.id))
            .await
            .map_err(|e| Fail::store(e.to_string()))?
            .iter()
            .any(|s| s.status == arbor_protocol::SessionStatus::Suspended);
        if !waiting {
            return Ok(deleted(id, t, true, Vec::new()));
        }
    }
    let _lease = take_over(store, root, &tokio_util::sync::CancellationToken::new()).await?;
    // Read again under the lease: it may have been deleted meanwhile.
    let mut abandoned = Vec::new();
    let deleted = match arbor_core::registry::delete_target(store.as_ref(), parent, selector)
        .await
        .map_err(Fail::core)?
    {
        arbor_core::registry::DeleteTarget::Deleted(id, t) => deleted(id, t, true, Vec::new()),
        arbor_core::registry::DeleteTarget::Live(child) => {
            // Nothing of the tree runs (the lease is ours): what it stops is the waits for
            // a decision under the child, closed below.
            let tree = store
                .list_sessions(arbor_store::SessionQuery::Tree(root.id))
                .await
                .map_err(|e| Fail::store(e.to_string()))?;
            let waiting = arbor_core::supervisor::waiting_under(&tree, child.id);
            abandoned = arbor_core::process::calls_left_by_delete(store.as_ref(), &tree, child.id)
                .await
                .map_err(Fail::core)?;
            let t = arbor_core::registry::write_tombstone(store.as_ref(), &child, by, reason)
                .await
                .map_err(Fail::core)?;
            deleted(child.id, t, false, waiting)
        }
    };
    abandoned.extend(
        arbor_core::process::abandon_dead_suspensions(store.as_ref(), root.id)
            .await
            .map_err(Fail::core)?,
    );
    let abandoned = arbor_core::process::AbandonedCalls::merged(abandoned);
    let_go(store.as_ref(), root, abandoned).await;
    Ok(deleted)
}

/// Hands the calls a delete left unanswered for good to the providers of the agents that
/// made them, rebuilt from the definition the tree was started with
/// ([`ModelProvider::abandon`](arbor_model::ModelProvider::abandon): a remote A2A agent's
/// task waiting for an answer is cancelled). Best effort: what fails is logged.
pub(crate) async fn let_go(
    store: &dyn arbor_store::Store,
    root: &arbor_store::SessionRecord,
    abandoned: Vec<arbor_core::process::AbandonedCalls>,
) {
    if abandoned.is_empty() {
        return;
    }
    let spec = match crate::spec::Spec::from_definition(&root.meta["definition"]) {
        Ok(Some(spec)) => spec,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(root = %root.id, error = %e, "could not rebuild the agents whose calls a delete abandoned");
            return;
        }
    };
    for a in abandoned {
        let record = match store.session(a.session_id).await {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(session = %a.session_id, error = %e, "could not read whose calls a delete abandoned");
                continue;
            }
        };
        let Some(provider) = record.meta["child_id"]
            .as_str()
            .and_then(|id| spec.agents.get(id))
            .and_then(|agent| agent.http.clone())
        else {
            continue;
        };
        if let Err(e) = provider.abandon(&a.call_ids).await {
            tracing::warn!(session = %a.session_id, error = %e, "a provider could not let go of abandoned calls");
        }
    }
}

/// What a delete of the stored tree did (nothing of it ran here: no run was cancelled).
fn deleted(
    session_id: SessionId,
    tombstone: arbor_store::Tombstone,
    already: bool,
    stopped: Vec<arbor_core::supervisor::Stopped>,
) -> arbor_core::supervisor::Deleted {
    arbor_core::supervisor::Deleted {
        session_id,
        tombstone,
        run_cancelled: false,
        cancelled: Vec::new(),
        stopped,
        already,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A renewal of this process's own lease between reading the root and taking the tree
    /// over (a run resumed in the process that ran it) is no rival: the take-over retries.
    #[tokio::test]
    async fn a_take_over_is_not_refused_by_this_processs_own_renewal() {
        let store: Arc<dyn Store> = Arc::new(arbor_store::MemoryStore::new());
        let mut root = arbor_store::SessionRecord::new_root("root", "root", "scripted");
        root.meta = serde_json::json!({"owner": current()}).into();
        store.create_session(&root).await.unwrap();
        let root = store.session(root.id).await.unwrap().unwrap();
        // The first lease renews after `root` was read.
        assert!(matches!(
            renew(store.as_ref(), root.id).await,
            Renewal::Renewed
        ));
        let beat = take_over(&store, &root, &CancellationToken::new()).await;
        assert!(beat.is_ok(), "{:?}", beat.err());
        // Another live process's record is still refused.
        let mut other = arbor_store::SessionRecord::new_root("other", "root", "scripted");
        let mut owner = current();
        owner["host"] = Value::from("another-host.example");
        owner["pid"] = Value::from(4242);
        other.meta = serde_json::json!({"owner": owner}).into();
        store.create_session(&other).await.unwrap();
        let other = store.session(other.id).await.unwrap().unwrap();
        let refused = take_over(&store, &other, &CancellationToken::new()).await;
        assert!(refused.is_err());
    }

    /// Issue 34: right after a parent was killed, its children still running on workers
    /// attribute their usage to the root, changing its record between the resumer's read
    /// and its take-over; that is no rival process, and the take-over goes on (it exited 2,
    /// "another process took over the tree meanwhile", before).
    #[tokio::test]
    async fn a_take_over_is_not_refused_by_a_write_that_changed_no_owner() {
        let store: Arc<dyn Store> = Arc::new(arbor_store::MemoryStore::new());
        let mut root = arbor_store::SessionRecord::new_root("root", "root", "scripted");
        let dead = json!({"pid": u32::MAX - 7, "start": 1,
            "host": arbor_core::process::lease::ProcessId::current().host});
        root.meta = serde_json::json!({"owner": dead}).into();
        store.create_session(&root).await.unwrap();
        let read = store.session(root.id).await.unwrap().unwrap();
        // A worker's child attributes its usage to the root meanwhile.
        for _ in 0..3 {
            let now = store.session(root.id).await.unwrap().unwrap();
            let update = SessionUpdate {
                expected_version: Some(now.version),
                own_usage: Some(now.own_usage + arbor_protocol::Usage::new(10, 5)),
                ..SessionUpdate::default()
            };
            store.update_session(root.id, &update).await.unwrap();
        }
        let beat = take_over(&store, &read, &CancellationToken::new()).await;
        assert!(beat.is_ok(), "{:?}", beat.err().map(|f| f.message));
        let owner = store.session(root.id).await.unwrap().unwrap().meta["owner"].clone();
        assert!(is_me(&owner), "{owner}");
    }

    #[test]
    fn only_running_and_never_started_sessions_are_cut_off() {
        use SessionStatus::*;
        let cut: Vec<_> = [
            Idle,
            Running,
            Succeeded,
            Failed,
            Aborted,
            Suspended,
            Denied,
            Interrupted,
        ]
        .into_iter()
        .filter(|s| cut_off(*s))
        .collect();
        assert_eq!(cut, [Idle, Running]);
    }

    #[test]
    fn an_owner_on_another_host_is_alive_while_its_lease_runs() {
        let mut owner = current();
        owner["host"] = Value::from("another-host.example");
        assert!(alive(&owner), "renewed just now");
        owner["renewed_ms"] = Value::from(now_ms() - 31_000);
        owner["lease_ms"] = Value::from(30_000);
        assert!(!alive(&owner), "its lease ran out");
        owner["lease_ms"] = Value::from(60_000);
        assert!(alive(&owner), "a longer term of its own");
        let legacy = json!({"pid": 1, "start": 1, "host": "another-host.example"});
        assert!(!alive(&legacy), "never renewed");
        assert!(lease_held(&owner, now_ms()));
        assert!(!lease_held(&owner, now_ms() + 60_000));
    }

    #[test]
    fn on_this_host_a_dead_process_is_dead_whatever_its_lease() {
        let mut owner = json!({"pid": u32::MAX - 7, "start": 1,
            "host": arbor_core::process::lease::ProcessId::current().host});
        owner["renewed_ms"] = Value::from(now_ms());
        owner["lease_ms"] = Value::from(3_600_000);
        assert!(!alive(&owner));
    }

    #[test]
    fn this_process_is_alive_and_a_made_up_one_is_not() {
        assert!(alive(&current()));
        assert!(!alive(&json!({"pid": u32::MAX - 7, "start": 1})));
        assert!(!alive(&Value::Null));
        if let Some(start) = start_time(std::process::id()) {
            // Same pid, another start time: a reused id, the owner is gone.
            let reused = json!({"pid": std::process::id(), "start": start + 1});
            // Our own pid always counts as alive (we are running it).
            assert!(alive(&reused));
        }
    }
}
