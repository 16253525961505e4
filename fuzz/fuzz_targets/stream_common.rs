// Shared by the two provider-stream targets (included with `include!`).

use arbor_model::sse::SseDecoder;
use arbor_model::wire::Decoder;
use arbor_model::{FinishReason, ModelError, ModelEvent};

/// Decodes `bytes` as one streamed turn: SSE first, then `dec`, as the providers do.
fn turn(mut dec: impl Decoder, bytes: &[u8]) -> Result<Vec<ModelEvent>, ModelError> {
    let mut sse = SseDecoder::new();
    let mut out = Vec::new();
    let stream = |e: arbor_model::sse::SseError| ModelError::Stream {
        message: e.to_string(),
    };
    for e in sse.push(bytes).map_err(stream)? {
        out.extend(dec.push(&e.data)?);
    }
    for e in sse.finish().map_err(stream)? {
        out.extend(dec.push(&e.data)?);
    }
    out.extend(dec.finish()?);
    Ok(out)
}

/// A completed turn ends with exactly one `Finished`, and text stays under the cap.
fn check(result: &Result<Vec<ModelEvent>, ModelError>, limit: usize) {
    let Ok(events) = result else {
        return;
    };
    let finished: Vec<&FinishReason> = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::Finished(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 1, "one Finished per turn: {events:?}");
    assert!(matches!(events.last(), Some(ModelEvent::Finished(_))));
    let text: usize = events
        .iter()
        .map(|e| match e {
            ModelEvent::TextDelta(t) => t.len(),
            _ => 0,
        })
        .sum();
    assert!(text <= limit, "{text} bytes of text past the cap {limit}");
}
