//! An agent's `output_schema` and `output_retries`: the JSON Schema its answers must match,
//! written as a TOML table of JSON Schema's keys.
//!
//! ```toml
//! [agents.clerk]
//! output_schema = { type = "object", required = ["name"], properties = { name = { type = "string" } } }
//! output_retries = 2    # mismatches sent back before the run fails `invalid_output`
//! ```

impl super::AgentSpec {
    /// Its `output_schema` (with `output_retries`), checked; `None` without one.
    pub(crate) fn output(&self) -> Result<Option<arbor_core::output::OutputSchema>, String> {
        match (&self.output_schema, self.output_retries) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err("output_retries: only with output_schema".to_owned()),
            (Some(schema), retries) => arbor_core::output::OutputSchema::new(schema.clone())
                .and_then(|o| {
                    o.retries(retries.unwrap_or(arbor_core::output::DEFAULT_OUTPUT_RETRIES))
                })
                .map(Some)
                .map_err(|e| e.to_string()),
        }
    }
}

impl super::Spec {
    /// The root agent's `output_schema`, checked (the run's root session keeps it).
    pub(crate) fn root_output(&self) -> Result<Option<arbor_core::output::OutputSchema>, String> {
        match self.agents.get(self.root_name()?) {
            Some(agent) => agent.output(),
            None => Ok(None),
        }
    }
}
