//! The live tree of one supervisor: what its delegations share ([`live`]), the [`hub`] of
//! sessions this process runs (inboxes, run claims, closed sessions), the tree-wide count of
//! live children ([`slots`]), the recovery counters ([`summary`]), the async handles and
//! cancel reasons ([`handles`]), and the [`messages`] between a parent and its children. It
//! imports nothing of `delegation/` or `tools/` (the layout test checks it); the calls a
//! host makes on the tree (attach, delete, rename) are in `supervisor/lifecycle.rs`.

pub(crate) mod handles;
pub(crate) mod hub;
pub(crate) mod live;
pub mod messages;
pub(crate) mod slots;
pub mod summary;
