//! [`Meta`]: a session record's host data, shared between copies of the record.
//!
//! A record is copied often (every store read hands one out, a session keeps one, a view
//! is built from one), and its `meta` (a root's whole definition, say) is the largest part
//! of it. `Meta` keeps the JSON behind an [`Arc`]: a copy of the record shares it, and a
//! change (through [`DerefMut`]) copies it first if another record still shares it. It
//! reads, indexes, serializes and compares as the `serde_json::Value` it holds.

use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// The JSON `null` every empty [`Meta`] reads as.
static NULL: Value = Value::Null;

/// A session record's host data: a `serde_json::Value`, shared on clone.
///
/// It can also be built from a typed value ([`Meta::typed`]) that is turned into JSON only
/// when something reads it: a store that keeps the record in memory and is never asked for
/// this part of it never builds the JSON, and one that writes it as text
/// ([`Meta::to_json`]) writes it straight from the typed value.
#[derive(Clone, Default)]
pub struct Meta {
    /// The JSON, when given as JSON or changed in place (then `typed` is `None`).
    value: Option<Arc<Value>>,
    /// The typed value it was built from, and its JSON once read.
    typed: Option<Arc<Typed>>,
}

/// A typed meta and, once read, its JSON.
struct Typed {
    source: Box<dyn Source>,
    value: OnceLock<Value>,
}

/// What a typed meta can do: become JSON, as a value or as text, or give one field.
trait Source: Send + Sync {
    fn to_value(&self) -> Value;
    fn to_json(&self) -> serde_json::Result<String>;
    fn as_any(&self) -> &dyn Any;
    fn field(&self, key: &str) -> Result<Option<Value>, crate::meta_field::NotPicked>;
}

impl<T: Serialize + Send + Sync + 'static> Source for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn to_value(&self) -> Value {
        // A value that cannot be JSON (a map with non-string keys) reads as `null`; the
        // typed values given to `Meta::typed` are structs of plain fields.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }

    fn field(&self, key: &str) -> Result<Option<Value>, crate::meta_field::NotPicked> {
        crate::meta_field::field_of(self, key)
    }
}

/// A meta read from a store as JSON text: checked to be JSON when read, parsed only when
/// something reads it, and written back as the same text.
struct JsonText(Box<str>);

impl Source for JsonText {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn to_value(&self) -> Value {
        // Checked to be JSON when it was made.
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }

    fn to_json(&self) -> serde_json::Result<String> {
        Ok(self.0.clone().into())
    }

    fn field(&self, key: &str) -> Result<Option<Value>, crate::meta_field::NotPicked> {
        // One pass over the text that builds only the field asked for; anything it cannot
        // read so (not an object, a key with escapes) is read from the whole value.
        let mut de = serde_json::Deserializer::from_str(&self.0);
        serde::de::DeserializeSeed::deserialize(PickField(key), &mut de)
            .map_err(|_| crate::meta_field::NotPicked)
    }
}

/// Checks JSON text as strictly as parsing it into a [`Value`] does (numbers in range, no
/// lone surrogate in an escape, at most serde_json's nesting depth), without building it:
/// everything goes through `deserialize_any`, where serde_json applies those checks, which
/// its `IgnoredAny` skips.
struct Check;

impl<'de> serde::de::DeserializeSeed<'de> for Check {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Deserialize<'de> for Check {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Check).map(|()| Check)
    }
}

impl<'de> serde::de::Visitor<'de> for Check {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<Check>()?.is_some() {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key::<Check>()?.is_some() {
            map.next_value::<Check>()?;
        }
        Ok(())
    }
}

/// Reads one top-level field of a JSON object, skipping the others without building them.
/// As `serde_json::Map` keeps the last of two equal keys, so does this.
struct PickField<'k>(&'k str);

