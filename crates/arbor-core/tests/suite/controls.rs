//! An agent's model controls: checked at build (a value out of range, or one the provider's
//! wire cannot carry, is refused naming it) and sent with every provider call.

use std::sync::Arc;

use arbor_core::{Agent, CoreErrorKind, RunOptions};
use arbor_model::{Controls, Script, ScriptedProvider, ScriptedTurn, Wire};
use serde_json::{Value, json};

use super::wire_support::{Look, OnWire, controls, on_wire};

fn provider(wire: Wire) -> OnWire {
    on_wire(wire, vec![ScriptedTurn::text("ok")])
}

#[tokio::test]
async fn controls_are_checked_at_build_and_sent_with_every_call() {
    let p = provider(Wire::OpenAi);
    let seen = p.seen.clone();
    let c = controls(json!({"temperature": 0.3, "seed": 9, "tool_choice": "required"}));
    let agent = Agent::builder("a")
        .provider(p)
        .tool(Look)
        .controls(c.clone())
        .build()
        .unwrap();
    assert_eq!(agent.controls(), Some(&c));
    agent
        .session()
        .create()
        .await
        .unwrap()
        .run("go", RunOptions::default())
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), [Some(c.clone())]);

    // Messages cannot carry a seed: refused naming it, never dropped.
    let e = Agent::builder("a")
        .provider(provider(Wire::Anthropic))
        .controls(c)
        .build()
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.field()),
        (CoreErrorKind::Validation, Some("seed"))
    );
    assert!(e.to_string().contains("cannot carry seed"), "{e}");
    // Out of range: refused naming the control.
    let e = Agent::builder("a")
        .provider(provider(Wire::OpenAi))
        .controls(controls(json!({"top_p": 1.5})))
        .build()
        .unwrap_err();
    assert_eq!(e.field(), Some("top_p"));
    // None set: nothing is sent.
    let p = provider(Wire::OpenAi);
    let seen = p.seen.clone();
    let agent = Agent::builder("a")
        .provider(p)
        .controls(Controls::default())
        .build()
        .unwrap();
    agent
        .session()
        .create()
        .await
        .unwrap()
        .run("go", RunOptions::default())
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), [None]);
}

/// The tool_choice of each call of a run: forced on its first turn, then what
/// `tool_choice_after_call` says (default `auto`), so a forced call cannot loop.
async fn choices(c: Value) -> Vec<Option<arbor_model::ToolChoice>> {
    let p = OnWire {
        inner: ScriptedProvider::new(Script::new(vec![
            ScriptedTurn::tool_call("look", json!({})),
            ScriptedTurn::tool_call("look", json!({})),
            ScriptedTurn::text("done"),
        ])),
        wire: Wire::OpenAi,
        seen: Arc::default(),
    };
    let seen = p.seen.clone();
    let agent = Agent::builder("a")
        .provider(p)
        .tool(Look)
        .controls(controls(c))
        .build()
        .unwrap();
    let mut session = agent.session().create().await.unwrap();
    session.run("go", RunOptions::default()).await.unwrap();
    let all = seen.lock().unwrap().clone();
    all.into_iter()
        .map(|c| c.and_then(|c| c.tool_choice))
        .collect()
}

