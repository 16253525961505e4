//! Fuzz-style properties of the stream decoders, on stable Rust so CI always runs them (the
//! coverage-guided targets live in `fuzz/`): the SSE decoder and both providers' decoders
//! take arbitrary bytes and recorded streams with their bytes or their JSON values damaged,
//! and return events or an error, never panic. SSE decoding does not depend on chunking,
//! and a completed turn ends with exactly one `Finished`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use arbor_model::sse::{SseDecoder, SseError, SseEvent};
use arbor_model::wire::Decoder;
use arbor_model::wire::anthropic::EventDecoder;
use arbor_model::wire::openai::ChunkDecoder;
use arbor_model::{ModelError, ModelEvent};
use proptest::prelude::*;
use serde_json::Value;

/// Recorded streams of both formats (the seeds).
const STREAMS: [&[u8]; 6] = [
    include_bytes!("fixtures/openai/text.sse"),
    include_bytes!("fixtures/openai/parallel_tools.sse"),
    include_bytes!("fixtures/llamacpp/openai_text_usage.sse"),
    include_bytes!("fixtures/llamacpp/openai_text_no_usage.sse"),
    include_bytes!("fixtures/anthropic/tools.sse"),
    include_bytes!("fixtures/llamacpp/anthropic_text.sse"),
];

/// Pieces SSE streams are made of, for token soup.
const TOKENS: [&str; 16] = [
    "data:", "data: ", "event: ", ":", "\n", "\r", "\r\n", "\n\n", "{", "}", "\"", "x", "[DONE]",
    "retry: 1", "é", "\u{0}",
];

/// Values that break arithmetic and indexing when they replace a JSON leaf.
fn interesting(i: usize) -> Value {
    let all = [
        Value::from(u64::MAX),
        Value::from(u64::MAX / 2 + 1),
        Value::from(i64::MIN),
        Value::from(-1),
        Value::from(0),
        serde_json::json!(1e300),
        Value::Null,
        Value::from(""),
        Value::from("tool_use"),
        Value::from("[DONE]"),
        serde_json::json!([]),
        serde_json::json!({}),
    ];
    all[i % all.len()].clone()
}

/// Replaces the `n`th leaf (depth first, modulo the count) of `v`.
fn replace_leaf(v: &mut Value, n: usize, with: Value) {
    fn paths(v: &Value, here: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
        match v {
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    here.push(PathStep::Index(i));
                    paths(x, here, out);
                    here.pop();
                }
            }
            Value::Object(o) => {
                for (k, x) in o {
                    here.push(PathStep::Key(k.clone()));
                    paths(x, here, out);
                    here.pop();
                }
            }
            _ => out.push(here.clone()),
        }
    }
    let mut all = Vec::new();
    paths(v, &mut Vec::new(), &mut all);
    let Some(path) = all.get(n % all.len().max(1)) else {
        return;
    };
    let mut at = v;
    for step in path {
        at = match step {
            PathStep::Index(i) => &mut at[*i],
            PathStep::Key(k) => &mut at[k.as_str()],
        };
    }
    *at = with;
}

#[derive(Clone)]
enum PathStep {
    Index(usize),
    Key(String),
}

fn sse_all(chunks: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
    let mut d = SseDecoder::new();
    let mut out = Vec::new();
    for c in chunks {
        out.extend(d.push(c)?);
    }
    out.extend(d.finish()?);
    Ok(out)
}

/// One turn: SSE, then `dec`, as the providers decode.
fn turn(mut dec: impl Decoder, bytes: &[u8]) -> Result<Vec<ModelEvent>, ModelError> {
    let events = sse_all(&[bytes]).map_err(|e| ModelError::Stream {
        message: e.to_string(),
    })?;
    let mut out = Vec::new();
    for e in events {
        out.extend(dec.push(&e.data)?);
    }
    out.extend(dec.finish()?);
    Ok(out)
}

/// A completed turn ends with exactly one `Finished`.
fn check(r: &Result<Vec<ModelEvent>, ModelError>) {
    if let Ok(events) = r {
        let finished = events
            .iter()
            .filter(|e| matches!(e, ModelEvent::Finished(_)))
            .count();
        assert_eq!(finished, 1, "{events:?}");
        assert!(matches!(events.last(), Some(ModelEvent::Finished(_))));
    }
}

fn both(bytes: &[u8]) {
    check(&turn(ChunkDecoder::new(), bytes));
    check(&turn(ChunkDecoder::with_limit(128), bytes));
    check(&turn(EventDecoder::new(), bytes));
    check(&turn(EventDecoder::with_limit(128), bytes));
}

/// `seed` with byte edits: (position, operation, byte).
fn edited(seed: &[u8], edits: &[(usize, u8, u8)]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for &(pos, op, byte) in edits {
        let at = if b.is_empty() { 0 } else { pos % b.len() };
        match op % 3 {
            0 if !b.is_empty() => b[at] = byte,
            1 => b.insert(at, byte),
            _ if !b.is_empty() => {
                b.remove(at);
            }
            _ => b.push(byte),
        }
    }
    b
}

/// `seed` with some of its events' JSON leaves replaced by interesting values.
fn json_damaged(seed: &[u8], edits: &[(usize, usize, usize)]) -> Vec<u8> {
    let events = sse_all(&[seed]).unwrap();
    let mut values: Vec<(String, Value)> = events
        .into_iter()
        .map(|e| {
            let v = serde_json::from_str(&e.data).unwrap_or(Value::String(e.data));
            (e.event, v)
        })
        .collect();
    for &(event, leaf, with) in edits {
        let n = values.len();
        if let Some((_, v)) = values.get_mut(event % n.max(1)) {
            replace_leaf(v, leaf, interesting(with));
        }
    }
    let mut out = String::new();
    for (event, v) in values {
        if !event.is_empty() {
            out.push_str(&format!("event: {event}\n"));
        }
        let data = match v {
            Value::String(s) if s == "[DONE]" => s,
            other => other.to_string(),
        };
        out.push_str(&format!("data: {data}\n\n"));
    }
    out.into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn sse_is_the_same_in_any_chunking(
        tokens in proptest::collection::vec(0..TOKENS.len(), 0..40),
        step in 1usize..9,
    ) {
        let bytes: Vec<u8> = tokens.iter().flat_map(|&t| TOKENS[t].bytes()).collect();
        let whole = sse_all(&[&bytes]);
        let pieces: Vec<&[u8]> = bytes.chunks(step).collect();
        prop_assert_eq!(sse_all(&pieces), whole);
    }

    #[test]
    fn arbitrary_bytes_never_panic_a_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = sse_all(&[&bytes]);
        both(&bytes);
    }

    #[test]
    fn recorded_streams_with_bytes_edited_never_panic(
        seed in 0..STREAMS.len(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..8),
    ) {
        both(&edited(STREAMS[seed], &edits));
    }

    #[test]
    fn recorded_streams_with_json_values_damaged_never_panic(
        seed in 0..STREAMS.len(),
        edits in proptest::collection::vec((any::<usize>(), any::<usize>(), any::<usize>()), 1..6),
    ) {
        both(&json_damaged(STREAMS[seed], &edits));
    }
}
