//! The SSE decoder on arbitrary bytes: it never panics, and every chunking of the same
//! bytes gives the same events and the same error (the first byte picks the split points).
#![no_main]

use arbor_model::sse::{SseDecoder, SseError, SseEvent};
use libfuzzer_sys::fuzz_target;

fn decode(chunks: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
    let mut d = SseDecoder::new();
    let mut out = Vec::new();
    for c in chunks {
        out.extend(d.push(c)?);
    }
    out.extend(d.finish()?);
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, bytes)) = data.split_first() else {
        return;
    };
    let whole = decode(&[bytes]);
    let step = usize::from(step).max(1);
    let pieces: Vec<&[u8]> = bytes.chunks(step).collect();
    assert_eq!(decode(&pieces), whole, "chunks of {step} bytes");
    let mid = bytes.len() / 2;
    let (a, b) = bytes.split_at(mid);
    assert_eq!(decode(&[a, b]), whole, "split at {mid}");
});