impl<'de> serde::de::DeserializeSeed<'de> for PickField<'_> {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for PickField<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<&'de str>()? {
            if key == self.0 {
                found = Some(map.next_value::<Value>()?);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

impl Meta {
    /// Host data kept as the JSON `text` a store read, checked to be JSON (without building
    /// it) and parsed only when something reads it: a record read to be updated, or listed,
    /// never parses a meta nobody looks at. `null` is the empty meta.
    pub fn from_json_text(text: String) -> serde_json::Result<Self> {
        let mut de = serde_json::Deserializer::from_str(&text);
        serde::de::DeserializeSeed::deserialize(Check, &mut de)?;
        de.end()?;
        if text.trim() == "null" {
            return Ok(Self::default());
        }
        Ok(Self {
            value: None,
            typed: Some(Arc::new(Typed {
                source: Box::new(JsonText(text.into_boxed_str())),
                value: OnceLock::new(),
            })),
        })
    }

    /// Host data kept as `value` and turned into JSON only when read. Its JSON is what
    /// `serde_json` makes of `value` (field order as declared, for the text).
    pub fn typed<T: Serialize + Send + Sync + 'static>(value: T) -> Self {
        Self {
            value: None,
            typed: Some(Arc::new(Typed {
                source: Box::new(value),
                value: OnceLock::new(),
            })),
        }
    }

    /// The typed value it was built from, if it was built from a `T` ([`Meta::typed`]) and
    /// has not been changed since: read without building its JSON.
    pub fn typed_as<T: 'static>(&self) -> Option<&T> {
        self.typed.as_ref()?.source.as_any().downcast_ref()
    }

    /// The field `key` of its top-level object, or `None` when absent or `null` (as
    /// `meta[key]` reads `null`). A typed meta whose JSON was never built gives it without
    /// building the rest: only that field is serialized.
    pub fn field(&self, key: &str) -> Option<Cow<'_, Value>> {
        fn of<'a>(v: &'a Value, key: &str) -> Option<Cow<'a, Value>> {
            v.get(key).filter(|f| !f.is_null()).map(Cow::Borrowed)
        }
        match (&self.value, &self.typed) {
            (Some(v), _) => of(v, key),
            (None, Some(t)) => match t.value.get() {
                Some(v) => of(v, key),
                None => match t.source.field(key) {
                    Ok(found) => found.filter(|f| !f.is_null()).map(Cow::Owned),
                    // Not a struct at its top: read from its whole JSON.
                    Err(_) => of(self.deref(), key),
                },
            },
            (None, None) => None,
        }
    }

    /// The JSON value, copied out (shared no more).
    pub fn to_value(&self) -> Value {
        (**self).clone()
    }

    /// The JSON value, without a copy when nothing else shares it.
    pub fn into_value(self) -> Value {
        match self.value {
            Some(v) => Arc::try_unwrap(v).unwrap_or_else(|shared| (*shared).clone()),
            None => self.to_value_of_typed(),
        }
    }

    /// The JSON text a store keeps; a typed meta never read is written straight from its
    /// typed value.
    pub fn to_json(&self) -> serde_json::Result<String> {
        match &self.typed {
            Some(t) if t.value.get().is_none() => t.source.to_json(),
            _ => serde_json::to_string(&**self),
        }
    }

    /// The typed value's JSON (`null` when there is none).
    fn to_value_of_typed(&self) -> Value {
        self.typed.as_ref().map_or(Value::Null, |t| {
            t.value
                .get()
                .cloned()
                .unwrap_or_else(|| t.source.to_value())
        })
    }
}

impl fmt::Debug for Meta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Meta").field(&**self).finish()
    }
}

