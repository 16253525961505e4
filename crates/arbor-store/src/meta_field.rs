//! One field of a typed meta, without the rest: a serde serializer that walks the value's
//! top-level struct and turns only the field asked for into JSON ([`field_of`]), so reading
//! `meta["budgeted"]` of a child's typed meta does not build (and later drop) the JSON of
//! its every field. Anything but a struct at the top is not picked ([`NotPicked`]): the
//! caller then reads the whole JSON.

use std::fmt;

use serde::Serialize;
use serde::ser::{self, Impossible};
use serde_json::Value;

/// The value could not be picked from (not a struct at its top, or a field that is not
/// JSON).
#[derive(Debug)]
pub(crate) struct NotPicked;

impl fmt::Display for NotPicked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a struct of JSON fields")
    }
}

impl std::error::Error for NotPicked {}

impl ser::Error for NotPicked {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Self
    }
}

/// The field `key` of `value`'s top-level struct as JSON: `Ok(None)` when it has none (or
/// skips it when serializing, as its JSON would).
pub(crate) fn field_of<T: Serialize + ?Sized>(
    value: &T,
    key: &str,
) -> Result<Option<Value>, NotPicked> {
    value.serialize(Picker { key })
}

struct Picker<'k> {
    key: &'k str,
}

/// The struct being walked.
pub(crate) struct Pick<'k> {
    key: &'k str,
    found: Option<Value>,
}

impl ser::SerializeStruct for Pick<'_> {
    type Ok = Option<Value>;
    type Error = NotPicked;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), NotPicked> {
        if key == self.key {
            self.found = Some(serde_json::to_value(value).map_err(|_| NotPicked)?);
        }
        Ok(())
    }

    fn end(self) -> Result<Option<Value>, NotPicked> {
        Ok(self.found)
    }
}

macro_rules! not_picked {
    ($($name:ident($($arg:ty),*);)*) => {
        $(fn $name(self, $(_: $arg),*) -> Result<Option<Value>, NotPicked> {
            Err(NotPicked)
        })*
    };
}

impl<'k> ser::Serializer for Picker<'k> {
    type Ok = Option<Value>;
    type Error = NotPicked;
    type SerializeSeq = Impossible<Option<Value>, NotPicked>;
    type SerializeTuple = Impossible<Option<Value>, NotPicked>;
    type SerializeTupleStruct = Impossible<Option<Value>, NotPicked>;
    type SerializeTupleVariant = Impossible<Option<Value>, NotPicked>;
    type SerializeMap = Impossible<Option<Value>, NotPicked>;
    type SerializeStruct = Pick<'k>;
    type SerializeStructVariant = Impossible<Option<Value>, NotPicked>;

    not_picked! {
        serialize_bool(bool);
        serialize_i8(i8);
        serialize_i16(i16);
        serialize_i32(i32);
        serialize_i64(i64);
        serialize_u8(u8);
        serialize_u16(u16);
        serialize_u32(u32);
        serialize_u64(u64);
        serialize_f32(f32);
        serialize_f64(f64);
        serialize_char(char);
        serialize_str(&str);
        serialize_bytes(&[u8]);
        serialize_none();
        serialize_unit();
        serialize_unit_struct(&'static str);
        serialize_unit_variant(&'static str, u32, &'static str);
    }

    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<Option<Value>, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<Option<Value>, NotPicked> {
        // A newtype is its inner value in JSON.
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<Option<Value>, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, NotPicked> {
        Err(NotPicked)
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Pick<'k>, NotPicked> {
        Ok(Pick {
            key: self.key,
            found: None,
        })
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, NotPicked> {
        Err(NotPicked)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Serialize)]
    struct Child {
        name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        fork: Option<u32>,
        budgeted: bool,
        nested: Vec<u8>,
    }

    #[test]
    fn only_the_field_asked_for_is_picked_and_a_skipped_one_is_absent() {
        let c = Child {
            name: "a".into(),
            fork: None,
            budgeted: true,
            nested: vec![1, 2],
        };
        assert_eq!(field_of(&c, "budgeted").unwrap(), Some(json!(true)));
        assert_eq!(field_of(&c, "nested").unwrap(), Some(json!([1, 2])));
        assert_eq!(field_of(&c, "fork").unwrap(), None);
        assert_eq!(field_of(&c, "nope").unwrap(), None);
        // What is not a struct is not picked from.
        assert!(field_of(&json!({"a": 1}), "a").is_err());
        assert!(field_of(&3, "a").is_err());
    }
}
