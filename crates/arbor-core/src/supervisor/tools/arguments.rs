//! Checks a model's tool arguments against the tool's own parameter schema before they are
//! parsed, so every argument error names the field (its path, `milestone.every_turns`), the
//! class of the value given and what is accepted, and the model can correct itself:
//!
//! `"lifetime" must be one of "task", "session" (got the string "forever")`
//!
//! The schema is the per-tool table of accepted values: what the model was shown is what is
//! checked. It covers the subset the supervisor's tools use: an object's `properties`,
//! `required` and `additionalProperties: false`; `type` (`string`, `integer`, `number`,
//! `boolean`, `object`, `array`); `enum`; and `minimum`, `exclusiveMinimum` and `maximum`
//! of numbers. `null` for an optional field counts as absent. String lengths are left to
//! the checks after parsing (names are trimmed first, message sizes are in bytes).

use serde_json::{Map, Value};

/// The longest quoted string value in an error, in characters.
const QUOTE_CHARS: usize = 60;

/// Brings a generated schema (schemars, draft-07, inlined) to the subset [`check`] reads
/// and models are shown: an optional field's `null` alternative is dropped (`["string",
/// "null"]` becomes `"string"`, `anyOf: [S, {"type": "null"}]` becomes `S`, `null` leaves an
/// `enum`, a `null` default goes); a `oneOf` of string constants becomes one `enum`; `format`
/// goes; a description
/// is one line. Descriptions on the field are kept over its type's.
pub(crate) fn simplify(schema: &mut Value) {
    let Value::Object(obj) = schema else {
        return;
    };
    obj.remove("format");
    if obj.get("default").is_some_and(Value::is_null) {
        obj.remove("default");
    }
    if let Some(Value::String(text)) = obj.get_mut("description") {
        *text = text.replace('\n', " ");
    }
    if let Some(Value::Array(types)) = obj.get("type") {
        let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if let [one] = kept.as_slice() {
            obj.insert("type".to_owned(), one.clone());
        }
    }
    if let Some(Value::Array(values)) = obj.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if let Some(Value::Array(any)) = obj.get("anyOf") {
        let kept: Vec<&Value> = any.iter().filter(|s| s["type"] != "null").collect();
        if let [Value::Object(only)] = kept.as_slice() {
            let only = only.clone();
            obj.remove("anyOf");
            for (k, v) in only {
                obj.entry(k).or_insert(v);
            }
        }
    }
    if let Some(Value::Array(one_of)) = obj.get("oneOf") {
        let consts: Option<Vec<Value>> = one_of
            .iter()
            .map(|s| {
                (s["type"] == "string")
                    .then(|| s.get("const").cloned())
                    .flatten()
            })
            .collect();
        if let Some(consts) = consts {
            obj.remove("oneOf");
            obj.insert("type".to_owned(), Value::from("string"));
            obj.insert("enum".to_owned(), Value::Array(consts));
        }
    }
    for key in ["properties"] {
        if let Some(Value::Object(props)) = obj.get_mut(key) {
            props.values_mut().for_each(simplify);
        }
    }
    if let Some(items) = obj.get_mut("items") {
        simplify(items);
    }
}

/// The first problem of `args` against `schema` (a tool's parameters), said for the model.
pub(crate) fn check(tool: &str, schema: &Value, args: &Value) -> Result<(), String> {
    match args {
        Value::Object(fields) => check_object(tool, "", schema, fields),
        other => Err(format!(
            "the arguments must be {} (got {})",
            accepted(schema),
            class(other)
        )),
    }
}

