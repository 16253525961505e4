//! A tree's run from its root: the root runs (or resumes), then again on each batch of its
//! message-mode children's replies until the tree is quiet, and the tree is ended (what still
//! runs stops). A root that stopped on a call waiting for a decision first lets the runs it
//! leaves going reach their own end or suspension. `arbor run`, `arbor resume` and the
//! server's launcher share it; it prints nothing.

use std::sync::Arc;

use arbor_core::{RunOptions, Session};
use arbor_protocol::{RunId, RunStatus};
use tokio_util::sync::CancellationToken;

use crate::tree;

/// How many times the root runs again on its children's replies before the run stops.
const MAX_ROOT_FOLLOW_UPS: u32 = 64;

/// How a root run starts.
#[derive(Debug)]
pub(crate) enum Start {
    /// On the spec's task.
    Task(String),
    /// A suspended run going on with its decisions.
    Resume(RunId),
    /// An interrupted run (its process died) going on from its transcript; what its
    /// continuation closed is sent on the channel given, once the run is over (to report
    /// what happened, not what was predicted).
    Continue(Option<tokio::sync::oneshot::Sender<arbor_core::Continued>>),
    /// A run on what waits in the root's inbox (notices of children continued).
    Inbox,
}

/// Runs (or resumes) the root of an attached tree, runs it again on its children's replies
/// until the tree is quiet (a suspended root's too), and stops what still runs. Prints nothing: `drive_root` and the
/// server's launcher both use it.
pub(crate) async fn run_tree(
    built: &tree::Built,
    session: &mut Session,
    start: Start,
    token: &CancellationToken,
) -> arbor_core::CoreResult<arbor_core::RunResult> {
    let result = drive_tree(built, session, start, token).await;
    // A root that stopped on a call waiting for a decision leaves its message-mode
    // children's runs going: each reaches its own end or suspension before the tree ends.
    if suspended_run(&result).is_some() {
        settle_suspended(built, token).await;
    }
    end_tree(built).await;
    result
}

/// Ends a tree whose run is over: children still live end with it (nothing keeps running
/// unwatched), and so do its MCP servers.
pub(crate) async fn end_tree(built: &tree::Built) {
    if let Some(sup) = &built.supervisor {
        sup.shutdown().await;
    }
    built.close().await;
}

/// Runs the root from `start`, then again on each batch of its message-mode children's
/// replies until the tree is quiet; the tree stays up (see [`end_tree`]).
pub(crate) async fn drive_tree(
    built: &tree::Built,
    session: &mut Session,
    start: Start,
    token: &CancellationToken,
) -> arbor_core::CoreResult<arbor_core::RunResult> {
    let options = || {
        let o = RunOptions::default().with_cancel(token.clone());
        match &built.supervisor {
            Some(sup) => o.with_nested(Arc::new(sup.clone())),
            None => o,
        }
    };
    let mut result = match start {
        Start::Task(task) => session.run(task, options()).await,
        Start::Resume(run) => session.resume(run, options()).await,
        Start::Continue(report) => {
            session
                .continue_interrupted(options())
                .await
                .map(|(continued, r)| {
                    if let Some(report) = report {
                        let _ = report.send(continued);
                    }
                    r
                })
        }
        Start::Inbox => session.run_inbox(options()).await,
    };
    if let Some(sup) = &built.supervisor {
        // Children spawned in message mode answer after the root's turn ended: the root runs
        // again on each batch of replies and notices until the tree is quiet.
        let mut follow_ups = 0;
        while matches!(&result, Ok(r) if r.status == RunStatus::Succeeded)
            && !token.is_cancelled()
            && follow_ups < MAX_ROOT_FOLLOW_UPS
        {
            tokio::select! {
                () = sup.wait_for_mail_or_quiet(session.inbox()) => {}
                () = token.cancelled() => break,
            }
            if session.inbox().is_empty() {
                break;
            }
            follow_ups += 1;
            result = session.run_inbox(options()).await;
        }
    }
    result
}

/// Whether `result` is a root's run that stopped on a call waiting for a decision: the run
/// to resume, if so.
pub(crate) fn suspended_run(
    result: &arbor_core::CoreResult<arbor_core::RunResult>,
) -> Option<RunId> {
    match result {
        Ok(r) if r.status == RunStatus::Suspended => r.suspension.as_ref().map(|s| s.run_id),
        _ => None,
    }
}

/// Waits until the runs a suspended root left going (its message-mode children's) have
/// each reached their own end or suspension (listed with the root's), or `token` is
/// cancelled: the tree is then ended without cancelling any of them.
async fn settle_suspended(built: &tree::Built, token: &CancellationToken) {
    if let Some(sup) = &built.supervisor {
        tokio::select! {
            () = sup.wait_for_quiet() => {}
            () = token.cancelled() => {}
        }
    }
}
