//! What a tree costs: each turn priced when its usage is recorded (as the model the provider
//! said served it, else the agent's), stored with it in integer micro-units, summed into own
//! and attributed cost by the same write as the tokens, and reconciled like them; on the
//! memory and SQLite stores. A supervisor's prices are forced onto its children; a model
//! without a price, where that is an error, is refused before anything runs.

use std::sync::Arc;

use arbor_core::pricing::{Missing, Price, PriceTable};
use arbor_core::process::usage::{reconcile, replay};
use arbor_core::supervisor::{ChildEntry, DelegationRequest, Ownership, Supervisor};
use arbor_core::{Agent, CoreErrorKind, RunOptions, SessionRef};
use arbor_model::{
    ModelEvent, ModelProvider, ModelRequest, ModelStream, Script, ScriptedProvider, ScriptedTurn,
};
use arbor_protocol::{EntryKind, Usage};
use arbor_store::{MemoryStore, SessionRecord, Store};
use futures::StreamExt;

/// A scripted provider that says a dated model served each turn.
#[derive(Debug)]
struct Dated(ScriptedProvider, &'static str);

#[async_trait::async_trait]
impl ModelProvider for Dated {
    fn name(&self) -> &str {
        "dated"
    }

    async fn stream(
        &self,
        request: ModelRequest<'_>,
    ) -> Result<ModelStream, arbor_model::ModelError> {
        let inner = self.0.stream(request).await?;
        let said = futures::stream::iter([Ok(ModelEvent::ResponseModel(self.1.to_owned()))]);
        Ok(Box::pin(said.chain(inner)))
    }
}

fn table() -> Arc<PriceTable> {
    Arc::new(
        PriceTable::builder()
            .price(
                "claude-sonnet-4*",
                Price::per_million(3.0, 15.0).cache(0.30, 3.75),
            )
            .price(
                "gpt-4o-mini*",
                Price::per_million(0.15, 0.60).cache(0.075, 0.15),
            )
            .missing(Missing::Error)
            .build()
            .unwrap(),
    )
}

fn usage(input: u64, output: u64, read: u64, write: u64) -> Usage {
    Usage {
        cache_read_tokens: read,
        cache_write_tokens: write,
        ..Usage::new(input, output)
    }
}

fn turns(usages: &[Usage]) -> Script {
    Script::new(usages.iter().map(|u| {
        let mut t = ScriptedTurn::text("ok");
        t.usage = Some(*u);
        t
    }))
}

fn agent(model: &str, said: Option<&'static str>, usages: &[Usage]) -> Agent {
    let scripted = ScriptedProvider::new(turns(usages));
    let b = Agent::builder("node").model(model).pricing(table());
    match said {
        Some(said) => b.provider(Dated(scripted, said)),
        None => b.provider(scripted),
    }
    .build()
    .unwrap()
}

/// Root on Claude Sonnet (cache reads and writes), a child on GPT-4o mini (the provider says
/// a dated name, priced by its family; cache reads), a grandchild whose provider names a
/// model the table does not price (priced as the agent's own).
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn two_models_and_cache_reads(store: Arc<dyn Store>) {
    let mut root = agent(
        "claude-sonnet-4-5",
        None,
        &[usage(10_000, 1_000, 6_000, 2_000)],
    )
    .session()
    .store(store.clone())
    .name("root")
    .create()
    .await
    .unwrap();
    let mut child = agent(
        "gpt-4o-mini",
        Some("gpt-4o-mini-2024-07-18"),
        &[usage(20_000, 3_000, 16_000, 0), usage(1_000_000, 0, 0, 0)],
    )
    .session()
    .store(store.clone())
    .name("child")
    .parent(root.as_ref())
    .create()
    .await
    .unwrap();
    let mut grandchild = agent(
        "claude-sonnet-4-5",
        Some("a-proxy-name"),
        &[usage(1_000, 100, 0, 0)],
    )
    .session()
    .store(store.clone())
    .name("grandchild")
    .parent(child.as_ref())
    .create()
    .await
    .unwrap();
    root.run("go", RunOptions::default()).await.unwrap();
    child.run("go", RunOptions::default()).await.unwrap();
    child.run("again", RunOptions::default()).await.unwrap();
    grandchild.run("go", RunOptions::default()).await.unwrap();

    // By hand, in micro-dollars (per million tokens: $3 in, $15 out, $0.30 cache read,
    // $3.75 cache write; $0.15 in, $0.60 out, $0.075 cache read):
    // root:       2,000 × 3 + 6,000 × 0.30 + 2,000 × 3.75 + 1,000 × 15 = 30,300
    // child:      4,000 × 0.15 + 16,000 × 0.075 + 3,000 × 0.60         =  3,600
    //             1,000,000 × 0.15                                     = 150,000
    // grandchild: 1,000 × 3 + 100 × 15                                  =  4,500
    let (root_own, child_own, grand_own) = (30_300, 153_600, 4_500);
    let get = |id| {
        let store = store.clone();
        async move { store.session(id).await.unwrap().unwrap() }
    };
    let r = get(root.id()).await;
    let c = get(child.id()).await;
    let g = get(grandchild.id()).await;
    assert_eq!(
        (r.own_cost, r.attributed_cost),
        (root_own, child_own + grand_own)
    );
    assert_eq!((c.own_cost, c.attributed_cost), (child_own, grand_own));
    assert_eq!((g.own_cost, g.attributed_cost), (grand_own, 0));
    assert_eq!(r.aggregate_cost(), 188_400, "$0.1884 for the tree");

    // Each turn's cost entry names the model it was priced as, right after its usage.
    let costs = |id| {
        let store = store.clone();
        async move {
            store
                .transcript(id, 0, None)
                .await
                .unwrap()
                .into_iter()
                .filter_map(|e| match e.kind {
                    EntryKind::Cost { model, micros, .. } => Some((model, micros)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        costs(root.id()).await,
        [("claude-sonnet-4-5".to_owned(), 30_300)]
    );
    assert_eq!(
        costs(child.id()).await,
        [
            ("gpt-4o-mini-2024-07-18".to_owned(), 3_600),
            ("gpt-4o-mini-2024-07-18".to_owned(), 150_000)
        ]
    );
    assert_eq!(
        costs(grandchild.id()).await,
        [("claude-sonnet-4-5".to_owned(), 4_500)]
    );
    // The root's transcript holds each descendant turn's cost with its aggregate after it.
    let attributed: Vec<(u64, u64)> = store
        .transcript(root.id(), 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::CostAttributed {
                micros,
                aggregate_micros,
                ..
            } => Some((micros, aggregate_micros)),
            _ => None,
        })
        .collect();
    assert_eq!(
        attributed,
        [(3_600, 33_900), (150_000, 183_900), (4_500, 188_400)]
    );
    let replayed = replay(store.as_ref(), root.id()).await.unwrap();
    assert_eq!(
        (replayed.own_cost, replayed.attributed_cost),
        (root_own, 158_100)
    );
    let check = reconcile(store.as_ref(), root.id()).await.unwrap();
    assert!(check.is_consistent(), "{:#?}", check.mismatches);
    assert_eq!(
        (check.own_total_cost, check.root_aggregate_cost),
        (188_400, 188_400)
    );
}

#[tokio::test]
async fn a_tree_of_two_models_costs_what_the_hand_computation_says_in_memory() {
    two_models_and_cache_reads(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn a_tree_of_two_models_costs_what_the_hand_computation_says_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = arbor_store_sqlite::SqliteStore::open(dir.path().join("arbor.db")).unwrap();
    two_models_and_cache_reads(Arc::new(store)).await;
}

#[tokio::test]
async fn without_prices_nothing_is_costed_and_no_cost_entry_is_written() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut s = Agent::builder("plain")
        .provider(ScriptedProvider::new(turns(&[Usage::new(500, 50)])))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    s.run("go", RunOptions::default()).await.unwrap();
    let record = store.session(s.id()).await.unwrap().unwrap();
    assert_eq!((record.own_cost, record.aggregate_cost()), (0, 0));
    let kinds: Vec<_> = store
        .transcript(s.id(), 0, None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind.kind_name())
        .collect();
    assert!(!kinds.contains(&"cost"), "{kinds:?}");
}

#[tokio::test]
async fn a_model_without_a_price_is_refused_where_that_is_an_error() {
    // At build, naming the field.
    let e = Agent::builder("odd")
        .provider(ScriptedProvider::new(turns(&[])))
        .model("llama-3")
        .pricing(table())
        .build()
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.field(), e.to_string().as_str()),
        (
            CoreErrorKind::Validation,
            Some("pricing"),
            "model \"llama-3\" has no price (pricing.missing = \"error\")"
        )
    );
    // At admission, before any record: the supervisor's table is the one that counts.
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let free = Agent::builder("free")
        .provider(ScriptedProvider::new(turns(&[Usage::new(10, 1)])))
        .model("llama-3")
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .pricing(table())
        .child(ChildEntry::agent("free", free))
        .build()
        .unwrap();
    let parent = SessionRecord::new_root("parent", "parent", "scripted");
    store.create_session(&parent).await.unwrap();
    let e = sup
        .delegate(DelegationRequest::new("free", "go").parent(SessionRef::from(&parent)))
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("pricing"), "{e}");
    assert_eq!(
        store
            .list_sessions(arbor_store::SessionQuery::Children(parent.id))
            .await
            .unwrap()
            .len(),
        0,
        "nothing was created"
    );
}

#[tokio::test]
async fn a_supervisors_prices_cost_its_children_and_reach_the_parent() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let kid = Agent::builder("kid")
        .provider(ScriptedProvider::new(turns(&[usage(2_000, 500, 1_000, 0)])))
        .model("gpt-4o-mini")
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .pricing(table())
        .child(ChildEntry::agent("kid", kid))
        .build()
        .unwrap();
    let parent = SessionRecord::new_root("parent", "parent", "scripted");
    store.create_session(&parent).await.unwrap();
    let out = sup
        .delegate(DelegationRequest::new("kid", "go").parent(SessionRef::from(&parent)))
        .await
        .unwrap();
    // 1,000 × 0.15 + 1,000 × 0.075 + 500 × 0.60 = 525 micro-dollars.
    assert_eq!(
        out.result.cost_micros, 525,
        "the run's own cost, as its parent reads it"
    );
    let child = store.session(out.session_id).await.unwrap().unwrap();
    assert_eq!(child.own_cost, 525);
    let parent = store.session(parent.id).await.unwrap().unwrap();
    assert_eq!((parent.own_cost, parent.attributed_cost), (0, 525));
}
