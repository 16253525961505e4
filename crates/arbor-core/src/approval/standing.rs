//! Standing decisions: calls a host decides once and for all, so they never wait.
//!
//! A [`StandingLayer`] allows some calls always (`allow`) and rejects some always
//! (`reject`), each a [`CallPattern`]: a tool name (where `*` is any run of characters) and,
//! optionally, an arguments pattern that the call's arguments must contain (objects by key,
//! arrays element by element, strings as globs, other values equal). A session's
//! [`Standing`] is a stack of layers, kept in its record (`meta.standing`): the supervisor's
//! (`SupervisorBuilder::standing`, the spec's `[supervisor] standing`), then each catalog
//! entry's on the way down (`ChildEntry::standing`). They compose like permissions: a
//! reject in any layer rejects; a call is allowed without asking only when every layer that
//! lists allows allows it, so a child inherits its parent's standing decisions and its entry
//! can only narrow them, never widen them.
//!
//! A call that waits for a decision (durable approvals, `interrupt_before_tool`) is decided by
//! the standing decisions first: it runs, or is rejected, at once, and the decision is
//! written into its session's transcript as a `decision` entry by `standing`, naming the rule.

use arbor_protocol::Verdict;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The key of a session record's meta that holds its [`Standing`].
pub const STANDING: &str = "standing";

/// Which calls a standing rule is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallPattern {
    /// The tool (`*` is any run of characters).
    pub tool: String,
    /// What the call's arguments must contain, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

impl CallPattern {
    /// Calls of `tool` (a glob), whatever their arguments.
    pub fn tool(tool: impl Into<String>) -> Self {
        Self {
            tool: tool.into(),
            arguments: None,
        }
    }

    /// The same pattern, for calls whose arguments contain `arguments`.
    #[must_use]
    pub fn with_arguments(mut self, arguments: Value) -> Self {
        self.arguments = Some(arguments);
        self
    }

    /// Whether a call of `tool` with `arguments` is one. With `strict` (an allow), a
    /// string argument that walks a path (a `.` or `..` segment, or `//`) matches nothing:
    /// `notes/../etc/passwd` is not under `notes/*`, and such a call waits for a person.
    pub fn matches(&self, tool: &str, arguments: &Value, strict: bool) -> bool {
        crate::pricing::glob(&self.tool, tool)
            && self
                .arguments
                .as_ref()
                .is_none_or(|want| contains(arguments, want, strict))
    }

    fn shown(&self) -> String {
        match &self.arguments {
            Some(a) => format!("{} {a}", self.tool),
            None => self.tool.clone(),
        }
    }
}

/// Whether `have` contains `want`: objects by key, arrays element by element, strings as
/// globs (with `strict`, never a string that walks a path), anything else equal.
fn contains(have: &Value, want: &Value, strict: bool) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| h.get(k).is_some_and(|hv| contains(hv, wv, strict))),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(hv, wv)| contains(hv, wv, strict))
        }
        (Value::String(h), Value::String(w)) => !(strict && walks(h)) && crate::pricing::glob(w, h),
        (h, w) => h == w,
    }
}

/// Whether `text`, read as a path, has a `.` or `..` segment or an empty one (`//`).
fn walks(text: &str) -> bool {
    text.contains("//")
        || text
            .split(['/', '\\'])
            .any(|segment| segment == "." || segment == "..")
}

/// One layer of standing decisions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StandingLayer {
    /// Calls allowed always. `None`: this layer does not narrow what the layers above allow
    /// (a layer with an empty list allows nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<CallPattern>>,
    /// Calls rejected always.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reject: Vec<CallPattern>,
}

impl StandingLayer {
    /// The same layer, allowing `pattern` always.
    #[must_use]
    pub fn allow_always(mut self, pattern: CallPattern) -> Self {
        self.allow.get_or_insert_with(Vec::new).push(pattern);
        self
    }

    /// The same layer, rejecting `pattern` always.
    #[must_use]
    pub fn reject_always(mut self, pattern: CallPattern) -> Self {
        self.reject.push(pattern);
        self
    }

    /// Whether it says nothing.
    pub fn is_empty(&self) -> bool {
        self.allow.is_none() && self.reject.is_empty()
    }
}

