//! [`ChildMeta`]: what a child's session record keeps of its admission, typed.

use std::sync::Arc;

use serde::{Serialize, Serializer};

use crate::supervisor::config::limits::SupervisorLimits;
use crate::supervisor::config::policy::EffectivePolicy;

/// What a child's record keeps of its admission (`meta`): who spawned it and how, and the
/// terms every later run of it keeps (a follow-up, a resume, in this process or another).
/// Typed, so the JSON is built only when something reads it (or straight as the text a
/// store writes). The fields are in the order of the keys of a JSON object, as the record's
/// JSON was built before.
#[derive(Debug, Serialize)]
pub(crate) struct ChildMeta {
    pub(crate) child_id: String,
    pub(crate) delegation_id: String,
    /// Where its conversation forks from its parent's (see [`crate::session::fork`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fork: Option<crate::session::fork::ForkPoint>,
    pub(crate) lifetime: &'static str,
    /// What admission narrowed (request limits, budget share, policy).
    pub(crate) limits: SupervisorLimits,
    /// The parent's own maximum depth, if its host lowered it (the child inherits it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_depth: Option<u32>,
    pub(crate) mode: &'static str,
    /// The schema its answers must match (see [`crate::output`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) output_schema: Option<crate::output::OutputSchema>,
    pub(crate) path: Path,
    pub(crate) policy: EffectivePolicy,
    /// The task of a child registered queued (waiting for a slot): a crash before it started
    /// leaves it something to start on ([`QUEUED_INPUT`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) queued_input: Option<String>,
    pub(crate) resource_id: String,
    pub(crate) scopes: Option<Vec<String>>,
    /// Only a model's call names one (a host's delegation has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) spawn_call: Option<String>,
    /// Its standing decisions: its parent's (or the supervisor's), narrowed by its entry.
    #[serde(skip_serializing_if = "crate::approval::standing::Standing::is_empty")]
    pub(crate) standing: crate::approval::standing::Standing,
    pub(crate) supervisor_id: String,
    pub(crate) thinking: Option<arbor_model::ThinkingLevel>,
    /// Only a delegation that set controls has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) controls: Option<arbor_model::Controls>,
    pub(crate) thread_id: String,
    /// It spends from a pool (its own or an ancestor's): its calls reserve first.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) budgeted: bool,
    /// Its own pool, as granted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) budget: Option<crate::budget::Budget>,
    /// Its pool was clamped to what its parent's had left.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) budget_clamped: bool,
}

/// The meta key of a queued child's task.
pub(crate) const QUEUED_INPUT: &str = "queued_input";

/// A child's path from the root, shared with its delegation.
#[derive(Debug)]
pub(crate) struct Path(pub(crate) Arc<[String]>);

impl Serialize for Path {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}
