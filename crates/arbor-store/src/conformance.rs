//! The conformance suite every [`Store`] backend passes.
//!
//! Call [`run_all`] from the backend's tests with a fresh store, inside a multi-thread tokio
//! runtime (`#[tokio::test(flavor = "multi_thread")]`): the concurrency checks drive the store
//! from several OS threads at once.
//!
//! Every check is a `pub async fn` usable on its own. Each creates its own sessions with fresh
//! ids, so the checks can share one store and tolerate sessions other checks left behind. One
//! exception to keep in mind when running checks concurrently: [`mark_interrupted`] acts on
//! the whole store, so it must not run while another check holds a `running` session.
//!
//! Failures panic with a message naming the backend and the check.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod checkpoints;
mod concurrency;
mod listing;
mod registry;
mod sessions;
mod transcript;

use std::fmt::Debug;
use std::future::Future;

use arbor_protocol::{
    EntryKind, LimitKind, Message, RunLimitBreach, RunStatus, SessionId, StopReason, ToolCall,
    ToolResult, Usage,
};
use tokio::runtime::{Handle, RuntimeFlavor};

use crate::{SessionRecord, Store, StoreError, StoreErrorKind, StoreResult};

pub use checkpoints::{
    checkpoint_writes_are_compare_and_swap, concurrent_checkpoint_writes_one_winner,
};
pub use concurrency::{concurrent_appends, concurrent_batches, concurrent_cas, concurrent_creates};
pub use listing::{
    census_counts_by_group_root_and_status, list_sessions_orders_and_scopes,
    roots_page_matches_meta_exactly, roots_page_pages_newest_first_and_filters,
};
pub use registry::renames_keep_sibling_names_unique;
pub use registry::{
    append_attributed_is_atomic, attributions_reach_every_ancestor, concurrent_attributions_sum,
    concurrent_same_name_creates_one_wins, sibling_names_are_unique_until_deleted,
};
pub use sessions::{
    create_child_of_unknown_parent_is_not_found, create_duplicate_id_is_refused,
    create_round_trips_every_field, unknown_session_is_none, update_applies_only_set_fields,
    update_unknown_is_not_found, update_with_stale_version_conflicts,
    updates_for_live_sessions_refuse_a_deleted_one,
};
pub use transcript::{
    append_numbers_entries, append_to_unknown_is_not_found, append_with_update_is_atomic,
    mark_interrupted, transcript_of_unknown_is_not_found, transcript_pages,
};

/// Runs every check against `store`, one after the other.
pub async fn run_all(store: &dyn Store) {
    create_round_trips_every_field(store).await;
    create_duplicate_id_is_refused(store).await;
    create_child_of_unknown_parent_is_not_found(store).await;
    unknown_session_is_none(store).await;
    update_applies_only_set_fields(store).await;
    update_with_stale_version_conflicts(store).await;
    update_unknown_is_not_found(store).await;
    updates_for_live_sessions_refuse_a_deleted_one(store).await;
    list_sessions_orders_and_scopes(store).await;
    census_counts_by_group_root_and_status(store).await;
    roots_page_pages_newest_first_and_filters(store).await;
    roots_page_matches_meta_exactly(store).await;
    append_numbers_entries(store).await;
    append_with_update_is_atomic(store).await;
    append_to_unknown_is_not_found(store).await;
    transcript_pages(store).await;
    transcript_of_unknown_is_not_found(store).await;
    mark_interrupted(store).await;
    concurrent_appends(store).await;
    concurrent_batches(store).await;
    concurrent_cas(store).await;
    concurrent_creates(store).await;
    sibling_names_are_unique_until_deleted(store).await;
    renames_keep_sibling_names_unique(store).await;
    concurrent_same_name_creates_one_wins(store).await;
    attributions_reach_every_ancestor(store).await;
    append_attributed_is_atomic(store).await;
    concurrent_attributions_sum(store).await;
    checkpoint_writes_are_compare_and_swap(store).await;
    concurrent_checkpoint_writes_one_winner(store).await;
}

/// A fresh root record with default fields.
fn root(name: &str) -> SessionRecord {
    SessionRecord::new_root(name, "conformance-agent", "conformance-model")
}

/// A fresh child record of `parent` with default fields.
fn child(parent: &SessionRecord, name: &str) -> SessionRecord {
    SessionRecord::new_child(parent, name, "conformance-agent", "conformance-model")
}

/// Creates `record`, panicking with the check's name on failure.
async fn create(store: &dyn Store, check: &str, record: &SessionRecord) {
    if let Err(e) = store.create_session(record).await {
        panic!(
            "[{}] {check}: create_session({}) failed: {e}",
            store.backend(),
            record.id
        );
    }
}

/// The stored record of `id`, which must exist.
async fn get(store: &dyn Store, check: &str, id: SessionId) -> SessionRecord {
    match store.session(id).await {
        Ok(Some(record)) => record,
        Ok(None) => panic!("[{}] {check}: session {id} is missing", store.backend()),
        Err(e) => panic!("[{}] {check}: session({id}) failed: {e}", store.backend()),
    }
}

/// Unwraps the error of `result`, asserting its kind.
fn expect_err<T: Debug>(
    backend: &str,
    check: &str,
    result: StoreResult<T>,
    kind: StoreErrorKind,
) -> StoreError {
    match result {
        Ok(value) => panic!("[{backend}] {check}: expected a {kind:?} error, got Ok({value:?})"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "[{backend}] {check}: wrong error kind: {e}");
            e
        }
    }
}

