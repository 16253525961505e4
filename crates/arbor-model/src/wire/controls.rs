//! [`Controls`] on each wire format: what a request body carries for each control.
//!
//! | control | Chat Completions | Messages |
//! | --- | --- | --- |
//! | `temperature`, `top_p` | the same names | the same names |
//! | `seed` | `seed` | (refused by [`Controls::unsupported_by`]) |
//! | `stop` | `stop` | `stop_sequences` |
//! | `max_output_tokens` | `max_tokens` | `max_tokens` |
//! | `tool_choice` | `"auto"`, `"required"`, `"none"`, `{type: function, function: {name}}` | `{type: auto}`, `{type: any}`, `{type: none}`, `{type: tool, name}` |
//! | `parallel_tool_calls: false` | `parallel_tool_calls: false` | `tool_choice.disable_parallel_tool_use: true` |
//! | `extra` | each field as it is | each field as it is |
//!
//! The tool controls are sent only with tools on offer.

use serde_json::{Value, json};

use crate::controls::{Controls, ToolChoice};

/// Sets `controls` on a Chat Completions body.
pub fn openai(body: &mut Value, controls: &Controls, has_tools: bool) {
    common(body, controls);
    if let Some(n) = controls.max_output_tokens {
        body["max_tokens"] = json!(n);
    }
    if let Some(seed) = controls.seed {
        body["seed"] = json!(seed);
    }
    if !controls.stop.is_empty() {
        body["stop"] = json!(controls.stop);
    }
    if has_tools {
        if let Some(choice) = &controls.tool_choice {
            body["tool_choice"] = match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::Required => json!("required"),
                ToolChoice::None => json!("none"),
                ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
            };
        }
        if let Some(parallel) = controls.parallel_tool_calls {
            body["parallel_tool_calls"] = json!(parallel);
        }
    }
    extra(body, controls);
}

/// Sets `controls` on a Messages body (a `seed` is not carried: refuse it before;
/// `max_output_tokens` is the body's `max_tokens`, which a thinking budget raises: the
/// caller sets it).
pub fn anthropic(body: &mut Value, controls: &Controls, has_tools: bool) {
    common(body, controls);
    if !controls.stop.is_empty() {
        body["stop_sequences"] = json!(controls.stop);
    }
    if has_tools {
        let mut choice = match &controls.tool_choice {
            Some(ToolChoice::Auto) => Some(json!({"type": "auto"})),
            Some(ToolChoice::Required) => Some(json!({"type": "any"})),
            Some(ToolChoice::None) => Some(json!({"type": "none"})),
            Some(ToolChoice::Tool(name)) => Some(json!({"type": "tool", "name": name})),
            None => None,
        };
        if controls.parallel_tool_calls == Some(false) {
            let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
            if c["type"] != "none" {
                c["disable_parallel_tool_use"] = json!(true);
            }
        }
        if let Some(c) = choice {
            body["tool_choice"] = c;
        }
    }
    extra(body, controls);
}

fn common(body: &mut Value, controls: &Controls) {
    if let Some(t) = controls.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(p) = controls.top_p {
        body["top_p"] = json!(p);
    }
}

