//! `find_models`: a bounded search of the models a parent may spawn its children with.
//!
//! Only models a child's catalog entry allows (its default and `allow_models`) are ever
//! shown, and of those only the ones the entry's provider lists (a provider that cannot
//! list leaves the entry's own declaration; one whose list fails is reported as
//! `unavailable`, with its error, instead of hiding the failure). Each model comes with the
//! thinking levels it supports. The catalog is never put into a prompt: the model asks.
//!
//! Matching follows the delegation contract: the query and each field (model, child id) are
//! normalized to lowercase letters and digits; an exact match ranks before a prefix, before
//! a substring; ties sort by model, then child id. `limit` is 1 to 20 (default 8).

use std::collections::HashMap;

use arbor_model::ToolSpec;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{CoreError, CoreResult};
use crate::supervisor::runtime::Supervisor;
use crate::tool::{DynTool, ToolContext, ToolError};

/// The most models one search returns.
pub(crate) const MAX_FIND_LIMIT: u64 = 20;
/// The models a search returns when it names no limit.
pub(crate) const DEFAULT_FIND_LIMIT: u64 = 8;
/// The longest query accepted, in characters.
pub(crate) const MAX_QUERY_CHARS: usize = 200;

const TOOL: &str = "find_models";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FindArgs {
    query: Option<String>,
    limit: Option<u64>,
    child_id: Option<String>,
}

/// The `find_models` tool over some of a supervisor's children.
#[derive(Debug, Clone)]
pub struct FindModelsTool {
    supervisor: Supervisor,
    spec: ToolSpec,
    allowed: Vec<String>,
}

impl FindModelsTool {
    /// The tool over every child of `supervisor`.
    pub fn new(supervisor: Supervisor) -> Self {
        let ids = supervisor.child_ids().to_vec();
        Self::build(supervisor, ids)
    }

    /// The tool over some children only (each must be allow-listed), as `spawn_agent`
    /// offers them.
    pub fn for_children(supervisor: Supervisor, children: &[String]) -> CoreResult<Self> {
        for id in children {
            if !supervisor.child_ids().contains(id) {
                return Err(CoreError::invalid(
                    "child_id",
                    format!("Invalid child id: {id}"),
                ));
            }
        }
        Ok(Self::build(supervisor, children.to_vec()))
    }

    pub(crate) fn build(supervisor: Supervisor, ids: Vec<String>) -> Self {
        let spec = ToolSpec {
            name: TOOL.to_owned(),
            description: format!(
                "Search the models you may give a child when you spawn it (spawn_agent's \
                 `model`), with the thinking levels each supports (spawn_agent's `thinking`). \
                 Matches model and child id, case-insensitive; at most {MAX_FIND_LIMIT} results."
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "maxLength": MAX_QUERY_CHARS, "description": "Part of a model name; empty lists every model."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_FIND_LIMIT, "description": format!("Most results (default {DEFAULT_FIND_LIMIT}).")},
                    "child_id": {"type": "string", "enum": ids, "description": "Only this child's models."}
                },
                "additionalProperties": false
            }),
        };
        Self {
            supervisor,
            spec,
            allowed: ids,
        }
    }

    /// The query, limit and children of `arguments`, each refused naming its field (the
    /// schema is checked first: unknown keys, types, the limit's range, the child ids).
    fn parse(&self, arguments: Value) -> Result<(String, usize, Vec<String>), ToolError> {
        let sup = &self.supervisor;
        let arguments = match arguments {
            Value::Null => json!({}),
            other => other,
        };
        let args: FindArgs = sup.parse_arguments(&self.spec, arguments)?;
        let query = args.query.unwrap_or_default();
        if query.chars().count() > MAX_QUERY_CHARS {
            return Err(sup.bad_arguments(
                TOOL,
                &format!("\"query\" must be at most {MAX_QUERY_CHARS} characters"),
            ));
        }
        let limit = args.limit.unwrap_or(DEFAULT_FIND_LIMIT).min(MAX_FIND_LIMIT);
        let children = match args.child_id {
            None => self.allowed.clone(),
            Some(id) => vec![id],
        };
        Ok((
            query,
            usize::try_from(limit).unwrap_or(usize::MAX),
            children,
        ))
    }
}

/// Lowercase letters and digits only.
fn normalize(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// 3 exact, 2 prefix, 1 substring, 0 no match (an empty query matches everything as 1).
fn score(query: &str, field: &str) -> u8 {
    let field = normalize(field);
    if query.is_empty() {
        1
    } else if field == query {
        3
    } else if field.starts_with(query) {
        2
    } else if field.contains(query) {
        1
    } else {
        0
    }
}

/// One model a child may run.
struct Found {
    score: u8,
    child_id: String,
    model: String,
    default: bool,
    thinking: Vec<&'static str>,
}

#[async_trait]
impl DynTool for FindModelsTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn exclusive(&self) -> bool {
        false
    }

    async fn call_json(&self, arguments: Value, _ctx: ToolContext) -> Result<String, ToolError> {
        let (query, limit, children) = self.parse(arguments)?;
        let query = normalize(&query);
        let sup = &self.supervisor;
        // One listing per provider, however many children share it.
        let mut listed: HashMap<usize, Result<Option<Vec<String>>, String>> = HashMap::new();
        let mut found: Vec<Found> = Vec::new();
        let mut unavailable: Vec<Value> = Vec::new();
        for child_id in &children {
            let Some((_, entry)) = sup.catalog().get(child_id) else {
                continue;
            };
            let offered = match &entry.preflight {
                None => Ok(None),
                Some(p) => {
                    let key = std::sync::Arc::as_ptr(p).cast::<()>() as usize;
                    match listed.get(&key) {
                        Some(r) => r.clone(),
                        None => {
                            let r = p.list_models().await.map_err(|e| e.to_string());
                            listed.insert(key, r.clone());
                            r
                        }
                    }
                }
            };
            let offered = match offered {
                Ok(o) => o,
                Err(error) => {
                    unavailable.push(json!({"child_id": child_id, "error": error}));
                    continue;
                }
            };
            let mut seen: Vec<&str> = Vec::new();
            for (n, model) in entry.models().into_iter().enumerate() {
                if seen.iter().any(|s| s.eq_ignore_ascii_case(model)) {
                    continue;
                }
                seen.push(model);
                if offered
                    .as_ref()
                    .is_some_and(|list| !list.iter().any(|m| m == model))
                {
                    continue;
                }
                let score = score(&query, model).max(score(&query, child_id));
                if score == 0 {
                    continue;
                }
                found.push(Found {
                    score,
                    child_id: child_id.clone(),
                    model: model.to_owned(),
                    default: n == 0 && entry.model.is_some(),
                    thinking: entry
                        .supported_thinking(Some(model))
                        .into_iter()
                        .map(|l| l.as_str())
                        .collect(),
                });
            }
        }
        found.sort_by(|a, b| {
            b.score
                .cmp(&a.score)
                .then_with(|| a.model.cmp(&b.model))
                .then_with(|| a.child_id.cmp(&b.child_id))
        });
        let matched = found.len();
        let models: Vec<Value> = found
            .into_iter()
            .take(limit)
            .map(|f| {
                json!({
                    "model": f.model,
                    "child_id": f.child_id,
                    "default": f.default,
                    "thinking": f.thinking,
                })
            })
            .collect();
        let mut out = json!({
            "models": models,
            "matched": matched,
            "truncated": matched > limit,
        });
        if !unavailable.is_empty() {
            out["unavailable"] = Value::Array(unavailable);
        }
        Ok(self.supervisor.redact(&out.to_string()))
    }
}
