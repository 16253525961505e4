//! Scenario H: a delegation over HTTP. A host calls `POST /v1/sessions/{root}/children`
//! with `mode: sync` on a live `arbor-server` over loopback (a real HTTP client, a kept-alive
//! connection): the request is admitted, the child runs (one scripted turn) and its answer
//! comes back in the response. Each request is timed: p50, p99, and requests per second
//! one after another.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arbor_core::supervisor::Supervisor;
use arbor_protocol::SessionId;
use arbor_server::{ApiError, Launcher, Server, StartRun};
use arbor_store::{SessionRecord, Store};
use async_trait::async_trait;

use crate::trees;

/// Serves one live tree: the bench's supervisor, under its host-owned root.
#[derive(Debug)]
struct OneTree {
    root: SessionId,
    sup: Supervisor,
}

#[async_trait]
impl Launcher for OneTree {
    fn specs(&self) -> Vec<String> {
        Vec::new()
    }

    async fn start(&self, _run: StartRun) -> Result<SessionId, ApiError> {
        Err(ApiError::not_found("spec"))
    }

    fn supervisor(&self, root: SessionId) -> Option<Supervisor> {
        (root == self.root).then(|| self.sup.clone())
    }
}

/// What H measured: the wall time, each request's latency, and the root.
pub(crate) struct Measured {
    pub(crate) elapsed: Duration,
    pub(crate) samples: Vec<Duration>,
    pub(crate) root: SessionId,
}

/// Runs `ops` sync delegations over HTTP, one after another.
pub(crate) async fn delegations(store: &Arc<dyn Store>, ops: u64) -> Result<Measured, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let sup = trees::admission(store).map_err(|e| e.to_string())?;
    let root = SessionRecord::new_root("host", "host", "scripted");
    store
        .create_session(&root)
        .await
        .map_err(|e| e.to_string())?;
    let server = Server::builder(store.clone())
        .launcher(OneTree {
            root: root.id,
            sup: sup.clone(),
        })
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let base = format!(
        "http://{}",
        listener.local_addr().map_err(|e| e.to_string())?
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let serving = tokio::spawn(server.serve(listener, async move { stopped.cancelled().await }));
    let http = reqwest::Client::new();
    let url = format!("{base}/v1/sessions/{}/children", root.id);
    let body = serde_json::json!({"child_id": "child", "input": "go", "mode": "sync"});
    let mut samples = Vec::with_capacity(ops as usize);
    let start = Instant::now();
    for _ in 0..ops {
        let t = Instant::now();
        let resp = http
            .post(&url)
            .json(&body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status();
        let answer: serde_json::Value = resp.json().await.map_err(|e| e.to_string())?;
        samples.push(t.elapsed());
        if status.as_u16() != 200 || answer["status"] != "succeeded" {
            return Err(format!(
                "a delegation over HTTP answered {status}: {answer}"
            ));
        }
    }
    let elapsed = start.elapsed();
    stop.cancel();
    let _ = serving.await;
    sup.shutdown().await;
    Ok(Measured {
        elapsed,
        samples,
        root: root.id,
    })
}
