//! Webhooks against a receiver on loopback: each event of the tenant's feed is posted in
//! order, signed, with its event id; a receiver that fails gets the same event again, with
//! backoff, until it takes it (at least once).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbor_core::{Agent, RunOptions};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::SessionId;
use arbor_server::{ApiError, Server, StartRun, Tenants, WebhookTarget, launcher_fn, signature};
use arbor_store::{MemoryStore, Store};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

const TOKEN: &str = "acme-token-0123456789";
const SECRET: &str = "the-webhook-secret-of-acme";

async fn start(store: Arc<dyn Store>, run: StartRun) -> Result<SessionId, ApiError> {
    let agent = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new(vec![
            ScriptedTurn::text("done"),
        ])))
        .build()
        .map_err(ApiError::from)?;
    let mut session = agent
        .session()
        .store(store)
        .name("root")
        .meta(run.root_meta())
        .create()
        .await
        .map_err(ApiError::from)?;
    let id = session.id();
    tokio::spawn(async move {
        let _ = session.run("go", RunOptions::default()).await;
    });
    Ok(id)
}

/// One post: (event id, signature, body).
type Post = (String, String, Vec<u8>);

/// What the receiver was sent; it fails the first `fail`.
#[derive(Clone, Default)]
struct Received {
    posts: Arc<Mutex<Vec<Post>>>,
    fail: Arc<Mutex<u32>>,
}

async fn receive(
    State(r): State<Received>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    let header = |n: &str| headers.get(n).unwrap().to_str().unwrap().to_owned();
    r.posts.lock().unwrap().push((
        header("x-arbor-event-id"),
        header("x-arbor-signature"),
        body.to_vec(),
    ));
    let mut fail = r.fail.lock().unwrap();
    if *fail > 0 {
        *fail -= 1;
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    StatusCode::OK
}

#[tokio::test]
async fn events_are_posted_in_order_signed_and_retried_until_taken() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let received = Received::default();
    *received.fail.lock().unwrap() = 2;
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(received.clone());
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hook", hook.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(hook, app).await.unwrap() });

    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let for_launcher = store.clone();
    let server = Server::builder(store.clone())
        .launcher(launcher_fn(["hello"], move |run| {
            start(for_launcher.clone(), run)
        }))
        .tenants(Tenants::from_env_value(&format!("acme={TOKEN}")).unwrap())
        .webhooks(
            vec![WebhookTarget::new("acme", &hook_url, SECRET).unwrap()],
            reqwest::Client::new(),
        )
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(server.serve(listener, std::future::pending()));
    // The deliverer starts at the feed's end: let it read where that is.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let http = reqwest::Client::new();
    for _ in 0..2 {
        let resp = http
            .post(format!("{base}/v1/runs"))
            .bearer_auth(TOKEN)
            .json(&json!({"spec": "hello", "labels": {"user": "ann"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 201);
    }

    // Every event up to both runs' end arrives; the first two posts failed and came again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let taken = loop {
        let posts = received.posts.lock().unwrap().clone();
        let bodies: Vec<Value> = posts
            .iter()
            .map(|(_, _, b)| serde_json::from_slice(b).unwrap())
            .collect();
        let ended = bodies
            .iter()
            .filter(|b| b["type"] == "run" && b["status"] == "succeeded")
            .count();
        if ended == 2 {
            break posts;
        }
        assert!(tokio::time::Instant::now() < deadline, "{bodies:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let ids: Vec<&str> = taken.iter().map(|(id, _, _)| id.as_str()).collect();
    // The first event was posted three times (two refusals, then taken), then one each.
    assert_eq!(&ids[..3], ["acme:1", "acme:1", "acme:1"], "{ids:?}");
    let rest: Vec<String> = (2..=taken.len() as u64 - 2)
        .map(|n| format!("acme:{n}"))
        .collect();
    assert_eq!(
        ids[3..],
        rest.iter().map(String::as_str).collect::<Vec<_>>()[..]
    );
    for (id, sig, body) in &taken {
        assert_eq!(sig, &signature(SECRET.as_bytes(), body), "{id}");
        let entry: Value = serde_json::from_slice(body).unwrap();
        assert_eq!(format!("acme:{}", entry["seq"]), *id);
    }
    let first: Value = serde_json::from_slice(&taken[0].2).unwrap();
    assert_eq!(first["type"], "run");
    assert_eq!(first["labels"], json!({"user": "ann"}));
    // A tampered body does not match its signature.
    assert_ne!(signature(SECRET.as_bytes(), b"{}"), taken[0].1);
}