fn check_object(
    tool: &str,
    path: &str,
    schema: &Value,
    fields: &Map<String, Value>,
) -> Result<(), String> {
    let empty = Map::new();
    let properties = schema["properties"].as_object().unwrap_or(&empty);
    if schema["additionalProperties"] == Value::Bool(false)
        && let Some((key, value)) = fields.iter().find(|(k, _)| !properties.contains_key(*k))
    {
        let whose = if path.is_empty() {
            tool.to_owned()
        } else {
            format!("\"{path}\"")
        };
        return Err(format!(
            "\"{}\" is not a field of {whose} (got {}); accepted fields: {}",
            join(path, key),
            class(value),
            field_list(properties)
        ));
    }
    let required = schema["required"].as_array().map_or(&[][..], Vec::as_slice);
    for name in required.iter().filter_map(Value::as_str) {
        if fields.get(name).is_none_or(Value::is_null) {
            return Err(format!(
                "\"{}\" must be {} (got nothing: it is required)",
                join(path, name),
                accepted(&properties.get(name).cloned().unwrap_or(Value::Null))
            ));
        }
    }
    for (key, value) in fields {
        let Some(property) = properties.get(key) else {
            continue;
        };
        if value.is_null() && !required.iter().any(|r| r == key) {
            continue;
        }
        check_value(tool, &join(path, key), property, value)?;
    }
    Ok(())
}

fn check_value(tool: &str, path: &str, schema: &Value, value: &Value) -> Result<(), String> {
    let refuse = || {
        Err(format!(
            "\"{path}\" must be {} (got {})",
            accepted(schema),
            class(value)
        ))
    };
    let typed = match schema["type"].as_str() {
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some("array") => value.is_array(),
        Some("object") => value.is_object(),
        _ => true,
    };
    if !typed {
        return refuse();
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        return refuse();
    }
    if let Some(n) = value.as_f64() {
        let below = |key: &str, strict: bool| {
            schema[key]
                .as_f64()
                .is_some_and(|m| if strict { n <= m } else { n < m })
        };
        let above = schema["maximum"].as_f64().is_some_and(|m| n > m);
        if below("minimum", false) || below("exclusiveMinimum", true) || above {
            return refuse();
        }
    }
    if let Value::Object(fields) = value {
        return check_object(tool, path, schema, fields);
    }
    Ok(())
}

/// What a schema accepts, in words.
fn accepted(schema: &Value) -> String {
    if let Some(allowed) = schema["enum"].as_array() {
        let each: Vec<String> = allowed.iter().map(Value::to_string).collect();
        return match each.as_slice() {
            [] => "nothing (none is offered)".to_owned(),
            [one] => one.clone(),
            _ => format!("one of {}", each.join(", ")),
        };
    }
    let bound = |key: &str| schema[key].as_f64().map(|_| schema[key].to_string());
    let range = match (
        bound("minimum"),
        bound("exclusiveMinimum"),
        bound("maximum"),
    ) {
        (Some(lo), _, Some(hi)) => format!(" from {lo} to {hi}"),
        (None, Some(lo), Some(hi)) => format!(" greater than {lo} and at most {hi}"),
        (Some(lo), _, None) => format!(" of at least {lo}"),
        (None, Some(lo), None) => format!(" greater than {lo}"),
        (None, None, Some(hi)) => format!(" of at most {hi}"),
        (None, None, None) => String::new(),
    };
    match schema["type"].as_str() {
        Some("string") => "a string".to_owned(),
        Some("integer") => format!("an integer{range}"),
        Some("number") => format!("a number{range}"),
        Some("boolean") => "true or false".to_owned(),
        Some("array") => "an array".to_owned(),
        Some("object") => match schema["properties"].as_object() {
            Some(p) if !p.is_empty() => format!("an object with the fields {}", field_list(p)),
            _ => "an object with no fields ({})".to_owned(),
        },
        _ => "a value".to_owned(),
    }
}

