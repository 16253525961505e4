//! The two token totals on random trees: whatever the shape and however the sessions'
//! runs interleave, own usage summed over the tree equals the root's aggregate, every
//! attributed figure equals its descendants' own usage, every record equals the replay of its
//! transcript, and context sizes come from each session's own prompt only.

use std::sync::Arc;

use arbor_core::process::usage::reconcile;
use arbor_core::{Agent, RunOptions, Session, SessionRef};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{EntryKind, Usage};
use arbor_store::{MemoryStore, SessionQuery, Store};
use proptest::prelude::*;

/// Node `i` (from 1) has a parent below `i`; each node runs its turns' usages in order.
#[derive(Debug, Clone)]
struct Tree {
    parents: Vec<usize>,
    turns: Vec<Vec<(u64, u64)>>,
}

fn trees() -> impl Strategy<Value = Tree> {
    (1usize..10).prop_flat_map(|n| {
        let parents = (1..n).map(|i| 0..i).collect::<Vec<_>>();
        let turns = proptest::collection::vec(
            proptest::collection::vec((0u64..50_000, 0u64..5_000), 1..4),
            n,
        );
        (parents, turns).prop_map(|(parents, turns)| Tree { parents, turns })
    })
}

fn agent(turns: &[(u64, u64)]) -> Agent {
    let script = Script::new(
        turns
            .iter()
            .map(|&(i, o)| ScriptedTurn::text("ok").with_usage(i, o)),
    );
    Agent::builder("node")
        .provider(ScriptedProvider::new(script))
        .build()
        .unwrap()
}

async fn run_tree(tree: Tree) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut sessions: Vec<Session> = Vec::new();
    for (i, turns) in tree.turns.iter().enumerate() {
        let mut builder = agent(turns)
            .session()
            .store(store.clone())
            .name(format!("node-{i}"));
        if i > 0 {
            let parent: SessionRef = sessions[tree.parents[i - 1]].as_ref();
            builder = builder.parent(parent);
        }
        sessions.push(builder.create().await.unwrap());
    }
    let root = sessions[0].id();
    // Every session runs its turns (one run per turn), all sessions at once.
    let runs = sessions.into_iter().enumerate().map(|(i, mut s)| {
        let n = tree.turns[i].len();
        tokio::spawn(async move {
            for _ in 0..n {
                s.run("go", RunOptions::default()).await.unwrap();
            }
        })
    });
    for r in futures::future::join_all(runs).await {
        r.unwrap();
    }

    let spent: u64 = tree.turns.iter().flatten().map(|&(i, o)| i + o).sum();
    let check = reconcile(store.as_ref(), root).await.unwrap();
    assert!(check.is_consistent(), "{:#?}", check.mismatches);
    assert_eq!(check.own_total_tokens, spent);
    assert_eq!(check.root_aggregate_tokens, spent);
    assert_eq!(check.sessions, tree.turns.len());
    let records = store.list_sessions(SessionQuery::Tree(root)).await.unwrap();
    for record in &records {
        let i: usize = record.name["node-".len()..].parse().unwrap();
        let last_prompt = tree.turns[i].last().unwrap().0;
        assert_eq!(
            record.context_tokens, last_prompt,
            "context is the own prompt"
        );
        let own: u64 = tree.turns[i].iter().map(|&(i, o)| i + o).sum();
        assert_eq!(record.own_usage.total_tokens, own);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn own_usage_over_the_tree_reconciles_with_the_root_aggregate(tree in trees()) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(run_tree(tree));
    }
}

#[tokio::test]
async fn attribution_names_the_parent_turn_and_the_aggregate_after_it() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut root = agent(&[(40_000, 0)])
        .session()
        .store(store.clone())
        .name("root")
        .create()
        .await
        .unwrap();
    root.run("go", RunOptions::default()).await.unwrap();
    let point = arbor_protocol::SpawnPoint {
        run_id: arbor_protocol::RunId::new(),
        turn: 1,
    };
    let mut kid = agent(&[(180_000, 0)])
        .session()
        .store(store.clone())
        .name("api-review")
        .parent(root.as_ref())
        .spawned_by(point)
        .create()
        .await
        .unwrap();
    kid.run("review", RunOptions::default()).await.unwrap();
    let entries = store.transcript(root.id(), 0, None).await.unwrap();
    let attributed: Vec<_> = entries
        .iter()
        .filter(|e| matches!(e.kind, EntryKind::UsageAttributed { .. }))
        .collect();
    assert_eq!(attributed.len(), 1);
    assert_eq!(attributed[0].run_id, point.run_id);
    assert_eq!(
        attributed[0].kind,
        EntryKind::UsageAttributed {
            from: kid.id(),
            via: kid.id(),
            target: Some(point),
            child_usage: Usage::new(180_000, 0),
            aggregate: Usage::new(220_000, 0),
        }
    );
    let record = store.session(root.id()).await.unwrap().unwrap();
    assert_eq!(record.context_tokens, 40_000);
    assert_eq!(record.aggregate_usage().total_tokens, 220_000);
    assert!(
        reconcile(store.as_ref(), root.id())
            .await
            .unwrap()
            .is_consistent()
    );
}
