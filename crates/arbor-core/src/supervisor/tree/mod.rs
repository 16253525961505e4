//! The live tree of one supervisor: the [`hub`] of sessions this process runs (inboxes, run
//! claims, closed sessions), the [`messages`] between a parent and its children, and the
//! [`lifecycle`] calls a host makes on the tree (attach, delete, rename, close).

pub(crate) mod hub;
pub(crate) mod lifecycle;
pub(crate) mod live;
pub mod messages;
