//! Which process owns a tree's runs, so a later process can tell a crash from a run still
//! going: the root's record keeps `meta.owner` (the process id and its start time), and any
//! command that opens a durable store first marks as `interrupted` the sessions of trees
//! whose owner is gone and that were still in flight: `running` ones, and `idle` ones (created
//! by a delegation whose child never started). A `suspended` session waits for decisions and
//! stays as it is (`arbor resume` goes on with it); finished ones keep their outcome. A second
//! process working on the same store never touches the runs of a first one that is still
//! alive.

use std::sync::Arc;

use arbor_protocol::SessionStatus;
use arbor_store::{SessionQuery, SessionUpdate, Store};
use serde_json::{Value, json};

use crate::fail::Fail;

/// This process, as `meta.owner` records it.
pub(crate) fn current() -> Value {
    let pid = std::process::id();
    json!({"pid": pid, "start": start_time(pid), "host": arbor_core::lease::ProcessId::current().host})
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

/// Makes this process the owner of the tree of `root` (compare-and-swap on its record).
/// Refused while another live process owns it: one process runs a tree's sessions at a
/// time, and a command never runs or deletes what another process is running.
pub(crate) async fn take_over(
    store: &Arc<dyn Store>,
    root: &arbor_store::SessionRecord,
) -> Result<(), Fail> {
    not_run_elsewhere(root)?;
    let mut meta = root.meta.clone();
    meta["owner"] = current();
    let update = SessionUpdate {
        expected_version: Some(root.version),
        meta: Some(meta),
        ..SessionUpdate::default()
    };
    match store.update_session(root.id, &update).await {
        Ok(_) => Ok(()),
        Err(arbor_store::StoreError::Conflict { .. }) => Err(Fail::usage(format!(
            "another process took over the tree of {} meanwhile; try again",
            root.id
        ))),
        Err(e) => Err(Fail::store(e.to_string())),
    }
}

/// The start time of process `pid` in clock ticks since boot (Linux), which tells a live
/// process from a later one that reused its id.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22, counted after the command name (which may hold spaces) closes.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process `owner` names still runs. Unknown (no `/proc`) counts as alive, so
/// nothing is marked interrupted on a guess.
fn alive(owner: &Value) -> bool {
    let Some(pid) = owner["pid"].as_u64().and_then(|p| u32::try_from(p).ok()) else {
        return false;
    };
    if pid == std::process::id() {
        return true;
    }
    if !std::path::Path::new("/proc/self/stat").exists() {
        return true;
    }
    match (start_time(pid), owner["start"].as_u64()) {
        (Some(now), Some(then)) => now == then,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// Whether a session of a tree whose owner is gone was cut off: running, or created and
/// never started. Suspended sessions are resumable and finished ones keep their outcome.
fn cut_off(status: SessionStatus) -> bool {
    status.is_live() || status == SessionStatus::Idle
}

/// Marks `interrupted` every session of a tree whose owner process is gone that was running or
/// never started; returns how many were marked.
pub(crate) async fn sweep(store: &Arc<dyn Store>) -> Result<usize, Fail> {
    let fail = |e: arbor_store::StoreError| Fail::store(e.to_string());
    let mut marked = 0;
    for root in store
        .list_sessions(SessionQuery::Roots)
        .await
        .map_err(fail)?
    {
        if alive(&root.meta["owner"]) {
            continue;
        }
        let tree = store
            .list_sessions(SessionQuery::Tree(root.id))
            .await
            .map_err(fail)?;
        for s in tree.iter().filter(|s| cut_off(s.status)) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
