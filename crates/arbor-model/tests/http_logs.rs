//! What the HTTP providers log: nothing the error would not show, so never the key. Its
//! own test binary, since the subscriber capturing the log is per thread and tracing caches
//! whether a call site is enabled across threads.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use arbor_model::ModelErrorKind;
use arbor_model::testing::{Canned, ReplayServer};

mod common;
use common::{KEY, anthropic, collect, openai, retry};

/// What a tracing subscriber wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn a_key_echoed_in_a_retried_error_never_reaches_the_log() {
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let echo = |status: u16| {
        Canned::json(
            status,
            &format!(r#"{{"error":{{"message":"slow down, key {KEY}"}}}}"#),
        )
        .header("retry-after-ms", "1")
    };
    let server = ReplayServer::start(vec![echo(429), echo(503), echo(429)])
        .await
        .unwrap();
    let e = collect(&openai(&server.url, retry(2, 5000)))
        .await
        .unwrap_err();
    assert_eq!(server.requests().len(), 3);
    assert_eq!(e.kind(), ModelErrorKind::RateLimited);
    assert_eq!(e.to_string(), "openai: rate limited: slow down, key ***");
    let logged = log.text();
    assert_eq!(logged.matches("retrying").count(), 2, "{logged}");
    assert!(logged.contains("slow down, key ***"), "{logged}");
    assert!(!logged.contains(KEY), "{logged}");

    // The same for an overload inside the stream that echoes it.
    let echoed = format!(
        "event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"busy {KEY}\"}}}}\n\n"
    );
    let server = ReplayServer::start(vec![Canned::sse(echoed.as_bytes()); 2])
        .await
        .unwrap();
    let e = collect(&anthropic(&server.url, retry(1, 5000)))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "provider error: overloaded_error: busy ***");
    let logged = log.text();
    assert!(logged.contains("busy ***"), "{logged}");
    assert!(!logged.contains(KEY), "{logged}");
}
