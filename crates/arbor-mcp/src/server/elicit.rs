//! Questions put to the person at the MCP client: when a child the client waits on (a sync
//! `spawn_agent`, or `wait_agent`) stops on questions it asked with `ask_human`, and the
//! client supports form elicitation, each question is sent as an `elicitation/create` (its
//! choices as an enum, else a free-text answer). An accepted answer is recorded as the
//! question's answer, a decline declines it, both once (compare-and-swap, as
//! `decide_approval` records them); once nothing of the child's run waits, it is resumed
//! and waited on again, so the call returns the child's answer. A cancel, a client without
//! elicitation, or an approval among what waits leaves it as before: `suspended`, for
//! `decide_approval`.

use arbor_core::NestedSuspension;
use arbor_core::tool::ask::{MAX_ANSWER_BYTES, Question, answer};
use arbor_protocol::{ApprovalDecision, DecidedBy, PendingDecision, Verdict};
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{Peer, RequestContext, RoleServer};
use serde_json::json;

/// Who can be asked: the client, when it supports form elicitation.
#[derive(Clone, Default)]
pub(crate) struct Asker(Option<Peer<RoleServer>>);

impl std::fmt::Debug for Asker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Asker").field(&self.0.is_some()).finish()
    }
}

impl Asker {
    /// The client of this request, if it takes form elicitations.
    pub(crate) fn of(cx: &RequestContext<RoleServer>) -> Self {
        let can = cx
            .peer
            .supported_elicitation_modes()
            .contains(&rmcp::service::ElicitationMode::Form);
        Self(can.then(|| cx.peer.clone()))
    }

    /// Asks the client each question `nested` waits on, when everything it waits on is a
    /// question; the decisions taken (an answer, or a decline), none when nothing could be
    /// asked or the person cancelled.
    pub(crate) async fn ask(
        &self,
        nested: &NestedSuspension,
        tenant: Option<String>,
    ) -> Vec<ApprovalDecision> {
        let Some(peer) = &self.0 else {
            return Vec::new();
        };
        let questions: Vec<(&PendingDecision, Question)> = nested
            .pending
            .iter()
            .filter_map(|p| Question::of(p).map(|q| (p, q)))
            .collect();
        if questions.is_empty() || questions.len() != nested.pending.len() {
            return Vec::new();
        }
        let by = DecidedBy::new(tenant, Some("mcp client".to_owned()));
        let mut decisions = Vec::new();
        for (p, q) in questions {
            let Some(mut d) = put(peer, p, &q).await else {
                return Vec::new();
            };
            d.decided_by = Some(by.clone());
            decisions.push(d);
        }
        decisions
    }
}

/// One question as an elicitation: its decision, or `None` (cancelled, failed, or an answer
/// that does not fit it).
async fn put(
    peer: &Peer<RoleServer>,
    p: &PendingDecision,
    q: &Question,
) -> Option<ApprovalDecision> {
    let who = p.path.last().map_or("the root", String::as_str);
    // Characters, as a client may count them: a quarter of the bytes an answer may hold.
    let mut field = json!({"type": "string", "title": "Answer", "maxLength": MAX_ANSWER_BYTES / 4});
    if !q.choices.is_empty() {
        field = json!({"type": "string", "title": "Answer", "enum": q.choices});
    }
    let schema = json!({"type": "object", "properties": {"answer": field}, "required": ["answer"]});
    let serde_json::Value::Object(schema) = schema else {
        return None;
    };
    let requested_schema = match ElicitationSchema::from_json_schema(schema) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "a question's elicitation schema does not build");
            return None;
        }
    };
    let asked = peer
        .create_elicitation(ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: format!("{who} asks: {}", q.question),
            requested_schema,
        })
        .await;
    let result = match asked {
        Ok(r) => r,
        Err(e) => {
            tracing::info!(error = %e, "a question could not be put to the client");
            return None;
        }
    };
    match result.action {
        ElicitationAction::Accept => {
            let text = result
                .content
                .as_ref()
                .and_then(|c| c["answer"].as_str())
                .map(str::to_owned)?;
            match q.check_answer(&text) {
                Ok(()) => Some(answer(p.id.clone(), text)),
                Err(e) => {
                    tracing::info!(error = %e, "an elicited answer does not fit its question");
                    None
                }
            }
        }
        ElicitationAction::Decline => Some(
            ApprovalDecision::new(p.id.clone(), Verdict::RejectOnce)
                .with_reason("declined at the MCP client"),
        ),
        _ => None,
    }
}
