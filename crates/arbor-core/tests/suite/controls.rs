//! An agent's model controls: checked at build (a value out of range, or one the provider's
//! wire cannot carry, is refused naming it) and sent with every provider call.

use std::sync::{Arc, Mutex};

use arbor_core::{Agent, CoreErrorKind, RunOptions};
use arbor_model::{
    Controls, ModelError, ModelProvider, ModelRequest, ModelStream, Script, ScriptedProvider,
    ScriptedTurn, Wire,
};
use async_trait::async_trait;
use serde_json::json;

/// Plays a script on a wire, recording the controls of every call.
#[derive(Debug, Clone)]
struct OnWire {
    inner: ScriptedProvider,
    wire: Wire,
    seen: Arc<Mutex<Vec<Option<Controls>>>>,
}

#[async_trait]
impl ModelProvider for OnWire {
    fn name(&self) -> &str {
        "on-wire"
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        self.seen.lock().unwrap().push(request.controls.cloned());
        self.inner.stream(request).await
    }

    fn wire(&self) -> Wire {
        self.wire
    }
}

fn provider(wire: Wire) -> OnWire {
    OnWire {
        inner: ScriptedProvider::new(Script::new(vec![ScriptedTurn::text("ok")])),
        wire,
        seen: Arc::default(),
    }
}

fn controls(value: serde_json::Value) -> Controls {
    serde_json::from_value(value).unwrap()
}

#[tokio::test]
async fn controls_are_checked_at_build_and_sent_with_every_call() {
    let p = provider(Wire::OpenAi);
    let seen = p.seen.clone();
    let c = controls(json!({"temperature": 0.3, "seed": 9, "tool_choice": "required"}));
    let agent = Agent::builder("a")
        .provider(p)
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