impl PartialEq for Meta {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl From<Value> for Meta {
    fn from(value: Value) -> Self {
        Self {
            value: (!value.is_null()).then(|| Arc::new(value)),
            typed: None,
        }
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
        match (&self.value, &self.typed) {
            (Some(v), _) => v,
            (None, Some(t)) => t.value.get_or_init(|| t.source.to_value()),
            (None, None) => &NULL,
        }
    }
}

impl DerefMut for Meta {
    fn deref_mut(&mut self) -> &mut Value {
        if self.value.is_none() {
            let typed = self.to_value_of_typed();
            self.typed = None;
            self.value = Some(Arc::new(typed));
        }
        Arc::make_mut(self.value.get_or_insert_with(Default::default))
    }
}

impl fmt::Display for Meta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl PartialEq<Value> for Meta {
    fn eq(&self, other: &Value) -> bool {
        **self == *other
    }
}

impl Serialize for Meta {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
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
    fn a_typed_metas_field_is_read_without_building_its_json() {
        #[derive(Serialize)]
        struct Child {
            mode: &'static str,
            budgeted: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            fork: Option<u8>,
        }
        let meta = Meta::typed(Child {
            mode: "sync",
            budgeted: true,
            fork: None,
        });
        assert_eq!(meta.field("budgeted").as_deref(), Some(&json!(true)));
        assert_eq!(meta.field("mode").as_deref(), Some(&json!("sync")));
        assert_eq!(
            meta.field("fork"),
            None,
            "skipped, as its JSON has no such key"
        );
        assert_eq!(meta.field("nothing"), None);
        let typed = meta.typed.as_ref().unwrap();
        assert!(
            typed.value.get().is_none(),
            "the whole JSON was never built"
        );
        // Once it is, fields come from it; a JSON meta's too; null reads as absent.
        assert_eq!(meta["budgeted"], json!(true));
        assert_eq!(meta.field("budgeted").as_deref(), Some(&json!(true)));
        let plain = Meta::from(json!({"a": 1, "b": null}));
        assert_eq!(plain.field("a").as_deref(), Some(&json!(1)));
        assert_eq!(plain.field("b"), None);
        assert_eq!(Meta::default().field("a"), None);
    }