/// The class of a value the model gave, with the value when it is short.
fn class(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => {
            let mut quoted: String = s.chars().take(QUOTE_CHARS).collect();
            if quoted.len() < s.len() {
                quoted.push('…');
            }
            format!("the string {}", Value::String(quoted))
        }
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

fn field_list(properties: &Map<String, Value>) -> String {
    if properties.is_empty() {
        return "none".to_owned();
    }
    properties
        .keys()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn simplify_drops_null_alternatives_and_flattens_string_constants() {
        let mut generated = json!({
            "type": "object",
            "properties": {
                "n": {"type": ["integer", "null"], "format": "uint32", "minimum": 1},
                "e": {"type": ["string", "null"], "enum": ["a", "b", null]},
                "k": {
                    "description": "kind",
                    "anyOf": [
                        {"description": "the type's", "oneOf": [
                            {"const": "x", "type": "string", "description": "an x"},
                            {"const": "y", "type": "string"}
                        ]},
                        {"type": "null"}
                    ]
                },
                "t": {"type": "string", "default": null, "description": "two\nlines"}
            }
        });
        simplify(&mut generated);
        assert_eq!(
            generated,
            json!({
                "type": "object",
                "properties": {
                    "n": {"type": "integer", "minimum": 1},
                    "e": {"type": "string", "enum": ["a", "b"]},
                    "k": {"description": "kind", "type": "string", "enum": ["x", "y"]},
                    "t": {"type": "string", "description": "two lines"}
                }
            })
        );
        // What it made is what `check` reads: `null` counts as absent, the enum is closed.
        assert!(check("t", &generated, &json!({"k": null, "e": "a"})).is_ok());
        let e = check("t", &generated, &json!({"k": "z"})).unwrap_err();
        assert_eq!(e, r#""k" must be one of "x", "y" (got the string "z")"#);
    }

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "input": {"type": "string"},
                "lifetime": {"type": "string", "enum": ["task", "session"]},
                "share": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                "milestone": {
                    "type": "object",
                    "properties": {"every_turns": {"type": "integer", "minimum": 1, "maximum": 64}},
                    "additionalProperties": false
                }
            },
            "required": ["input"],
            "additionalProperties": false
        })
    }

    fn err(args: Value) -> String {
        check("t", &schema(), &args).unwrap_err()
    }

    #[test]
    fn each_error_names_the_field_the_value_class_and_what_is_accepted() {
        assert_eq!(
            err(json!({"input": "x", "lifetime": "forever"})),
            "\"lifetime\" must be one of \"task\", \"session\" (got the string \"forever\")"
        );
        assert_eq!(
            err(json!({"input": 5})),
            "\"input\" must be a string (got the number 5)"
        );
        assert_eq!(
            err(json!({})),
            "\"input\" must be a string (got nothing: it is required)"
        );
        assert_eq!(
            err(json!({"input": "x", "tools": ["rm"]})),
            "\"tools\" is not a field of t (got an array); accepted fields: input, lifetime, \
             milestone, share"
        );
        assert_eq!(
            err(json!({"input": "x", "share": 0})),
            "\"share\" must be a number greater than 0 and at most 1 (got the number 0)"
        );
        assert_eq!(
            err(json!({"input": "x", "milestone": {"every_turns": 1.5}})),
            "\"milestone.every_turns\" must be an integer from 1 to 64 (got the number 1.5)"
        );
        assert_eq!(
            err(json!({"input": "x", "milestone": {"every": 2}})),
            "\"milestone.every\" is not a field of \"milestone\" (got the number 2); accepted \
             fields: every_turns"
        );
        assert_eq!(
            err(json!("go")),
            "the arguments must be an object with the fields input, lifetime, milestone, share \
             (got the string \"go\")"
        );
        let long = "x".repeat(100);
        assert_eq!(
            err(json!({"input": "x", "lifetime": long})),
            format!(
                "\"lifetime\" must be one of \"task\", \"session\" (got the string \"{}…\")",
                "x".repeat(60)
            )
        );
    }

    #[test]
    fn valid_arguments_and_nulls_for_optional_fields_pass() {
        for ok in [
            json!({"input": "x"}),
            json!({"input": "x", "lifetime": null, "share": 1, "milestone": {"every_turns": 64}}),
            json!({"input": "x", "lifetime": "session", "share": 0.5}),
        ] {
            assert_eq!(check("t", &schema(), &ok), Ok(()), "{ok}");
        }
        assert_eq!(
            err(json!({"input": null})),
            "\"input\" must be a string (got nothing: it is required)"
        );
    }
}
