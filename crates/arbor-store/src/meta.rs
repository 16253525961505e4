//! [`Meta`]: a session record's host data, shared between copies of the record.
//!
//! A record is copied often (every store read hands one out, a session keeps one, a view
//! is built from one), and its `meta` (a root's whole definition, say) is the largest part
//! of it. `Meta` keeps the JSON behind an [`Arc`]: a copy of the record shares it, and a
//! change (through [`DerefMut`]) copies it first if another record still shares it. It
//! reads, indexes, serializes and compares as the `serde_json::Value` it holds.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A session record's host data: a `serde_json::Value`, shared on clone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meta(Arc<Value>);

impl Meta {
    /// The JSON value, copied out (shared no more).
    pub fn to_value(&self) -> Value {
        (*self.0).clone()
    }

    /// The JSON value, without a copy when nothing else shares it.
    pub fn into_value(self) -> Value {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone())
    }
}

impl From<Value> for Meta {
    fn from(value: Value) -> Self {
        Self(Arc::new(value))
    }
}

impl From<Meta> for Value {
    fn from(meta: Meta) -> Self {
        meta.into_value()
    }
}

impl Deref for Meta {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.0
    }
}

impl DerefMut for Meta {
    fn deref_mut(&mut self) -> &mut Value {
        Arc::make_mut(&mut self.0)
    }
}

impl std::fmt::Display for Meta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq<Value> for Meta {
    fn eq(&self, other: &Value) -> bool {
        *self.0 == *other
    }
}

impl Serialize for Meta {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Meta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_copy_shares_until_one_side_changes() {
        let a = Meta::from(json!({"definition": {"root": "planner"}}));
        let mut b = a.clone();
        assert!(Arc::ptr_eq(&a.0, &b.0));
        b["result"] = json!("done");
        assert!(!Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(a, json!({"definition": {"root": "planner"}}));
        assert_eq!(b["result"], "done");
        assert_eq!(b["definition"]["root"], "planner");
    }

    #[test]
    fn it_serializes_as_the_value_it_holds() {
        let m = Meta::from(json!({"a": [1, 2]}));
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(text, r#"{"a":[1,2]}"#);
        let back: Meta = serde_json::from_str(&text).unwrap();
        assert_eq!(back, m);
        assert_eq!(Meta::default(), Value::Null);
    }
}