/// One entry of every [`EntryKind`] variant (and every [`Message`] variant), with the optional
/// fields both set and left out.
fn all_entry_kinds() -> Vec<EntryKind> {
    let mut all = message_entry_kinds();
    all.extend(accounting_entry_kinds());
    all
}

/// The entries of a conversation: a run's start, and every [`Message`] variant.
fn message_entry_kinds() -> Vec<EntryKind> {
    vec![
        EntryKind::RunStarted {
            agent: "planner".into(),
            model: "model-a".into(),
            trace: None,
        },
        EntryKind::RunStarted {
            agent: "planner".into(),
            model: "model-a".into(),
            trace: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        },
        EntryKind::Message {
            message: Message::system("be brief"),
        },
        EntryKind::Message {
            message: Message::user("hello \"world\" ✓ \u{1F600}\nsecond line"),
        },
        EntryKind::Message {
            message: Message::Assistant {
                content: String::new(),
                tool_calls: vec![
                    ToolCall {
                        id: "call-1".into(),
                        name: "search".into(),
                        arguments: serde_json::json!({"q": "x", "n": 3, "deep": {"a": [1, 2.5, null]}}),
                    },
                    ToolCall {
                        id: "call-2".into(),
                        name: "echo".into(),
                        arguments: serde_json::json!("plain"),
                    },
                ],
            },
        },
        EntryKind::Message {
            message: Message::Tool(ToolResult {
                call_id: "call-1".into(),
                name: "search".into(),
                content: "no results".into(),
                is_error: true,
            }),
        },
        EntryKind::Message {
            message: Message::assistant("done"),
        },
    ]
}

/// The entries of a run's accounting and bookkeeping (usage, its end, attributions, dropped
/// messages, a rename).
fn accounting_entry_kinds() -> Vec<EntryKind> {
    vec![
        EntryKind::Usage {
            turn: 2,
            usage: Usage {
                input_tokens: 100,
                output_tokens: 20,
                total_tokens: 120,
                cache_read_tokens: 64,
                cache_write_tokens: 8,
            },
            context_tokens: 100,
        },
        EntryKind::RunFinished {
            status: RunStatus::Succeeded,
            stop_reason: StopReason::Completed,
            usage: Usage::new(100, 20),
            breach: None,
            error: None,
        },
        EntryKind::RunFinished {
            status: RunStatus::Failed,
            stop_reason: StopReason::TokenLimit,
            usage: Usage::new(5000, 10),
            breach: Some(RunLimitBreach {
                limit: LimitKind::MaxTokens,
                maximum: 4096,
                observed: 5010,
            }),
            error: Some("token limit".into()),
        },
        EntryKind::UsageAttributed {
            from: SessionId::new(),
            via: SessionId::new(),
            target: Some(arbor_protocol::SpawnPoint {
                run_id: arbor_protocol::RunId::new(),
                turn: 3,
            }),
            child_usage: Usage::new(7, 8),
            aggregate: Usage::new(70, 80),
        },
        EntryKind::UsageAttributed {
            from: SessionId::new(),
            via: SessionId::new(),
            target: None,
            child_usage: Usage::new(1, 1),
            aggregate: Usage::new(2, 2),
        },
        EntryKind::InboxDropped {
            ids: vec!["msg_1".into(), "msg_2".into()],
            reason: "the child could not start".into(),
        },
        EntryKind::Renamed {
            from: "old".into(),
            to: "new \"name\"".into(),
            by: "user:ann".into(),
        },
    ]
}

/// A user message tagged with `task` and `index`, read back by [`entry_tag`].
fn tagged_entry(task: usize, index: usize) -> EntryKind {
    EntryKind::Message {
        message: Message::user(format!("{task}:{index}")),
    }
}

/// The `(task, index)` of an entry written by [`tagged_entry`].
fn entry_tag(kind: &EntryKind) -> (usize, usize) {
    let EntryKind::Message { message } = kind else {
        panic!("unexpected entry {kind:?}");
    };
    let (task, index) = message
        .text()
        .split_once(':')
        .unwrap_or_else(|| panic!("unexpected entry {kind:?}"));
    (task.parse().unwrap(), index.parse().unwrap())
}

/// Runs `f(0)`, …, `f(tasks - 1)` at the same time, each on its own OS thread driven by the
/// current tokio runtime, and returns their outputs in task order.
fn parallel<T, Fut, F>(tasks: usize, f: F) -> Vec<T>
where
    T: Send,
    Fut: Future<Output = T>,
    F: Fn(usize) -> Fut + Sync,
{
    let handle = Handle::try_current()
        .expect("the conformance suite runs inside a tokio runtime (#[tokio::test])");
    assert_eq!(
        handle.runtime_flavor(),
        RuntimeFlavor::MultiThread,
        "the conformance suite needs a multi-thread runtime: #[tokio::test(flavor = \"multi_thread\")]"
    );
    let start = std::sync::Barrier::new(tasks);
    tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let threads: Vec<_> = (0..tasks)
                .map(|task| {
                    let (f, handle, start) = (&f, &handle, &start);
                    scope.spawn(move || {
                        start.wait();
                        handle.block_on(f(task))
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    })
}