/// `extra`'s fields, none of those the format builds (checked before: see
/// [`Controls::check`]).
fn extra(body: &mut Value, controls: &Controls) {
    for (key, value) in &controls.extra {
        if body.get(key).is_none() {
            body[key.as_str()] = value.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use arbor_protocol::Message;
    use serde_json::json;

    use crate::controls::{Controls, ToolChoice, Wire};
    use crate::{ModelRequest, ThinkingLevel, ToolSpec};

    fn all() -> Controls {
        serde_json::from_value(json!({
            "temperature": 0.2, "top_p": 0.9, "seed": 7, "stop": ["END", "###"],
            "max_output_tokens": 300, "tool_choice": {"tool": "spawn_agent"},
            "parallel_tool_calls": false, "extra": {"min_p": 0.05, "model": "ignored"}
        }))
        .unwrap()
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "spawn_agent".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        }]
    }

    #[test]
    fn chat_completions_carries_every_control() {
        let (messages, tools) = (vec![Message::user("hi")], tools());
        let mut c = all();
        c.extra.remove("model");
        let request = ModelRequest::new("m", &messages)
            .tools(&tools)
            .controls(Some(&c));
        let body = crate::wire::openai::request_body(&request, true, Some(64));
        assert_eq!(body["temperature"], 0.2);
        assert_eq!(body["top_p"], 0.9);
        assert_eq!(body["seed"], 7);
        assert_eq!(body["stop"], json!(["END", "###"]));
        assert_eq!(body["max_tokens"], 300);
        assert_eq!(
            body["tool_choice"],
            json!({"type": "function", "function": {"name": "spawn_agent"}})
        );
        assert_eq!(body["parallel_tool_calls"], false);
        assert_eq!(body["min_p"], 0.05);
        for (choice, wire) in [
            (ToolChoice::Auto, json!("auto")),
            (ToolChoice::Required, json!("required")),
            (ToolChoice::None, json!("none")),
        ] {
            let c = Controls {
                tool_choice: Some(choice),
                ..Controls::default()
            };
            let request = ModelRequest::new("m", &messages)
                .tools(&tools)
                .controls(Some(&c));
            let body = crate::wire::openai::request_body(&request, true, None);
            assert_eq!(body["tool_choice"], wire);
        }
        // Without tools on offer, the tool controls are not sent.
        let request = ModelRequest::new("m", &messages).controls(Some(&c));
        let body = crate::wire::openai::request_body(&request, true, None);
        assert!(body.get("tool_choice").is_none() && body.get("parallel_tool_calls").is_none());
    }

    #[test]
    fn messages_carries_every_control_it_can() {
        let (messages, tools) = (vec![Message::user("hi")], tools());
        let mut c = all();
        c.seed = None;
        c.extra.remove("model");
        let request = ModelRequest::new("m", &messages)
            .tools(&tools)
            .controls(Some(&c));
        let body = crate::wire::anthropic::request_body(&request, 1024);
        assert_eq!(body["temperature"], 0.2);
        assert_eq!(body["top_p"], 0.9);
        assert!(body.get("seed").is_none());
        assert_eq!(body["stop_sequences"], json!(["END", "###"]));
        assert!(body.get("stop").is_none());
        assert_eq!(body["max_tokens"], 300);
        assert_eq!(
            body["tool_choice"],
            json!({"type": "tool", "name": "spawn_agent", "disable_parallel_tool_use": true})
        );
        assert_eq!(body["min_p"], 0.05);
        for (choice, wire) in [
            (ToolChoice::Auto, json!({"type": "auto"})),
            (ToolChoice::Required, json!({"type": "any"})),
            (ToolChoice::None, json!({"type": "none"})),
        ] {
            let c = Controls {
                tool_choice: Some(choice),
                ..Controls::default()
            };
            let request = ModelRequest::new("m", &messages)
                .tools(&tools)
                .controls(Some(&c));
            assert_eq!(
                crate::wire::anthropic::request_body(&request, 10)["tool_choice"],
                wire
            );
        }
        // No parallel calls without a choice: auto, with parallel use off.
        let c = Controls {
            parallel_tool_calls: Some(false),
            ..Controls::default()
        };
        let request = ModelRequest::new("m", &messages)
            .tools(&tools)
            .controls(Some(&c));
        assert_eq!(
            crate::wire::anthropic::request_body(&request, 10)["tool_choice"],
            json!({"type": "auto", "disable_parallel_tool_use": true})
        );
        // A thinking budget comes on top of the answer's own length.
        let c = Controls {
            max_output_tokens: Some(300),
            ..Controls::default()
        };
        let request = ModelRequest::new("m", &messages)
            .thinking(Some(ThinkingLevel::Low))
            .controls(Some(&c));
        let body = crate::wire::anthropic::request_body(&request, 1024);
        let budget = ThinkingLevel::Low.budget_tokens().unwrap();
        assert_eq!(body["max_tokens"], 300 + budget);
    }

    #[test]
    fn controls_are_checked_by_name_merged_narrower_first_and_refused_where_not_carried() {
        let bad = [
            (json!({"temperature": 2.5}), "temperature"),
            (json!({"top_p": 0.0}), "top_p"),
            (json!({"stop": ["a", "b", "c", "d", "e"]}), "stop"),
            (json!({"stop": [""]}), "stop"),
            (json!({"max_output_tokens": 0}), "max_output_tokens"),
            (json!({"tool_choice": {"tool": " "}}), "tool_choice"),
            (json!({"extra": {"messages": []}}), "extra"),
        ];
        for (value, field) in bad {
            let c: Controls = serde_json::from_value(value.clone()).unwrap();
            assert_eq!(c.check().unwrap_err().0, field, "{value}");
        }
        assert!(serde_json::from_value::<Controls>(json!({"temprature": 1})).is_err());
        assert!(all().check().is_err(), "extra.model is reserved");
        assert_eq!(all().unsupported_by(Wire::Anthropic), Some("seed"));
        assert_eq!(all().unsupported_by(Wire::OpenAi), None);
        let agent = Controls {
            temperature: Some(0.5),
            stop: vec!["x".into()],
            ..Controls::default()
        };
        let spawn = Controls {
            temperature: Some(0.1),
            ..Controls::default()
        };
        let merged = spawn.over(&agent);
        assert_eq!(
            (merged.temperature, merged.stop.clone()),
            (Some(0.1), vec!["x".to_owned()])
        );
        assert!(Controls::default().is_empty() && !merged.is_empty());
    }
}