#[tokio::test]
async fn a_forced_tool_choice_gives_way_after_the_models_call() {
    use arbor_model::ToolChoice::{Auto, None as Nothing, Required, Tool};
    assert_eq!(
        choices(json!({"tool_choice": "required"})).await,
        [Some(Required), Some(Auto), Some(Auto)]
    );
    assert_eq!(
        choices(json!({"tool_choice": {"tool": "look"}, "tool_choice_after_call": "none"})).await,
        [Some(Tool("look".into())), Some(Nothing), Some(Nothing)]
    );
    // A run on its inbox (a child's reply, a follow-up) is not fresh input: it does not
    // force a call again, so a message-mode parent cannot loop on its spawns.
    let p = OnWire {
        inner: ScriptedProvider::new(Script::new(vec![
            ScriptedTurn::text("first"),
            ScriptedTurn::text("on the reply"),
        ])),
        wire: Wire::OpenAi,
        seen: Arc::default(),
    };
    let seen = p.seen.clone();
    let agent = Agent::builder("a")
        .provider(p)
        .tool(Look)
        .controls(controls(json!({"tool_choice": "required"})))
        .build()
        .unwrap();
    let mut session = agent.session().create().await.unwrap();
    session.run("go", RunOptions::default()).await.unwrap();
    session.inbox().push(arbor_protocol::InboxMessage {
        id: "m1".into(),
        from: None,
        from_name: "host".into(),
        relationship: arbor_protocol::Relationship::Host,
        text: "a reply".into(),
        notice: None,
        at: arbor_protocol::Timestamp::now(),
    });
    session.run_inbox(RunOptions::default()).await.unwrap();
    let sent: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.as_ref().and_then(|c| c.tool_choice.clone()))
        .collect();
    assert_eq!(sent, [Some(Required), Some(Auto)]);
    // Not forced: nothing changes unless asked.
    assert_eq!(
        choices(json!({"tool_choice": "auto"})).await,
        [Some(Auto), Some(Auto), Some(Auto)]
    );
    assert_eq!(
        choices(json!({"temperature": 0.5, "tool_choice_after_call": "none"})).await,
        [None, Some(Nothing), Some(Nothing)]
    );
    // A required call needs a tool to call.
    let e = Agent::builder("a")
        .provider(provider(Wire::OpenAi))
        .controls(controls(json!({"tool_choice": "required"})))
        .build()
        .unwrap_err();
    assert_eq!(e.field(), Some("tool_choice"));
    assert!(e.to_string().contains("needs a tool to call"), "{e}");
    // A tool named after the call must be the agent's.
    let e = Agent::builder("a")
        .provider(provider(Wire::OpenAi))
        .controls(controls(
            json!({"tool_choice_after_call": {"tool": "grep"}}),
        ))
        .build()
        .unwrap_err();
    assert_eq!(e.field(), Some("tool_choice"));
}

#[tokio::test]
async fn anthropics_limits_on_controls_while_thinking_are_refused_by_name() {
    use arbor_model::ThinkingLevel;
    let build = |c: Value, thinking: Option<ThinkingLevel>| {
        let mut b = Agent::builder("a")
            .provider(provider(Wire::Anthropic))
            .tool(Look)
            .controls(controls(c));
        if let Some(t) = thinking {
            b = b.thinking(t);
        }
        b.build().err().map(|e| (e.field(), e.to_string()))
    };
    let high = Some(ThinkingLevel::High);
    // Out of Anthropic's range whatever the thinking.
    let (field, message) = build(json!({"temperature": 1.5}), None).unwrap();
    assert_eq!(field, Some("temperature"));
    assert!(
        message.contains("Anthropic's temperature is 0 to 1, not 1.5"),
        "{message}"
    );
    // While the model thinks: no forced tool choice, temperature 1 only, top_p ≥ 0.95.
    for (c, named) in [
        (json!({"tool_choice": "required"}), "tool_choice"),
        (
            json!({"tool_choice_after_call": {"tool": "x"}}),
            "tool_choice_after_call",
        ),
        (json!({"temperature": 0.2}), "temperature"),
        (json!({"top_p": 0.9}), "top_p"),
    ] {
        let (field, message) = build(c.clone(), high).unwrap();
        assert_eq!(field, Some(named), "{c}");
        assert!(message.contains("while the model thinks"), "{message}");
        // Without thinking they are fine (a forced choice needs no tool here: none named).
        if named != "tool_choice_after_call" {
            assert_eq!(build(c, None), None);
        }
    }
    assert_eq!(
        build(json!({"temperature": 1.0, "top_p": 0.95}), high),
        None
    );
    // Thinking off asks for none: nothing to refuse.
    assert_eq!(
        build(json!({"tool_choice": "required"}), Some(ThinkingLevel::Off)),
        None
    );
}
