//! Built-in tools that specs and tests can name: `echo` and `sleep`.

use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::tool::{Tool, ToolContext, ToolError};

/// Returns its `text` argument.
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo;

/// Arguments of [`Echo`].
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EchoArgs {
    /// The text to return.
    pub text: String,
}

#[async_trait]
impl Tool for Echo {
    type Args = EchoArgs;
    type Output = String;

    fn name(&self) -> &str {
        "echo"
    }

    fn description(&self) -> &str {
        "Returns the given text unchanged."
    }

    async fn call(&self, args: EchoArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        Ok(args.text)
    }
}

/// Waits `ms` milliseconds (at most 10 minutes), stopping early when the run is cancelled.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sleep;

/// Arguments of [`Sleep`].
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SleepArgs {
    /// Milliseconds to wait.
    pub ms: u64,
}

#[async_trait]
impl Tool for Sleep {
    type Args = SleepArgs;
    type Output = String;

    fn name(&self) -> &str {
        "sleep"
    }

    fn description(&self) -> &str {
        "Waits the given number of milliseconds."
    }

    async fn call(&self, args: SleepArgs, ctx: ToolContext) -> Result<String, ToolError> {
        if args.ms > 600_000 {
            return Err(ToolError::ToModel("ms must be at most 600000".into()));
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(args.ms)) => Ok(format!("slept {} ms", args.ms)),
            _ = ctx.cancel.cancelled() => Err(ToolError::ToModel("cancelled".into())),
        }
    }
}
