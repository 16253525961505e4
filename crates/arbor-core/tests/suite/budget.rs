//! Budgets for whole trees: a pool refuses the next model call (or spawn) it cannot cover,
//! before it is made; sibling calls reserve before they spend, so a pool never overshoots
//! while calls keep to their reservation; a child's pool is clamped to what its parent's has
//! left and its unspent part returns when it ends; nothing stays reserved once runs end.

use std::sync::Arc;
use std::time::Duration;

use arbor_core::budget::{Budget, BudgetPolicy};
use arbor_core::supervisor::{ChildEntry, Ownership, SpawnAgentTool, Supervisor, factory_fn};
use arbor_core::{Agent, RunOptions, Session, SessionRef};
use arbor_model::{Controls, Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{RunLimits, RunStatus, StopReason, Usage};
use arbor_store::{MemoryStore, Store};
use serde_json::json;

/// A turn that answers, having read `input` tokens and written `output`.
fn spend(input: u64, output: u64) -> ScriptedTurn {
    ScriptedTurn::text("spent").with_usage(input, output)
}

fn spawn(child: &str) -> ScriptedTurn {
    ScriptedTurn::tool_call(
        "spawn_agent",
        json!({"child_id": child, "name": child, "input": "go"}),
    )
    .with_usage(10, 10)
}

/// Run limits that leave the spending to the pools.
const ROOMY: RunLimits = RunLimits {
    max_tokens: 1_000_000,
    ..RunLimits::DEFAULT
};

/// Its answers are at most `cap` tokens long (the provider would cut them there).
fn capped(cap: u32) -> Controls {
    serde_json::from_value(json!({ "max_output_tokens": cap })).unwrap()
}

/// A supervisor whose entries run their scripts, with `spawn_agent`, answers capped at
/// `cap`; each entry may carry a default pool.
fn supervisor(
    store: &Arc<dyn Store>,
    cap: u32,
    entries: Vec<(&'static str, Vec<ScriptedTurn>, Option<Budget>)>,
    policy: BudgetPolicy,
) -> Supervisor {
    let mut b = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .budget_policy(policy);
    for (id, turns, budget) in entries {
        let script = Script::new(turns);
        let mut entry = ChildEntry::new(
            id,
            factory_fn(move |ctx| {
                let script = script.clone();
                async move {
                    Agent::builder(ctx.child_id.clone())
                        .provider(ScriptedProvider::new(script))
                        .controls(capped(cap))
                        .dyn_tool(Arc::new(SpawnAgentTool::new(ctx.delegator.clone())))
                        .build()
                }
            }),
        );
        if let Some(b) = budget {
            entry = entry.budget(b);
        }
        b = b.child(entry);
    }
    b.build().unwrap()
}

async fn root(
    sup: &Supervisor,
    store: &Arc<dyn Store>,
    cap: u32,
    turns: Vec<ScriptedTurn>,
    budget: Budget,
) -> Session {
    Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new(turns)))
        .controls(capped(cap))
        .limits(ROOMY)
        .dyn_tool(Arc::new(SpawnAgentTool::new(sup.delegator())))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .budget(budget)
        .create()
        .await
        .unwrap()
}

/// What the ledger still reserves for calls in flight.
async fn holds(store: &Arc<dyn Store>, root: &Session) -> usize {
    let cp = store
        .checkpoint("budget", &root.id().to_string())
        .await
        .unwrap()
        .expect("the tree has a ledger");
    cp.value["holds"]
        .as_object()
        .map_or(0, serde_json::Map::len)
}

