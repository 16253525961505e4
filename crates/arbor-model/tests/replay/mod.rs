//! A local HTTP server that replays canned answers (streamed in chunks, cut short, or left
//! hanging) and records what it was sent. Loopback only.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One canned answer.
#[derive(Debug, Clone)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub chunks: Vec<Vec<u8>>,
    pub delay: Duration,
    /// Keep the connection open after the chunks.
    pub hang: bool,
}

impl Canned {
    pub fn sse(body: &[u8]) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            chunks: body.chunks(97).map(<[u8]>::to_vec).collect(),
            delay: Duration::ZERO,
            hang: false,
        }
    }

    pub fn json(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![body.as_bytes().to_vec()],
            delay: Duration::ZERO,
            hang: false,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct Server {
    pub url: String,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// Serves `answers` in order, one per connection; later requests get a 500.
pub async fn serve(answers: Vec<Canned>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    let queue = Arc::new(Mutex::new(std::collections::VecDeque::from(answers)));
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            let queue = queue.clone();
            tokio::spawn(async move {
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
                seen.lock().unwrap().push(Recorded {
                    method,
                    path,
                    headers,
                    body: String::from_utf8_lossy(&body).to_string(),
                });
                let answer = queue.lock().unwrap().pop_front().unwrap_or_else(|| {
                    Canned::json(500, "{\"error\":{\"message\":\"no more answers\"}}")
                });
                let mut out = format!("HTTP/1.1 {} X\r\nconnection: close\r\n", answer.status);
                for (n, v) in &answer.headers {
                    out.push_str(&format!("{n}: {v}\r\n"));
                }
                out.push_str("\r\n");
                if sock.write_all(out.as_bytes()).await.is_err() {
                    return;
                }
                for c in &answer.chunks {
                    if !answer.delay.is_zero() {
                        tokio::time::sleep(answer.delay).await;
                    }
                    if sock.write_all(c).await.is_err() {
                        return;
                    }
                    let _ = sock.flush().await;
                }
                if answer.hang {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                let _ = sock.shutdown().await;
            });
        }
    });
    Server {
        url,
        requests,
        task,
    }
}
