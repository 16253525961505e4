//! Budgets on random trees (depth ≤ 4, fan-out ≤ 8; sync, async and message children; random
//! usage per turn; random token and money pools on the root and on spawns), on the memory
//! and SQLite stores. Every call keeps to its reservation (its output under its cap, its
//! input under the estimate), so the stated bound is zero: after every run has ended, no
//! pool has spent more than its limit, own and aggregate tokens and cost reconcile, and
//! nothing stays reserved.

use std::sync::Arc;

use arbor_core::budget::{Budget, BudgetPolicy};
use arbor_core::pricing::{Price, PriceTable};
use arbor_core::process::usage::reconcile;
use arbor_core::supervisor::{
    ChildEntry, LimitsInput, Ownership, SpawnAgentTool, Supervisor, factory_fn,
};
use arbor_core::{Agent, RunOptions};
use arbor_model::{Controls, Script, ScriptedProvider, ScriptedToolCall, ScriptedTurn};
use arbor_protocol::{RunLimits, Usage};
use arbor_store::{MemoryStore, SessionQuery, Store};
use proptest::prelude::*;
use serde_json::json;

/// Every answer is capped here (the provider would cut it).
const CAP: u32 = 3_000;

#[derive(Debug, Clone)]
struct Node {
    /// Its parent's index (node 0 is the root).
    parent: usize,
    mode: &'static str,
    /// A pool asked for when it is spawned: tokens and/or micro-dollars.
    pool: Option<(Option<u64>, Option<u64>)>,
    /// Each turn's (input, output) tokens: the spawning turn first, then its answer.
    turns: [(u64, u64); 2],
}

#[derive(Debug, Clone)]
struct Tree {
    root_pool: (Option<u64>, Option<u64>),
    nodes: Vec<Node>,
}

fn depth(nodes: &[Node], mut i: usize) -> usize {
    let mut d = 0;
    while i != 0 {
        i = nodes[i].parent;
        d += 1;
    }
    d
}

fn pool() -> impl Strategy<Value = (Option<u64>, Option<u64>)> {
    (
        proptest::option::of(1_000u64..40_000),
        proptest::option::of(1_000u64..60_000),
    )
}

fn trees() -> impl Strategy<Value = Tree> {
    let node = (
        any::<prop::sample::Index>(),
        prop_oneof![Just("sync"), Just("async"), Just("message")],
        proptest::option::of(pool()),
        ((1u64..6, 1u64..CAP as u64), (1u64..6, 1u64..CAP as u64)),
    );
    (pool(), proptest::collection::vec(node, 1..12)).prop_map(|(root_pool, raw)| {
        let mut nodes = vec![Node {
            parent: 0,
            mode: "sync",
            pool: None,
            turns: [(1, 1), (1, 1)],
        }];
        for (pick, mode, pool, (a, b)) in raw {
            // A parent of depth ≤ 3 with fewer than 8 children.
            let open: Vec<usize> = (0..nodes.len())
                .filter(|&p| {
                    depth(&nodes, p) < 4
                        && nodes.iter().skip(1).filter(|n| n.parent == p).count() < 8
                })
                .collect();
            let parent = open[pick.index(open.len())];
            nodes.push(Node {
                parent,
                mode,
                pool,
                turns: [a, b],
            });
        }
        Tree { root_pool, nodes }
    })
}

fn turn(calls: Vec<ScriptedToolCall>, (input, output): (u64, u64)) -> ScriptedTurn {
    let mut t = ScriptedTurn::text("ok");
    t.tool_calls = calls;
    t.usage = Some(Usage::new(input, output));
    t
}

fn script(tree: &Tree, i: usize) -> Script {
    let node = &tree.nodes[i];
    let calls: Vec<ScriptedToolCall> = (1..tree.nodes.len())
        .filter(|&k| k != i && tree.nodes[k].parent == i)
        .map(|k| {
            let kid = &tree.nodes[k];
            let mut args = json!({"child_id": format!("n{k}"), "input": "go", "mode": kid.mode});
            if let Some((tokens, micros)) = kid.pool {
                let mut b = serde_json::Map::new();
                if let Some(t) = tokens {
                    b.insert("max_tree_tokens".into(), json!(t));
                }
                if let Some(m) = micros {
                    b.insert("max_tree_cost".into(), json!(m as f64 / 1e6));
                }
                if !b.is_empty() {
                    args["budget"] = b.into();
                }
            }
            ScriptedToolCall {
                id: None,
                name: "spawn_agent".into(),
                arguments: args,
            }
        })
        .collect();
    let mut turns = Vec::new();
    if !calls.is_empty() {
        turns.push(turn(calls, node.turns[0]));
    }
    turns.push(turn(Vec::new(), node.turns[1]));
    Script::new(turns)
}

