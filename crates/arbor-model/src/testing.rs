//! A local HTTP server for tests of hosts and providers (feature `testing`): it replays
//! canned answers, streamed in chunks, cut short or left hanging, and records every request
//! it was sent. It binds to loopback only.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One canned answer.
#[derive(Debug, Clone)]
pub struct Canned {
    /// The HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// The body, written chunk by chunk.
    pub chunks: Vec<Vec<u8>>,
    /// A pause before each chunk.
    pub delay: Duration,
    /// Keep the connection open after the last chunk.
    pub hang: bool,
    /// Close the connection once the request is read, without answering (a server or a
    /// proxy dropping it); the other fields are then unused.
    pub close: bool,
}

impl Canned {
    /// A 200 server-sent-events answer, written in 97-byte chunks.
    pub fn sse(body: &[u8]) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            chunks: body.chunks(97).map(<[u8]>::to_vec).collect(),
            delay: Duration::ZERO,
            hang: false,
            close: false,
        }
    }

    /// A JSON answer with `status`.
    pub fn json(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![body.as_bytes().to_vec()],
            delay: Duration::ZERO,
            hang: false,
            close: false,
        }
    }

    /// No answer: the connection is closed once the request is read.
    pub fn closed() -> Self {
        Self {
            close: true,
            ..Self::json(200, "")
        }
    }

    /// The same with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path and query.
    pub path: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Recorded {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The running server; dropping it stops it.
#[derive(Debug)]
pub struct ReplayServer {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ReplayServer {
    /// Serves `answers` in order, one per connection; requests past them get a 500.
    pub async fn start(answers: Vec<Canned>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let queue = Arc::new(Mutex::new(VecDeque::from(answers)));
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(answer(sock, seen.clone(), queue.clone()));
            }
        });
        Ok(Self {
            url,
            requests,
            task,
        })
    }

    /// What it was sent so far.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.requests).clone()
    }
}

async fn answer(
    mut sock: TcpStream,
    seen: Arc<Mutex<Vec<Recorded>>>,
    queue: Arc<Mutex<VecDeque<Canned>>>,
) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        let n = sock.read(&mut tmp).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or_default().to_owned();
    let mut parts = first.split(' ');
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = sock.read(&mut tmp).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    lock(&seen).push(Recorded {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
    });
    let canned = lock(&queue).pop_front().unwrap_or_else(|| {
        Canned::json(
            500,
            "{\"error\":{\"message\":\"the replay server has no more answers\"}}",
        )
    });
    if canned.close {
        return;
    }
    let mut out = format!("HTTP/1.1 {} X\r\nconnection: close\r\n", canned.status);
    for (n, v) in &canned.headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    if sock.write_all(out.as_bytes()).await.is_err() {
        return;
    }
    for c in &canned.chunks {
        if !canned.delay.is_zero() {
            tokio::time::sleep(canned.delay).await;
        }
        if sock.write_all(c).await.is_err() {
            return;
        }
        let _ = sock.flush().await;
    }
    if canned.hang {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    let _ = sock.shutdown().await;
}