#[tokio::test]
async fn a_three_deep_chain_never_spends_more_than_its_pool() {
    // The reported leak: a 100,000-token pool, three generations that would each spend
    // 90,000 (their answers capped at 90,000, as the provider enforces).
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(
        &store,
        90_000,
        vec![
            ("child", vec![spawn("grandchild"), spend(10, 89_990)], None),
            ("grandchild", vec![spend(10, 89_990)], None),
        ],
        BudgetPolicy::Clamp,
    );
    let mut top = root(
        &sup,
        &store,
        90_000,
        vec![spawn("child"), spend(10, 89_990)],
        Budget::tokens(100_000),
    )
    .await;
    let r = top
        .run(
            "go",
            RunOptions::default().with_nested(Arc::new(sup.clone())),
        )
        .await
        .unwrap();
    assert_eq!(
        (r.status, r.stop_reason),
        (RunStatus::Failed, StopReason::BudgetExhausted)
    );
    let error = r.error.unwrap();
    assert!(
        error.starts_with(&format!(
            "budget exhausted: the pool of session {} (max_tree_tokens = 100000 tokens) has \
             spent",
            top.id()
        )),
        "{error}"
    );
    let record = store.session(top.id()).await.unwrap().unwrap();
    let spent = record.aggregate_usage().total_tokens;
    // The grandchild's 90,000 and the two spawn turns; the child's and the root's second
    // calls were refused before they were made.
    assert_eq!(spent, 90_000 + 20 + 20, "spent {spent}");
    assert!(spent <= 100_000);
    assert_eq!(holds(&store, &top).await, 0, "nothing stays reserved");
    let pools = arbor_core::budget::pools(store.as_ref(), top.id())
        .await
        .unwrap();
    assert_eq!(pools.len(), 1);
    assert_eq!(
        (
            pools[0].session,
            pools[0].spent.tokens,
            pools[0].reserved.tokens,
            pools[0].budget.max_tree_tokens
        ),
        (top.id(), 90_040, 0, Some(100_000))
    );
    let check = arbor_core::process::usage::reconcile(store.as_ref(), top.id())
        .await
        .unwrap();
    assert!(check.is_consistent(), "{:#?}", check.mismatches);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn siblings_spending_at_once_never_overshoot_their_pool() {
    // Eight children of one pooled root start their one 30,000-token call at once: only
    // three reservations fit in 100,000; the others are refused before their call.
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let top = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([])))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .budget(Budget::tokens(100_000))
        .create()
        .await
        .unwrap();
    let mut kids = Vec::new();
    for i in 0..8 {
        let turn = spend(10, 29_990).with_delay(Duration::from_millis(200));
        let kid = Agent::builder("kid")
            .provider(ScriptedProvider::new(Script::new([turn])))
            .controls(capped(30_000))
            .limits(ROOMY)
            .build()
            .unwrap()
            .session()
            .store(store.clone())
            .name(format!("kid-{i}"))
            .parent(SessionRef::from(top.record()))
            .create()
            .await
            .unwrap();
        kids.push(kid);
    }
    let runs = kids.into_iter().map(|mut k| {
        tokio::spawn(async move { k.run("go", RunOptions::default()).await.unwrap() })
    });
    let results: Vec<_> = futures::future::join_all(runs)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let ran = results
        .iter()
        .filter(|r| r.status == RunStatus::Succeeded)
        .count();
    let refused = results
        .iter()
        .filter(|r| r.stop_reason == StopReason::BudgetExhausted)
        .count();
    assert_eq!((ran, refused), (3, 5));
    let record = store.session(top.id()).await.unwrap().unwrap();
    assert_eq!(record.aggregate_usage().total_tokens, 90_000);
    assert_eq!(holds(&store, &top).await, 0);
}

#[tokio::test]
async fn a_childs_pool_is_clamped_and_its_unspent_part_returns_when_it_ends() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // The child asks for 500,000 of a 100,000 pool: it gets what is left, and says so.
    // It spends 10,000 and ends; the root's next call, which could not fit beside the
    // child's reservation, fits once the unspent part is back.
    let sup = supervisor(
        &store,
        60_000,
        vec![(
            "child",
            vec![spend(10, 9_990)],
            Some(Budget::tokens(500_000)),
        )],
        BudgetPolicy::Clamp,
    );
    let mut top = root(
        &sup,
        &store,
        60_000,
        vec![spawn("child"), spend(10, 59_990)],
        Budget::tokens(100_000),
    )
    .await;
    let r = top
        .run(
            "go",
            RunOptions::default().with_nested(Arc::new(sup.clone())),
        )
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.error);
    let kids = store
        .list_sessions(arbor_store::SessionQuery::Children(top.id()))
        .await
        .unwrap();
    let kid = &kids[0];
    assert_eq!(kid.meta["budget_clamped"], true);
    // What the root had left when the child was admitted: its spawn turn was settled (its
    // usage stored, its reservation released) before its tools ran.
    assert_eq!(kid.meta["budget"]["max_tree_tokens"], 100_000 - 20);
    let record = store.session(top.id()).await.unwrap().unwrap();
    assert_eq!(record.aggregate_usage().total_tokens, 20 + 10_000 + 60_000);
    assert_eq!(holds(&store, &top).await, 0);
}

#[tokio::test]
async fn a_refuse_policy_or_a_pool_too_small_refuses_the_spawn_as_a_tool_error() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(
        &store,
        1_000,
        vec![("child", vec![spend(10, 10)], Some(Budget::tokens(500_000)))],
        BudgetPolicy::Refuse,
    );
    let mut top = root(
        &sup,
        &store,
        1_000,
        vec![
            spawn("child"),
            ScriptedTurn::text("done").with_usage(10, 10),
        ],
        Budget::tokens(100_000),
    )
    .await;
    let r = top
        .run(
            "go",
            RunOptions::default().with_nested(Arc::new(sup.clone())),
        )
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.error);
    let results = super::support::tool_results(top.messages());
    assert!(
        results[0].contains("budget exhausted: the pool of session")
            && results[0].contains("this needs 500000 tokens more"),
        "{results:?}"
    );
    assert!(
        store
            .list_sessions(arbor_store::SessionQuery::Children(top.id()))
            .await
            .unwrap()
            .is_empty(),
        "a refused spawn leaves no record"
    );
}