fn prices() -> Arc<PriceTable> {
    Arc::new(
        PriceTable::builder()
            .price("*", Price::per_million(1.0, 2.0))
            .build()
            .unwrap(),
    )
}

fn agent(name: String, script: Script, delegator: arbor_core::supervisor::Delegator) -> Agent {
    let controls: Controls = serde_json::from_value(json!({ "max_output_tokens": CAP })).unwrap();
    Agent::builder(name)
        .provider(ScriptedProvider::new(script))
        .controls(controls)
        .limits(RunLimits {
            max_tokens: 1_000_000,
            ..RunLimits::DEFAULT
        })
        .pricing(prices())
        .dyn_tool(Arc::new(SpawnAgentTool::new(delegator)))
        .build()
        .unwrap()
}

async fn run_tree(tree: Tree, store: Arc<dyn Store>) {
    let limits = LimitsInput {
        max_depth: Some(5),
        max_active_children: Some(32),
        max_tokens: Some(1_000_000),
        ..LimitsInput::default()
    };
    let mut b = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .limits(limits)
        .pricing(prices())
        .budget_policy(BudgetPolicy::Clamp);
    for i in 1..tree.nodes.len() {
        let s = script(&tree, i);
        b = b.child(ChildEntry::new(
            format!("n{i}"),
            factory_fn(move |ctx| {
                let s = s.clone();
                async move { Ok(agent(ctx.child_id.clone(), s, ctx.delegator.clone())) }
            }),
        ));
    }
    let sup = b.build().unwrap();
    let (tokens, micros) = tree.root_pool;
    let budget = Budget {
        max_tree_tokens: tokens,
        max_tree_cost_micros: micros,
        low_percent: None,
    };
    let root_agent = agent("root".into(), script(&tree, 0), sup.delegator());
    let mut builder = root_agent.session().store(store.clone());
    if !budget.is_empty() {
        builder = builder.budget(budget);
    }
    let mut root = builder.create().await.unwrap();
    root.run(
        "go",
        RunOptions::default().with_nested(Arc::new(sup.clone())),
    )
    .await
    .unwrap();
    sup.wait_for_mail_or_quiet(&arbor_core::inbox::Inbox::new())
        .await;

    let check = reconcile(store.as_ref(), root.id()).await.unwrap();
    assert!(check.is_consistent(), "{:#?}", check.mismatches);
    let Some(ledger) = store
        .checkpoint("budget", &root.id().to_string())
        .await
        .unwrap()
    else {
        return;
    };
    assert_eq!(
        ledger.value["holds"]
            .as_object()
            .map_or(0, serde_json::Map::len),
        0,
        "reservations left: {}",
        ledger.value
    );
    let sessions = store
        .list_sessions(SessionQuery::Tree(root.id()))
        .await
        .unwrap();
    for (owner, pool) in ledger.value["pools"].as_object().unwrap() {
        let Some(s) = sessions.iter().find(|s| s.id.to_string() == *owner) else {
            continue;
        };
        let limit = |key: &str| pool["budget"][key].as_u64();
        if let Some(max) = limit("max_tree_tokens") {
            let spent = s.aggregate_usage().total_tokens;
            assert!(spent <= max, "pool {owner}: {spent} tokens of {max}");
        }
        if let Some(max) = limit("max_tree_cost_micros") {
            let spent = s.aggregate_cost();
            assert!(spent <= max, "pool {owner}: {spent} micro-units of {max}");
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn pools_hold_on_random_trees_in_memory(tree in trees()) {
        runtime().block_on(run_tree(tree, Arc::new(MemoryStore::new())));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn pools_hold_on_random_trees_on_sqlite(tree in trees()) {
        let dir = tempfile::tempdir().unwrap();
        let store = arbor_store_sqlite::SqliteStore::open(dir.path().join("a.db")).unwrap();
        runtime().block_on(run_tree(tree, Arc::new(store)));
    }
}