    #[test]
    fn a_copy_shares_until_one_side_changes() {
        let a = Meta::from(json!({"definition": {"root": "planner"}}));
        let mut b = a.clone();
        assert!(Arc::ptr_eq(
            a.value.as_ref().unwrap(),
            b.value.as_ref().unwrap()
        ));
        b["result"] = json!("done");
        assert!(!Arc::ptr_eq(
            a.value.as_ref().unwrap(),
            b.value.as_ref().unwrap()
        ));
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

    #[derive(Serialize)]
    struct Child {
        mode: &'static str,
        path: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        call: Option<String>,
    }

    #[test]
    fn a_typed_meta_reads_changes_and_serializes_as_its_json() {
        let typed = Meta::typed(Child {
            mode: "sync",
            path: vec!["a".into(), "b".into()],
            call: None,
        });
        let expected = json!({"mode": "sync", "path": ["a", "b"]});
        // Written as text straight from the typed value, before anything read it.
        assert_eq!(
            typed.to_json().unwrap(),
            r#"{"mode":"sync","path":["a","b"]}"#
        );
        assert!(typed.typed.as_ref().unwrap().value.get().is_none());
        let copy = typed.clone();
        assert_eq!(typed["path"][1], "b");
        // Read once, shared by every copy.
        assert!(copy.typed.as_ref().unwrap().value.get().is_some());
        assert_eq!(typed, expected);
        assert_eq!(serde_json::to_value(&typed).unwrap(), expected);
        assert_eq!(
            typed.to_json().unwrap(),
            serde_json::to_string(&expected).unwrap()
        );
        let mut changed = typed.clone();
        changed["call"] = json!("c1");
        assert_eq!(changed["call"], "c1");
        assert_eq!(changed["mode"], "sync");
        assert!(changed.typed.is_none());
        assert_eq!(typed.typed_as::<Child>().unwrap().mode, "sync");
        assert!(typed.typed_as::<String>().is_none());
        assert!(
            changed.typed_as::<Child>().is_none(),
            "changed: only its JSON is left"
        );
        assert_eq!(typed, expected, "a copy's change leaves the others alone");
        assert_eq!(changed.clone().into_value()["path"], json!(["a", "b"]));
        assert_eq!(format!("{typed}"), expected.to_string());
    }

    /// A meta read as text is checked at once, parsed only when read, written back as the
    /// same text until changed, and reads, compares and changes as the JSON it holds.
    #[test]
    fn a_meta_read_as_text_is_parsed_only_when_read() {
        let text = r#"{"mode":"sync","budget":{"tokens":5},"n":[1,2]}"#;
        let meta = Meta::from_json_text(text.to_owned()).unwrap();
        let shared = meta.clone();
        assert!(meta.typed.as_ref().unwrap().value.get().is_none());
        assert_eq!(meta.to_json().unwrap(), text, "written back as it was read");
        assert!(
            meta.typed.as_ref().unwrap().value.get().is_none(),
            "not parsed"
        );
        assert_eq!(meta.field("mode").as_deref(), Some(&json!("sync")));
        assert_eq!(meta.field("missing"), None);
        assert_eq!(
            meta,
            json!({"mode": "sync", "budget": {"tokens": 5}, "n": [1, 2]})
        );
        let mut changed = meta;
        changed["mode"] = json!("async");
        assert_eq!(
            changed.to_json().unwrap(),
            r#"{"budget":{"tokens":5},"mode":"async","n":[1,2]}"#
        );
        assert_eq!(shared["mode"], json!("sync"), "a copy keeps what it read");

        assert!(Meta::from_json_text("{".to_owned()).is_err());
        // Refused as a `Value` parse refuses them, not taken and read later as `null`.
        let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
        for bad in [
            r#"{"n":1e400}"#,
            r#"{"s":"\ud800"}"#,
            deep.as_str(),
            "",
            " ",
        ] {
            assert!(serde_json::from_str::<Value>(bad).is_err(), "{bad}");
            assert!(Meta::from_json_text(bad.to_owned()).is_err(), "{bad}");
        }
        let fine = format!("{}{}", "[".repeat(100), "]".repeat(100));
        for good in [
            r#"{"n":1e300,"i":-5,"u":18446744073709551615}"#,
            fine.as_str(),
            " {} ",
        ] {
            let parsed: Value = serde_json::from_str(good).unwrap();
            assert_eq!(
                Meta::from_json_text(good.to_owned()).unwrap(),
                parsed,
                "{good}"
            );
        }
        assert!(Meta::from_json_text("{} trailing".to_owned()).is_err());
        // A field read from the text, without parsing the rest; equal keys: the last.
        let text = Meta::from_json_text(r#"{"a":1,"k":{"x":[1]},"k":"last","z":null}"#.to_owned())
            .unwrap();
        assert_eq!(text.field("k").as_deref(), Some(&json!("last")));
        assert_eq!(text.field("z"), None);
        assert_eq!(text.field("nope"), None);
        assert!(
            text.typed.as_ref().unwrap().value.get().is_none(),
            "not parsed whole"
        );
        let escaped = Meta::from_json_text(r#"{"a\u0062":2,"k":3}"#.to_owned()).unwrap();
        assert_eq!(escaped.field("k").as_deref(), Some(&json!(3)));
        assert_eq!(escaped.field("ab").as_deref(), Some(&json!(2)));
        let list = Meta::from_json_text("[1,2]".to_owned()).unwrap();
        assert_eq!(list.field("k"), None);
        let null = Meta::from_json_text("null".to_owned()).unwrap();
        assert!(null.is_null());
        assert_eq!(null.to_json().unwrap(), "null");
    }

    #[test]
    fn an_empty_meta_is_null_until_written() {
        let mut m = Meta::default();
        assert!(m.is_null());
        assert_eq!(Meta::from(Value::Null), m);
        assert_eq!(m.to_json().unwrap(), "null");
        m["a"] = json!(1);
        assert_eq!(m, json!({"a": 1}));
    }
}