#[tokio::test]
async fn a_pool_holds_across_a_reopened_session() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(arbor_store_sqlite::SqliteStore::open(dir.path().join("a.db")).unwrap());
    let agent = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([
            spend(10, 5_990),
            spend(10, 5_990),
        ])))
        .controls(capped(6_000))
        .build()
        .unwrap();
    let mut s = agent
        .session()
        .store(store.clone())
        .budget(Budget::tokens(10_000))
        .create()
        .await
        .unwrap();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Succeeded);
    let id = s.id();
    drop(s);
    // Another process opens it: the pool is in the store, and refuses the next call.
    let mut again = agent.open_session(store.clone(), id).await.unwrap();
    let r = again.run("more", RunOptions::default()).await.unwrap();
    assert_eq!(r.stop_reason, StopReason::BudgetExhausted, "{:?}", r.error);
    assert_eq!(r.usage, Usage::default(), "the call was not made");
}

#[tokio::test]
async fn the_models_budget_argument_is_granted_and_the_result_says_it_was_clamped() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(
        &store,
        1_000,
        vec![("child", vec![spend(10, 90)], None)],
        BudgetPolicy::Clamp,
    );
    let ask = ScriptedTurn::tool_call(
        "spawn_agent",
        json!({"child_id": "child", "input": "go", "budget": {"max_tree_tokens": 500_000}}),
    )
    .with_usage(10, 10);
    let mut top = root(
        &sup,
        &store,
        1_000,
        vec![ask, ScriptedTurn::text("done").with_usage(10, 10)],
        Budget::tokens(100_000),
    )
    .await;
    let r = top
        .run(
            "go",
            RunOptions::default().with_nested(Arc::new(sup.clone())),
        )
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.error);
    let results = super::support::tool_results(top.messages());
    let answer: serde_json::Value = serde_json::from_str(&results[0]).unwrap();
    assert_eq!(
        answer["budget"],
        json!({"max_tree_tokens": 99_980, "clamped": true}),
        "{answer}"
    );
    // A bad amount is the model's to fix, named.
    let bad = SpawnAgentTool::new(sup.delegator())
        .host_request(
            json!({"child_id": "child", "input": "go", "budget": {"max_tree_tokens": 0}}),
            SessionRef::from(top.record()),
        )
        .unwrap_err();
    assert!(bad.to_string().contains("budget.max_tree_tokens"), "{bad}");
}

#[tokio::test]
async fn budget_low_fires_once_when_the_subtree_has_spent_its_low_mark() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // Ten runs of about 1,000 tokens each under a 10,000-token pool that warns at 50 %.
    let turns: Vec<ScriptedTurn> = (0..10).map(|_| spend(5, 995)).collect();
    let mut s = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new(turns)))
        .controls(capped(1_000))
        .limits(ROOMY)
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .budget(Budget::tokens(10_000).low_at(50))
        .create()
        .await
        .unwrap();
    let mut lows = Vec::new();
    for run in 0..10 {
        let mut sub = s.subscribe();
        let r = s.run("go", RunOptions::default()).await.unwrap();
        for e in super::support::drain(&mut sub) {
            if let arbor_protocol::AgentEvent::BudgetLow {
                pool,
                limit_name,
                limit,
                used,
            } = &e.event
            {
                lows.push((run, *pool, limit_name.clone(), *limit, *used));
            }
        }
        if r.stop_reason == StopReason::BudgetExhausted {
            break;
        }
    }
    // Told once, by the first call after 5,000 were spent (five runs of 1,000).
    assert_eq!(
        lows,
        [(5, s.id(), "max_tree_tokens".to_owned(), 10_000, 5_000)]
    );
}

