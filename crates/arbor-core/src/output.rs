//! Typed answers: an output schema (JSON Schema) that a session's final answer must match.
//!
//! A session given one ([`SessionBuilder::output_schema`](crate::SessionBuilder), a child's
//! catalog entry or its spawn) keeps it in its record's meta (`output_schema`), so a run
//! resumed after a restart, or run by another worker, checks the same schema. When the
//! model answers, the answer is read as JSON (a single fenced block is unwrapped) and
//! validated; a mismatch is sent back to the model with the errors, at most `retries`
//! times, then the run fails with [`StopReason::InvalidOutput`](arbor_protocol::StopReason)
//! naming the first path that did not match. A run that matches answers with the value
//! itself (`RunResult::text` is its compact JSON; `RunResult::output` the value).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{CoreError, CoreResult};

/// The key of a session record's meta that holds its [`OutputSchema`].
pub const OUTPUT_SCHEMA: &str = "output_schema";
/// How many times a mismatching answer is sent back by default.
pub const DEFAULT_OUTPUT_RETRIES: u32 = 1;
/// The most a schema may ask.
pub const MAX_OUTPUT_RETRIES: u32 = 5;
/// The largest schema taken, serialized.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// The most validation errors a correction or a failure names.
const MAX_ERRORS: usize = 8;

/// A JSON Schema a final answer must match, and how many times a mismatch is sent back.
/// Read from JSON through the same checks as [`OutputSchema::new`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, try_from = "Stored")]
pub struct OutputSchema {
    schema: Value,
    retries: u32,
}

/// [`OutputSchema`] as stored, before its checks.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    schema: Value,
    #[serde(default = "default_retries")]
    retries: u32,
}

impl TryFrom<Stored> for OutputSchema {
    type Error = CoreError;

    fn try_from(s: Stored) -> CoreResult<Self> {
        Self::new(s.schema)?.retries(s.retries)
    }
}

/// The longest one validation error is told, in bytes (jsonschema's messages quote the
/// failing value whole).
const MAX_ERROR_BYTES: usize = 200;

fn default_retries() -> u32 {
    DEFAULT_OUTPUT_RETRIES
}

impl OutputSchema {
    /// `schema`, checked: an object (or `true`/`false`), at most [`MAX_SCHEMA_BYTES`], and a
    /// valid JSON Schema. Refused with a [`Validation`](crate::CoreErrorKind::Validation)
    /// error naming `output_schema` (its [`field`](CoreError::field)).
    pub fn new(schema: Value) -> CoreResult<Self> {
        if !(schema.is_object() || schema.is_boolean()) {
            return Err(invalid("must be a JSON Schema object"));
        }
        let size = serde_json::to_string(&schema).map_or(usize::MAX, |s| s.len());
        if size > MAX_SCHEMA_BYTES {
            return Err(invalid(&format!(
                "is {size} bytes; at most {MAX_SCHEMA_BYTES}"
            )));
        }
        jsonschema::validator_for(&schema)
            .map_err(|e| invalid(&format!("is not a valid JSON Schema: {e}")))?;
        Ok(Self {
            schema,
            retries: DEFAULT_OUTPUT_RETRIES,
        })
    }

    /// The same schema sending a mismatch back at most `retries` times (0 fails the run at
    /// the first); refused past [`MAX_OUTPUT_RETRIES`], naming `output_retries`.
    pub fn retries(mut self, retries: u32) -> CoreResult<Self> {
        if retries > MAX_OUTPUT_RETRIES {
            return Err(CoreError::invalid(
                "output_retries",
                format!("output_retries: at most {MAX_OUTPUT_RETRIES}, got {retries}"),
            ));
        }
        self.retries = retries;
        Ok(self)
    }

    /// The schema.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// How many times a mismatch is sent back.
    pub fn retry_count(&self) -> u32 {
        self.retries
    }

    /// The schema a session record's meta holds, checked again (`None` without one).
    pub fn of_meta(meta: &Value) -> CoreResult<Option<Self>> {
        match meta.get(OUTPUT_SCHEMA) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => serde_json::from_value(v.clone())
                .map(Some)
                .map_err(|e| invalid(&format!("stored in the session is unreadable: {e}"))),
        }
    }

    /// The schema a session record's meta keeps (its `output_schema` field alone is read:
    /// a child's typed meta is not turned into JSON for it).
    pub(crate) fn of_record(meta: &arbor_store::Meta) -> CoreResult<Option<Self>> {
        match meta.field(OUTPUT_SCHEMA) {
            None => Ok(None),
            Some(v) => serde_json::from_value(v.into_owned())
                .map(Some)
                .map_err(|e| invalid(&format!("stored in the session is unreadable: {e}"))),
        }
    }

    /// A session record's `output_schema` field, as stored (read alone).
    pub(crate) fn field_of(meta: &arbor_store::Meta) -> Option<std::borrow::Cow<'_, Value>> {
        meta.field(OUTPUT_SCHEMA)
    }

    /// The schema inside a stored `output_schema` field, without reading it into a checked
    /// value: what a provider turn sends the wire (the answer's check reads it whole).
    pub(crate) fn raw_in(field: Option<&Value>) -> Option<&Value> {
        field?.get("schema")
    }

    /// The checker of this schema.
    pub(crate) fn checker(&self) -> CoreResult<Checker> {
        let validator = jsonschema::validator_for(&self.schema)
            .map_err(|e| invalid(&format!("is not a valid JSON Schema: {e}")))?;
        Ok(Checker {
            validator,
            retries: self.retries,
        })
    }
}