/// A session's standing decisions: its layers, the top one first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Standing {
    layers: Vec<StandingLayer>,
}

impl Standing {
    /// One layer.
    pub fn new(layer: StandingLayer) -> Self {
        Self {
            layers: if layer.is_empty() {
                Vec::new()
            } else {
                vec![layer]
            },
        }
    }

    /// Its layers, the top one first.
    pub fn layers(&self) -> &[StandingLayer] {
        &self.layers
    }

    /// Whether it decides nothing.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// A child's: these, narrowed by its entry's `layer` (never widened: where no layer
    /// above allows anything, the entry's allows are dropped and only its rejects count).
    #[must_use]
    pub fn narrowed(&self, layer: Option<&StandingLayer>) -> Self {
        let mut out = self.clone();
        if let Some(l) = layer {
            let mut l = l.clone();
            if !self.layers.iter().any(|above| above.allow.is_some()) {
                l.allow = None;
            }
            if !l.is_empty() {
                out.layers.push(l);
            }
        }
        out
    }

    /// The standing decision on a call of `tool` with `arguments`, and the rule that made
    /// it (shown as `reject write {"file":"/etc/*"}`); `None`: it waits for a person.
    pub fn decide(&self, tool: &str, arguments: &Value) -> Option<(Verdict, String)> {
        for layer in &self.layers {
            if let Some(p) = layer
                .reject
                .iter()
                .find(|p| p.matches(tool, arguments, false))
            {
                return Some((Verdict::RejectOnce, format!("reject {}", p.shown())));
            }
        }
        let mut allowed_by = None;
        for layer in &self.layers {
            let Some(allow) = &layer.allow else { continue };
            match allow.iter().find(|p| p.matches(tool, arguments, true)) {
                Some(p) => {
                    allowed_by.get_or_insert_with(|| p.shown());
                }
                None => return None,
            }
        }
        allowed_by.map(|rule| (Verdict::AllowOnce, format!("allow {rule}")))
    }

    /// The standing decisions a record's meta keeps (none without; an unreadable value is
    /// none too, logged: a call then waits for a person, which is never less safe).
    pub fn of_meta(meta: &Value) -> Self {
        Self::of_field(meta.get(STANDING))
    }

    /// The standing decisions a session record's meta keeps (its `standing` field alone is
    /// read: a child's typed meta is not turned into JSON for it).
    pub(crate) fn of_record(meta: &arbor_store::Meta) -> Self {
        Self::of_field(meta.field(STANDING).as_deref())
    }

    fn of_field(field: Option<&Value>) -> Self {
        match field {
            None | Some(Value::Null) => Self::default(),
            Some(v) => serde_json::from_value(v.clone()).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "a session's standing decisions are unreadable; its calls wait");
                Self::default()
            }),
        }
    }
}

impl crate::approval::RunCheckpoint {
    /// Decides what is pending that `standing` decides (own calls only: a child's calls
    /// are decided by its own), and returns the `decision` entries its transcript records.
    pub(crate) fn apply_standing(&mut self, standing: &Standing) -> Vec<arbor_protocol::EntryKind> {
        if standing.is_empty() {
            return Vec::new();
        }
        let mut written = Vec::new();
        for slot in &mut self.calls {
            // A question is answered by a person, never by a standing rule.
            if slot.state != crate::approval::CallState::Pending
                || slot.call.name == crate::approval::question::ASK_HUMAN
            {
                continue;
            }
            let Some((verdict, rule)) = standing.decide(&slot.call.name, &slot.call.arguments)
            else {
                continue;
            };
            let reason = format!("standing decision: {rule}");
            tracing::info!(call = %slot.call.id, tool = %slot.call.name, %reason, "decided by a standing decision");
            written.push(arbor_protocol::EntryKind::Decision {
                approval_id: slot.approval_id.clone(),
                call_id: slot.call.id.clone(),
                tool: slot.call.name.clone(),
                verdict,
                reason: Some(reason.clone()),
                tenant: None,
                by: Some(BY.to_owned()),
            });
            slot.state = crate::approval::CallState::Decided {
                verdict,
                reason: Some(reason),
                decided_by: Some(arbor_protocol::DecidedBy::new(None, Some(BY.to_owned()))),
            };
        }
        written
    }
}

