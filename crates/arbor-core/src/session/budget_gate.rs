//! The budget gate of a session under a pool ([`crate::budget`]): before each provider call,
//! its worst case is reserved in the pools on the session's path, or the call is not made;
//! once the call's usage is stored, the reservation is released.

use arbor_model::ModelRequest;
use arbor_protocol::{AgentEvent, RunId, SessionId, Usage};

use crate::budget::{self, Amount, DEFAULT_OUTPUT_RESERVE, Refusal};
use crate::error::CoreResult;
use crate::session::Session;

impl Session {
    /// Whether the session spends from a pool (its record says so, durably).
    pub(crate) fn budgeted(&self) -> bool {
        self.record
            .meta
            .field(budget::BUDGETED)
            .is_some_and(|v| v.as_bool() == Some(true))
    }

    /// The session, then its ancestors, nearest first.
    pub(crate) fn path(&self) -> Vec<SessionId> {
        std::iter::once(self.id())
            .chain(self.ancestors.iter().map(|a| a.session))
            .collect()
    }

    /// The next call's worst case: its prompt, estimated conservatively, plus its output cap
    /// (the agent's `max_output_tokens`, else the cap its provider sends, else
    /// [`DEFAULT_OUTPUT_RESERVE`]) and its thinking budget; priced (with prices) as if every prompt token were a cache write when that
    /// costs more than plain input.
    fn worst_case(&self) -> Amount {
        // The schema the answer is checked against, for a wire that can constrain it (as
        // stored: nothing is compiled on a turn).
        let output = crate::output::OutputSchema::field_of(&self.record.meta);
        let schema = crate::output::OutputSchema::raw_in(output.as_deref());
        let request = ModelRequest::new(self.agent.model(), &self.messages)
            .system(self.agent.system())
            .tools(self.agent.tools().specs())
            .reasoning((!self.reasoning.is_empty()).then_some(&self.reasoning))
            .output_schema(schema);
        let input = arbor_model::estimate_input_tokens(&request);
        let cap = self
            .agent
            .controls()
            .and_then(|c| c.max_output_tokens)
            .or_else(|| self.agent.provider().max_output_tokens())
            .map_or(DEFAULT_OUTPUT_RESERVE, u64::from);
        let thinking = self
            .agent
            .thinking()
            .and_then(arbor_model::ThinkingLevel::budget_tokens)
            .map_or(0, u64::from);
        let output = cap.saturating_add(thinking);
        let cost = self
            .agent
            .pricing()
            .and_then(|t| t.price_of(self.agent.model()))
            .map_or(0, |price| {
                let plain = Usage::new(input, output);
                let written = Usage {
                    cache_write_tokens: input,
                    ..plain
                };
                price.cost(&plain).max(price.cost(&written))
            });
        Amount {
            tokens: input.saturating_add(output),
            cost,
        }
    }

    /// Reserves the next call's worst case; `Ok(Err(_))` when a pool cannot cover it (the
    /// call must not be made). Publishes `budget_low` for each pool this reservation takes
    /// past its low mark.
    pub(crate) async fn reserve_call(&self, run_id: RunId) -> CoreResult<Result<(), Refusal>> {
        let amount = self.worst_case();
        // A pool limiting money cannot reserve a call whose model has no price.
        let model = self.agent.model();
        let unpriced = match self.agent.pricing() {
            Some(t) if t.price_of(model).is_some() => None,
            _ => Some(model),
        };
        let grant = budget::reserve_call(
            self.store.as_ref(),
            self.record.root_id,
            (self.id(), &self.path()),
            amount,
            unpriced,
        )
        .await?;
        match grant {
            Ok(grant) => {
                for (pool, limit_name, limit, used) in grant.low {
                    tracing::info!(session = %self.id(), %pool, limit_name, limit, used, "a budget pool passed its low mark");
                    self.bus.publish(
                        run_id,
                        AgentEvent::BudgetLow {
                            pool,
                            limit_name: limit_name.to_owned(),
                            limit,
                            used,
                        },
                    );
                }
                Ok(Ok(()))
            }
            Err(refusal) => Ok(Err(refusal)),
        }
    }

    /// Releases the session's reservation, if it holds one (its usage is stored by now); or,
    /// when `cut` (the call was cancelled or timed out before its usage arrived), charges it
    /// as spent. A ledger that cannot be written leaves the reservation to lapse once the
    /// session stops running: logged, never the run's failure.
    pub(crate) async fn settle_call(&self, cut: bool) {
        if !self.budgeted() {
            return;
        }
        let settled =
            budget::settle_call(self.store.as_ref(), self.record.root_id, self.id(), cut).await;
        if let Err(e) = settled {
            tracing::warn!(session = %self.id(), error = %e, "a budget reservation was not released; it lapses when the session stops running");
        }
    }

    /// What run `run_id` of this session has cost so far: the sum of its `cost` entries.
    pub(crate) async fn run_cost(&self, run_id: RunId) -> CoreResult<u64> {
        if self.agent.pricing().is_none() {
            return Ok(0);
        }
        let entries = self.store.transcript(self.id(), 0, None).await?;
        Ok(entries
            .iter()
            .filter(|e| e.run_id == run_id)
            .fold(0u64, |sum, e| match &e.kind {
                arbor_protocol::EntryKind::Cost { micros, .. } => sum.saturating_add(*micros),
                _ => sum,
            }))
    }
}
