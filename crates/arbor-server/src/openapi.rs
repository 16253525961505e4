//! `GET /v1/openapi.json`: the API described from the handlers' own types (utoipa).

use axum::Json;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::api;
use crate::api::approvals::{
    ApprovalsView, DecideRequest, DecisionInput, PendingView, QuestionView, ResumeView,
    SuspensionView, VerdictInput,
};
use crate::api::host::{
    AnswerView, DelegationState, DeletedView, HandleView, MessageRequest, ReceiptView,
    SpawnRequest, WaitAnswer,
};
use crate::api::listing::{RunList, RunSummary};
use crate::api::tree::{NodeView, TreeSnapshot};
use crate::error::{ApiError, ErrorBody, ErrorKind, LimitBody};
use crate::views::{
    BudgetRequest, CancelView, ChildrenView, CostTotals, RunResultView, RunView, SessionView,
    SpecList, StartRunRequest, Totals, TranscriptPage, TreeView,
};

/// The document.
#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "arbor", description = "Supervised recursive agent delegation: runs, trees, \
        transcripts and approvals, for hosts in any language."),
    paths(
        api::health::healthz,
        api::health::readyz,
        api::health::metrics,
        api::runs::specs,
        api::runs::start,
        api::runs::get,
        api::listing::list,
        api::tree::stream,
        api::feed::stream,
        api::sessions::get,
        api::sessions::children,
        api::sessions::transcript,
        api::sessions::cancel,
        api::host::spawn,
        api::host::wait,
        api::host::cancel,
        api::host::stop,
        api::host::message,
        api::host::delete,
        api::events::stream,
        api::approvals::list,
        api::approvals::decide,
        api::approvals::resume,
        api::work::diff,
        api::work::merge,
        api::work::discard,
        openapi_json,
    ),
    components(schemas(
        ApiError, ErrorBody, ErrorKind, LimitBody, arbor_protocol::Usage, Totals, CostTotals, SessionView, TreeView,
        ChildrenView, TranscriptPage, StartRunRequest, BudgetRequest, RunView, RunResultView, SpecList, CancelView,
        PendingView, QuestionView, SuspensionView, ApprovalsView, VerdictInput, DecisionInput, DecideRequest,
        ResumeView, NodeView, TreeSnapshot, RunSummary, RunList, arbor_core::supervisor::Mode, SpawnRequest,
        HandleView, AnswerView, WaitAnswer, DelegationState, MessageRequest, ReceiptView, DeletedView,
        crate::feed::FeedEntry, crate::feed::FeedEvent, arbor_core::budget::PoolView,
        arbor_core::budget::Budget, arbor_core::budget::Amount, arbor_core::supervisor::Stopped,
        crate::api::work::MergeRequest, crate::api::work::DiffView, crate::api::work::MergeView,
        crate::api::work::DiscardView, crate::api::work::FilesView, crate::api::work::FileView,
        crate::api::work::ConflictView,
    )),
    modifiers(&Bearer),
    tags(
        (name = "health", description = "Liveness, readiness, metrics"),
        (name = "runs", description = "Root runs started from named specs"),
        (name = "sessions", description = "Sessions, their children and transcripts"),
        (name = "host", description = "A host acting as a parent: spawn, wait, cancel, message, delete"),
        (name = "approvals", description = "Calls waiting for a person's decision, and resuming"),
        (name = "coding", description = "Coding children's work: diff, merge, discard"),
    )
)]
pub struct ApiDoc;

struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        openapi.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
    }
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "health",
    responses((status = 200, description = "The OpenAPI document", body = Object)))]
pub(crate) async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document the typed clients are generated from (`clients/openapi.json`) is this
    /// one: a change to the API fails here until the document is written again
    /// (`OPENAPI=bless cargo test -p arbor-server --lib openapi`) and the clients are
    /// regenerated from it (`bash clients/generate.sh`, which CI checks).
    #[test]
    fn the_clients_document_is_current() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/openapi.json");
        let mut now = serde_json::to_string_pretty(&ApiDoc::openapi()).unwrap();
        now.push('\n');
        if std::env::var("OPENAPI").as_deref() == Ok("bless") {
            std::fs::write(&path, &now).unwrap();
            return;
        }
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            kept == now,
            "clients/openapi.json is not the served document: run \
             `OPENAPI=bless cargo test -p arbor-server --lib openapi`, then \
             `bash clients/generate.sh`"
        );
    }

    /// Every operation has an id of its own (generated clients key their functions and
    /// types by it: two `get`s made one overwrite the other's types).
    #[test]
    fn operation_ids_are_unique() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let mut seen = std::collections::BTreeMap::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let id = op["operationId"].as_str().unwrap().to_owned();
                if let Some(first) = seen.insert(id.clone(), format!("{method} {path}")) {
                    panic!("operationId {id} names both {first} and {method} {path}");
                }
            }
        }
        assert!(seen.len() > 20, "{seen:?}");
    }

    /// Ids are named one way in every schema of the document: a view of a session (a schema
    /// with the session's `parent_id` and `root_id`) names its own id `id`, never
    /// `session_id`; `session_id` only ever names the session another object is about.
    #[test]
    fn a_session_names_its_own_id_id_in_every_schema() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut sessions = Vec::new();
        for (name, schema) in schemas {
            let Some(props) = schema["properties"].as_object() else {
                continue;
            };
            if props.contains_key("parent_id") && props.contains_key("root_id") {
                assert!(props.contains_key("id"), "{name} has no `id`");
                assert!(
                    !props.contains_key("session_id"),
                    "{name} has a `session_id`"
                );
                sessions.push(name.as_str());
            }
        }
        // The reader sees the session view (so the rule is checked at all).
        assert!(sessions.contains(&"SessionView"), "{sessions:?}");
    }
}