/// Who a standing decision is written down as decided by.
pub const BY: &str = "standing";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn top() -> StandingLayer {
        StandingLayer::default()
            .allow_always(CallPattern::tool("write").with_arguments(json!({"file": "notes/*"})))
            .allow_always(CallPattern::tool("read*"))
            .reject_always(
                CallPattern::tool("write").with_arguments(json!({"file": "notes/secret*"})),
            )
    }

    #[test]
    fn allows_rejects_and_leaves_the_rest_to_a_person() {
        let s = Standing::new(top());
        assert_eq!(
            s.decide("write", &json!({"file": "notes/a.md", "text": "x"})),
            Some((
                Verdict::AllowOnce,
                r#"allow write {"file":"notes/*"}"#.to_owned()
            ))
        );
        assert_eq!(
            s.decide("write", &json!({"file": "notes/secret.md"}))
                .map(|d| d.0),
            Some(Verdict::RejectOnce),
            "a reject wins"
        );
        assert_eq!(s.decide("write", &json!({"file": "src/main.rs"})), None);
        assert_eq!(
            s.decide("read_file", &json!({})).map(|d| d.0),
            Some(Verdict::AllowOnce)
        );
        assert_eq!(s.decide("delete", &json!({})), None);
    }

    #[test]
    fn a_childs_layer_narrows_and_never_widens() {
        let parent = Standing::new(top());
        // Its entry allows reads only, and deletes (which the parent never allowed).
        let child = parent.narrowed(Some(
            &StandingLayer::default()
                .allow_always(CallPattern::tool("read*"))
                .allow_always(CallPattern::tool("delete")),
        ));
        assert_eq!(
            child.decide("read_file", &json!({})).map(|d| d.0),
            Some(Verdict::AllowOnce)
        );
        assert_eq!(
            child.decide("write", &json!({"file": "notes/a.md"})),
            None,
            "narrowed"
        );
        assert_eq!(child.decide("delete", &json!({})), None, "never widened");
        // A layer of rejects only narrows nothing else.
        let child = parent.narrowed(Some(
            &StandingLayer::default().reject_always(CallPattern::tool("read_secrets")),
        ));
        assert_eq!(
            child.decide("read_file", &json!({})).map(|d| d.0),
            Some(Verdict::AllowOnce)
        );
        assert_eq!(
            child.decide("read_secrets", &json!({})).map(|d| d.0),
            Some(Verdict::RejectOnce)
        );
        // Where the parent allows nothing, an entry's allows are dropped (its rejects count).
        let child = Standing::default().narrowed(Some(
            &StandingLayer::default()
                .allow_always(CallPattern::tool("read*"))
                .reject_always(CallPattern::tool("rm")),
        ));
        assert_eq!(child.decide("read_file", &json!({})), None);
        assert_eq!(
            child.decide("rm", &json!({})).map(|d| d.0),
            Some(Verdict::RejectOnce)
        );
    }

    #[test]
    fn arguments_match_by_containment() {
        let p = CallPattern::tool("t").with_arguments(json!({"a": [1, "x*"], "b": {"c": true}}));
        assert!(p.matches(
            "t",
            &json!({"a": [1, "xyz"], "b": {"c": true, "d": 0}, "e": 1}),
            true
        ));
        assert!(!p.matches("t", &json!({"a": [1, "y"], "b": {"c": true}}), true));
        assert!(!p.matches("t", &json!({"a": [1, "x", 2], "b": {"c": true}}), true));
        assert!(!p.matches("u", &json!({"a": [1, "x"], "b": {"c": true}}), true));
    }

    #[test]
    fn an_allow_never_matches_a_path_that_walks_out() {
        let s = Standing::new(top());
        for file in [
            "notes/../etc/passwd",
            "notes/./secret.md",
            "notes//x",
            "notes/a/../../b",
        ] {
            assert_eq!(s.decide("write", &json!({ "file": file })), None, "{file}");
        }
        // A reject still matches it.
        let s =
            Standing::new(StandingLayer::default().reject_always(
                CallPattern::tool("write").with_arguments(json!({"file": "notes/*"})),
            ));
        assert_eq!(
            s.decide("write", &json!({"file": "notes/../x"}))
                .map(|d| d.0),
            Some(Verdict::RejectOnce)
        );
    }
}