/// A child's pool whose record is still being written counts in its parent's pool: a sibling
/// admitted meanwhile gets what is left after it (the review's interleaving, forced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_record_is_being_written_already_holds_its_place() {
    use arbor_store::testing::{Call, FaultStore};
    let faults = FaultStore::new(Arc::new(MemoryStore::new()));
    let store: Arc<dyn Store> = faults.clone();
    let top = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([])))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .budget(Budget::tokens(100_000))
        .create()
        .await
        .unwrap();
    let kid = |name: &'static str| {
        let store = store.clone();
        let parent = SessionRef::from(top.record());
        async move {
            Agent::builder("kid")
                .provider(ScriptedProvider::new(Script::new([])))
                .build()
                .unwrap()
                .session()
                .store(store)
                .name(name)
                .parent(parent)
                .budget(Budget::tokens(80_000))
                .create()
                .await
                .unwrap()
        }
    };
    // The first child's record is held after its pool was opened.
    let held = faults.arm(false, |c| matches!(c, Call::Create(r) if r.name == "a"));
    let first = tokio::spawn(kid("a"));
    held.reached.await.unwrap();
    let b = kid("b").await;
    held.release.send(()).unwrap();
    let a = first.await.unwrap();
    assert_eq!(a.record().meta["budget"]["max_tree_tokens"], 80_000);
    assert_eq!(
        (
            b.record().meta["budget"]["max_tree_tokens"].as_u64(),
            b.record().meta["budget_clamped"].as_bool()
        ),
        (Some(20_000), Some(true)),
        "the second child got what the first left"
    );
}

/// A task child's pool, once returned, never holds its place again: a child that runs again
/// after it ended reserves in its parent's pool too.
#[tokio::test]
async fn a_returned_pool_does_not_reopen_when_its_child_runs_again() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // The child asks for 60,000 and spends 10,000; its 50,000 return. The root then spends
    // 80,000 in two runs; the child, woken again, may not spend from its old 50,000.
    let sup = supervisor(
        &store,
        40_000,
        vec![(
            "child",
            vec![spend(10, 9_990), spend(10, 39_990)],
            Some(Budget::tokens(60_000)),
        )],
        BudgetPolicy::Clamp,
    );
    let mut top = root(
        &sup,
        &store,
        40_000,
        vec![spawn("child"), spend(10, 39_990), spend(10, 39_990)],
        Budget::tokens(100_000),
    )
    .await;
    let opts = || RunOptions::default().with_nested(Arc::new(sup.clone()));
    for input in ["go", "more"] {
        let r = top.run(input, opts()).await.unwrap();
        assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.error);
    }
    let kid = store
        .list_sessions(arbor_store::SessionQuery::Children(top.id()))
        .await
        .unwrap()
        .remove(0);
    // 20 + 10,000 + 80,000 spent: 9,980 left, less than the child's 40,000 call, which its
    // old pool would have let through.
    sup.send_message(arbor_core::supervisor::Sender::Host, kid.id, "again")
        .await
        .unwrap();
    let ended = |store: Arc<dyn Store>, id| async move {
        store
            .transcript(id, 0, None)
            .await
            .unwrap()
            .iter()
            .filter(|e| e.kind.kind_name() == "run_finished")
            .count()
    };
    for _ in 0..200 {
        if ended(store.clone(), kid.id).await == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let last = store.transcript(kid.id, 0, None).await.unwrap();
    let stop = last.iter().rev().find_map(|e| match &e.kind {
        arbor_protocol::EntryKind::RunFinished { stop_reason, .. } => Some(*stop_reason),
        _ => None,
    });
    assert_eq!(stop, Some(StopReason::BudgetExhausted));
    let record = store.session(top.id()).await.unwrap().unwrap();
    assert_eq!(record.aggregate_usage().total_tokens, 20 + 10_000 + 80_000);
}

#[tokio::test]
async fn a_money_pool_refuses_a_call_whose_model_has_no_price() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut s = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([spend(10, 10)])))
        .model("unpriced-model")
        .build()
        .unwrap()
        .session()
        .store(store)
        .budget(Budget::cost_micros(1_000_000))
        .create()
        .await
        .unwrap();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.stop_reason, StopReason::BudgetExhausted);
    assert!(
        r.error
            .unwrap()
            .contains("model \"unpriced-model\" has no price"),
    );
    assert_eq!(r.usage, Usage::default());
}

/// A call cut off by the run's timeout is charged its reservation (the provider may have
/// billed it): the pool counts it as spent, and holds nothing for it.
#[tokio::test(start_paused = true)]
async fn a_call_cut_off_by_the_timeout_is_charged_its_reservation() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let slow = spend(10, 10).with_delay(Duration::from_secs(120));
    let mut s = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([slow])))
        .controls(capped(1_000))
        .limits(RunLimits {
            timeout_ms: 1_000,
            ..ROOMY
        })
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .budget(Budget::tokens(100_000))
        .create()
        .await
        .unwrap();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Timeout);
    let pools = arbor_core::budget::pools(store.as_ref(), s.id())
        .await
        .unwrap();
    assert_eq!(pools[0].reserved.tokens, 0);
    assert!(
        pools[0].spent.tokens > 1_000,
        "charged its worst case: {:?}",
        pools[0]
    );
}
