//! The host's child-event sink: [`ChildEventSink`], its `Arc` form and [`sink_fn`].

use std::fmt;
use std::sync::Arc;

use arbor_protocol::SupervisorEnvelope;

/// Receives every projected child event, exactly as the stream carries it, in order.
pub trait ChildEventSink: fmt::Debug + Send + Sync {
    /// Takes one event. Must not block.
    fn send(&self, event: &SupervisorEnvelope);
}

/// A shared sink (the host keeps a handle to what it collects).
impl<T: ChildEventSink + ?Sized> ChildEventSink for Arc<T> {
    fn send(&self, event: &SupervisorEnvelope) {
        (**self).send(event);
    }
}

/// A sink from a closure (see [`sink_fn`]).
pub struct FnSink<F>(F);

impl<F> fmt::Debug for FnSink<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnSink")
    }
}

impl<F: Fn(&SupervisorEnvelope) + Send + Sync> ChildEventSink for FnSink<F> {
    fn send(&self, event: &SupervisorEnvelope) {
        (self.0)(event);
    }
}

/// Makes a child-event sink of a closure (it must not block).
pub fn sink_fn<F: Fn(&SupervisorEnvelope) + Send + Sync>(f: F) -> FnSink<F> {
    FnSink(f)
}
