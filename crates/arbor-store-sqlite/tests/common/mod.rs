//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Log lines captured from `tracing` while `f` runs on this thread (no ANSI colours).
pub fn capture_logs<T>(f: impl FnOnce() -> T) -> (T, String) {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let writer = {
        let buf = Arc::clone(&buf);
        move || Sink(Arc::clone(&buf))
    };
    let subscriber = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
    (out, text)
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
