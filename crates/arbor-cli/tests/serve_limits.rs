//! What `arbor serve` holds when clients misbehave (issue 36): a client that sends its
//! headers slowly is cut off; connections and event streams are capped, past the cap in the
//! one error shape naming the limit; a shutdown ends within its grace whatever clients do.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[allow(dead_code)]
mod serve_support;
use serve_support::client;
use serve_support::tenants::{TOKEN_A, TOKEN_B, start, two_tenants_env};

/// Sends the first line of a request and no more: the connection.
async fn slow_header(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    s
}

/// Whether the server closed `s` within `within` (a read sees the end, or a reset).
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    matches!(
        tokio::time::timeout(within, s.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// Opens an event stream at `url` as the tenant of `token`: the open response, or the
/// refusal's status and body.
async fn open_stream(
    http: &reqwest::Client,
    url: &str,
    token: &str,
) -> Result<reqwest::Response, (u16, Value)> {
    let resp = http.get(url).bearer_auth(token).send().await.unwrap();
    let status = resp.status().as_u16();
    if status == 200 {
        return Ok(resp);
    }
    Err((status, resp.json().await.unwrap_or(Value::Null)))
}

/// A slow-header client is cut off after the header timeout (it was held forever); past
/// `--max-connections` a request gets 503 naming `max_connections`; streams past
/// `--max-streams-per-tenant` get 429 naming it, past `--max-streams` 503 naming it, and a
/// stream closed gives its slot back; SIGTERM with a slow-header client and open streams
/// ends within the grace (it was held 29–40 s).
#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn slow_clients_are_cut_off_and_connections_and_streams_are_capped() {
    let (_dir, mut served) = two_tenants_env(
        &[
            "--max-connections",
            "6",
            "--max-streams",
            "3",
            "--max-streams-per-tenant",
            "2",
        ],
        &[
            ("ARBOR_HEADER_TIMEOUT_MS", "1500"),
            ("ARBOR_SHUTDOWN_GRACE_MS", "3000"),
        ],
    );
    let (http, base) = (client(), served.base.clone());
    let addr = base.trim_start_matches("http://").to_owned();

    // A client that never finishes its headers is cut off after the header timeout.
    let started = Instant::now();
    let mut slow = slow_header(&addr).await;
    assert!(
        closed_within(&mut slow, Duration::from_secs(5)).await,
        "never cut off"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        started.elapsed()
    );

    // Six connections held (each mid-headers): a seventh gets 503 naming the limit.
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(slow_header(&addr).await);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let resp = fresh.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["kind"], "unavailable", "{e}");
    assert_eq!(e["error"]["limit"]["name"], "max_connections", "{e}");
    assert_eq!(e["error"]["limit"]["maximum"], 6, "{e}");
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let resp = fresh.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200, "the slots came back");

    // Streams: two of A's on a live run, a third refused (429); one of B's fills the
    // server's three, B's second refused (503); one of A's closed gives its slot back.
    let root = start(&http, &base, "slow").await;
    let url = format!("{base}/v1/sessions/{root}/events");
    let a1 = open_stream(&http, &url, TOKEN_A).await.unwrap();
    let _a2 = open_stream(&http, &url, TOKEN_A).await.unwrap();
    let (status, e) = open_stream(&http, &url, TOKEN_A).await.unwrap_err();
    assert_eq!(
        (status, &e["error"]["limit"]["name"]),
        (429, &Value::from("max_streams_per_tenant")),
        "{e}"
    );
    assert_eq!(e["error"]["kind"], "limit", "{e}");
    let b_root = {
        let resp = http
            .post(format!("{base}/v1/runs"))
            .bearer_auth(TOKEN_B)
            .json(&serde_json::json!({"spec": "slow"}))
            .send()
            .await
            .unwrap();
        let run: Value = resp.json().await.unwrap();
        run["root_id"].as_str().unwrap().to_owned()
    };
    let b_url = format!("{base}/v1/runs/{b_root}/events");
    let _b1 = open_stream(&http, &b_url, TOKEN_B).await.unwrap();
    let (status, e) = open_stream(&http, &b_url, TOKEN_B).await.unwrap_err();
    assert_eq!(
        (status, &e["error"]["limit"]["name"]),
        (503, &Value::from("max_streams")),
        "{e}"
    );
    drop(a1);
    let deadline = Instant::now() + Duration::from_secs(5);
    let b2 = loop {
        match open_stream(&http, &b_url, TOKEN_B).await {
            Ok(s) => break s,
            Err(e) => assert!(Instant::now() < deadline, "the slot never came back: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // SIGTERM with a slow-header client and three streams open: out within the grace.
    let _slow = slow_header(&addr).await;
    let started = Instant::now();
    let term = std::process::Command::new("kill")
        .args(["-TERM", &served.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let code = served.child.wait().unwrap();
    assert_eq!(code.code(), Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    drop(b2);
}
