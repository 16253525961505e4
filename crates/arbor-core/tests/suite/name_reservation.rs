//! A requested name is reserved at admission, before the first await: a second spawn of the
//! same name under the same parent, made while the first is still preflighting its model, is
//! refused at once, and the first goes on to run under that name.

use std::sync::Arc;
use std::time::Duration;

use arbor_core::supervisor::{ChildEntry, DelegationRequest, Ownership, Supervisor};
use arbor_core::{Agent, CoreErrorKind, Session};
use arbor_model::{
    ModelError, ModelProvider, ModelRequest, ModelStream, Script, ScriptedProvider, ScriptedTurn,
};
use arbor_store::{MemoryStore, SessionQuery, Store};
use async_trait::async_trait;
use tokio::sync::{Notify, Semaphore};

/// A provider whose preflight waits until the test opens its gate.
#[derive(Debug)]
struct GatedPreflight {
    entered: Notify,
    gate: Semaphore,
}

impl GatedPreflight {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            entered: Notify::new(),
            gate: Semaphore::new(0),
        })
    }
}

#[async_trait]
impl ModelProvider for GatedPreflight {
    fn name(&self) -> &str {
        "gated"
    }

    async fn stream(&self, _: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        unreachable!("only preflighted")
    }

    async fn preflight(&self, _: &str) -> Result<(), ModelError> {
        self.entered.notify_one();
        self.gate.acquire().await.unwrap().forget();
        Ok(())
    }
}

fn agent(name: &str) -> Agent {
    Agent::builder(name)
        .provider(ScriptedProvider::new(Script::new(vec![
            ScriptedTurn::text("done"),
        ])))
        .model("small")
        .build()
        .unwrap()
}

async fn parent(store: &Arc<dyn Store>) -> Session {
    agent("parent")
        .session()
        .store(store.clone())
        .name("parent")
        .create()
        .await
        .unwrap()
}

fn request(parent: &Session, name: &str) -> DelegationRequest {
    DelegationRequest {
        name: Some(name.to_owned()),
        parent: Some(parent.as_ref()),
        ..DelegationRequest::new("api", "Summarize the HTTP API")
    }
}

#[tokio::test]
async fn a_second_spawn_of_a_name_in_preflight_is_refused_at_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let preflight = GatedPreflight::new();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent("api", agent("api")).preflight_with(preflight.clone()))
        .build()
        .unwrap();
    let p = parent(&store).await;

    let first = tokio::spawn({
        let (sup, req) = (sup.clone(), request(&p, "reader"));
        async move { sup.spawn(req).await }
    });
    preflight.entered.notified().await;

    // Refused at once (it never reaches the blocked preflight), naming the taken name.
    let second = tokio::time::timeout(Duration::from_secs(5), sup.spawn(request(&p, " reader ")))
        .await
        .expect("the second spawn waited on the first one's preflight")
        .unwrap_err();
    assert_eq!(second.kind(), CoreErrorKind::Validation);
    assert_eq!(
        second.to_string(),
        "Agent name \"reader\" is unavailable: an agent of that name is being spawned at depth \
         1 under this parent"
    );
    // Another name, or the same name under another parent, is not held up by it.
    let q = parent(&store).await;
    let other = tokio::spawn({
        let (sup, req) = (sup.clone(), request(&q, "reader"));
        async move { sup.spawn(req).await }
    });
    preflight.entered.notified().await;

    preflight.gate.add_permits(2);
    let handle = first.await.unwrap().unwrap();
    assert_eq!(handle.name, "reader");
    assert_eq!(other.await.unwrap().unwrap().name, "reader");
    let kids = store
        .list_sessions(SessionQuery::Children(p.id()))
        .await
        .unwrap();
    assert_eq!(kids.len(), 1, "the refused spawn left no record");

    // Once the record exists the store holds the name: the reservation is gone and the
    // store's check refuses a third spawn of it.
    let third = tokio::spawn({
        let (sup, req) = (sup.clone(), request(&p, "reader"));
        async move { sup.spawn(req).await }
    });
    preflight.entered.notified().await;
    preflight.gate.add_permits(1);
    assert_eq!(
        third.await.unwrap().unwrap_err().to_string(),
        "Agent name \"reader\" is unavailable: an agent of that name already exists at depth 1 \
         under this parent"
    );
}

#[tokio::test]
async fn a_failed_or_dropped_registration_frees_its_name() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let preflight = GatedPreflight::new();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent("api", agent("api")).preflight_with(preflight.clone()))
        .build()
        .unwrap();
    let p = parent(&store).await;
    // A spawn dropped in preflight (its caller gave up) frees the name.
    let dropped = tokio::spawn({
        let (sup, req) = (sup.clone(), request(&p, "reader"));
        async move { sup.spawn(req).await }
    });
    preflight.entered.notified().await;
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    let again = tokio::spawn({
        let (sup, req) = (sup.clone(), request(&p, "reader"));
        async move { sup.spawn(req).await }
    });
    preflight.entered.notified().await;
    preflight.gate.add_permits(1);
    assert_eq!(again.await.unwrap().unwrap().name, "reader");
}
