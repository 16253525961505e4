//! The supervisor: allow-listed delegation to child agents.
//!
//! - [`limits`]: [`SupervisorLimits`], defaults, hard caps and narrowing.
//! - [`policy`]: child policies (lifetime, report, milestones, budget share).

pub mod limits;
pub mod policy;

pub use limits::{LimitsInput, SupervisorLimits};
pub use policy::{EffectivePolicy, HARD_MILESTONE_EVERY_TURNS, Lifetime, PolicyInput, Report};