fn invalid(why: &str) -> CoreError {
    CoreError::invalid("output_schema", format!("output_schema: {why}"))
}

/// A compiled schema, for one run.
pub(crate) struct Checker {
    validator: jsonschema::Validator,
    pub(crate) retries: u32,
}

impl std::fmt::Debug for Checker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checker")
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

/// Why an answer did not match: each error as `PATH: what`, the first path first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mismatch(pub(crate) Vec<String>);

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

impl Checker {
    /// The answer `text` as the value it must be, or why it is not.
    pub(crate) fn check(&self, text: &str) -> Result<Value, Mismatch> {
        let value: Value = serde_json::from_str(unfenced(text))
            .map_err(|e| Mismatch(vec![format!("/: the answer is not JSON ({e})")]))?;
        let errors: Vec<String> = self
            .validator
            .iter_errors(&value)
            .take(MAX_ERRORS)
            .map(|e| {
                let path = e.instance_path().to_string();
                let path = if path.is_empty() {
                    "/".to_owned()
                } else {
                    path
                };
                format!("{path}: {}", cut(&e.to_string()))
            })
            .collect();
        if errors.is_empty() {
            Ok(value)
        } else {
            Err(Mismatch(errors))
        }
    }
}

/// `text` cut to [`MAX_ERROR_BYTES`] on a character boundary, marked when cut.
fn cut(text: &str) -> String {
    if text.len() <= MAX_ERROR_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_ERROR_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The text inside one fenced block (```json … ```), or the text itself.
fn unfenced(text: &str) -> &str {
    let t = text.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let Some(body) = rest.strip_suffix("```") else {
        return t;
    };
    // The info string (`json`) runs to the first line break.
    match body.split_once('\n') {
        Some((info, inner)) if !info.contains('`') => inner.trim(),
        _ => t,
    }
}

/// The value a finished run of a session with `meta` answered: its text read as JSON when
/// the session has an output schema and the run succeeded (the run checked it).
pub(crate) fn value_of(meta: &arbor_store::Meta, result: &crate::RunResult) -> Option<Value> {
    // Its `output_schema` field alone is read: a child's typed meta is not turned into JSON.
    if result.status != arbor_protocol::RunStatus::Succeeded || meta.field(OUTPUT_SCHEMA).is_none()
    {
        return None;
    }
    serde_json::from_str(unfenced(&result.text)).ok()
}

/// What the model reads when its answer did not match.
pub(crate) fn correction(mismatch: &Mismatch) -> String {
    format!(
        "{CORRECTION_PREFIX} {mismatch}. Answer again with only a JSON value that matches the \
         schema, and nothing else."
    )
}

/// How a correction sent back begins: what a resumed run counts its corrections by.
pub(crate) const CORRECTION_PREFIX: &str = "Your answer does not match the required output schema:";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn person() -> Checker {
        OutputSchema::new(json!({
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
            "required": ["name", "age"],
            "additionalProperties": false
        }))
        .unwrap()
        .checker()
        .unwrap()
    }

    #[test]
    fn a_matching_answer_is_its_value_fenced_or_not() {
        let c = person();
        assert_eq!(
            c.check(r#"{"name":"Ada","age":36}"#).unwrap(),
            json!({"name": "Ada", "age": 36})
        );
        assert_eq!(
            c.check("```json\n{\"name\": \"Ada\", \"age\": 36}\n```")
                .unwrap(),
            json!({"name": "Ada", "age": 36})
        );
    }

    #[test]
    fn a_mismatch_names_each_path() {
        let c = person();
        let m = c.check(r#"{"name":"Ada","age":-1}"#).unwrap_err();
        assert_eq!(m.0.len(), 1, "{m}");
        assert!(m.0[0].starts_with("/age: "), "{m}");
        let m = c.check(r#"{"age":"old"}"#).unwrap_err();
        assert!(m.to_string().contains("/age: "), "{m}");
        assert!(m.to_string().contains("/: "), "{m}");
        let m = c.check("Ada, 36").unwrap_err();
        assert!(m.0[0].starts_with("/: the answer is not JSON"), "{m}");
    }

    #[test]
    fn a_bad_schema_or_retry_count_is_refused_naming_it() {
        let e = OutputSchema::new(json!("string")).unwrap_err();
        assert_eq!(e.to_string(), "output_schema: must be a JSON Schema object");
        let e = OutputSchema::new(json!({"type": 12})).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("output_schema: is not a valid JSON Schema"),
            "{e}"
        );
        let e = OutputSchema::new(json!({}))
            .unwrap()
            .retries(6)
            .unwrap_err();
        assert_eq!(e.to_string(), "output_retries: at most 5, got 6");
        let big = json!({"description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert!(OutputSchema::new(big).is_err());
    }

    #[test]
    fn the_stored_form_reads_back() {
        let s = OutputSchema::new(json!({"type": "integer"}))
            .unwrap()
            .retries(2)
            .unwrap();
        let meta = json!({ OUTPUT_SCHEMA: serde_json::to_value(&s).unwrap() });
        assert_eq!(OutputSchema::of_meta(&meta).unwrap(), Some(s));
        assert_eq!(OutputSchema::of_meta(&json!({})).unwrap(), None);
        assert!(OutputSchema::of_meta(&json!({ OUTPUT_SCHEMA: {"schema": {"type": 3}} })).is_err());
    }
}
