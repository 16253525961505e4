//! The OpenAI-compatible stream decoder on arbitrary SSE bytes (SSE first, then the
//! Chat Completions chunk decoder), with the default cap and with a small one: it never
//! panics, and a completed turn ends with one `Finished`.
#![no_main]

use arbor_model::wire::openai::ChunkDecoder;
use libfuzzer_sys::fuzz_target;

include!("stream_common.rs");

fuzz_target!(|data: &[u8]| {
    let r = turn(ChunkDecoder::new(), data);
    check(&r, arbor_model::wire::DEFAULT_MAX_TURN_BYTES);
    let r = turn(ChunkDecoder::with_limit(256), data);
    check(&r, 256);
});
