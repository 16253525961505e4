//! What one provider turn cost: its usage priced by the agent's [`PriceTable`], as the model
//! the provider said served it (else the agent's own model), in micro-units. A session
//! without prices costs nothing and writes no cost entry.
//!
//! [`PriceTable`]: crate::pricing::PriceTable

use arbor_protocol::Usage;

use crate::agent::Agent;

/// The model a turn is priced as and its cost (0, and a blank model, without prices).
pub(crate) fn of_turn(agent: &Agent, answered_by: Option<String>, usage: &Usage) -> (String, u64) {
    let Some(table) = agent.pricing() else {
        return (String::new(), 0);
    };
    // The model that answered, when the table prices it; else the one the agent asked for
    // (a provider's dated name the table does not know is priced as its family).
    let model = answered_by
        .filter(|m| table.price_of(m).is_some())
        .unwrap_or_else(|| agent.model().to_owned());
    match table.cost(&model, usage) {
        Ok(cost) => (model, cost.unwrap_or(0)),
        // `missing = "error"` is refused when the agent is built; a model that has lost its
        // price since (a table replaced under a running tree) counts as free, loudly.
        Err(e) => {
            tracing::error!(model, error = %e, "a turn could not be priced: counted as costing nothing");
            (model, 0)
        }
    }
}
