//! Helpers of the controls and reasoning tests: a scripted provider on a chosen wire that
//! records every call's controls, controls from JSON, and a tool that answers `ok`.

use std::sync::{Arc, Mutex};

use arbor_model::{
    Controls, ModelError, ModelProvider, ModelRequest, ModelStream, Script, ScriptedProvider,
    ScriptedTurn, Wire,
};
use async_trait::async_trait;

/// Plays a script on a wire, recording the controls of every call.
#[derive(Debug, Clone)]
pub(crate) struct OnWire {
    pub(crate) inner: ScriptedProvider,
    pub(crate) wire: Wire,
    pub(crate) seen: Arc<Mutex<Vec<Option<Controls>>>>,
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

/// `turns` played on `wire`.
pub(crate) fn on_wire(wire: Wire, turns: Vec<ScriptedTurn>) -> OnWire {
    OnWire {
        inner: ScriptedProvider::new(Script::new(turns)),
        wire,
        seen: Arc::default(),
    }
}

/// Controls from their JSON.
pub(crate) fn controls(value: serde_json::Value) -> Controls {
    serde_json::from_value(value).unwrap()
}

/// A tool that answers `ok`.
#[derive(Debug, Clone)]
pub(crate) struct Look;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct LookArgs {}

#[async_trait]
impl arbor_core::Tool for Look {
    type Args = LookArgs;
    type Output = String;
    fn name(&self) -> &str {
        "look"
    }
    fn description(&self) -> &str {
        "looks"
    }
    async fn call(
        &self,
        _args: LookArgs,
        _ctx: arbor_core::ToolContext,
    ) -> Result<String, arbor_core::ToolError> {
        Ok("ok".to_owned())
    }
}
