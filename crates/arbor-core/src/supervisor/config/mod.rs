//! What a supervisor is configured with, before any delegation: the allow-listed
//! [`catalog`] of children, the [`limits`] and child [`policy`] that only narrow, the
//! `before`/`after` [`hooks`], the rules for child [`names`], and the thinking levels a child
//! may be asked for.

pub(crate) mod builder;
pub mod catalog;
pub(crate) mod child_meta;
pub mod hooks;
pub mod limits;
pub mod names;
pub(crate) mod ownership;
pub mod policy;
pub mod runner;
pub(crate) mod settings;
pub(crate) mod sink;
pub(crate) mod thinking;
