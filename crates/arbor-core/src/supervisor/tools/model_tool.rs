//! What every model-facing delegation tool shares, written once: a [`ModelTool`] names its
//! spec, the supervisor whose errors it speaks in and its argument type; the one
//! [`DynTool`] impl here checks the model's arguments against the spec's schema, parses
//! them (an error names the field, redacted) and hands the typed value to
//! [`ModelTool::call`]. None of these tools needs exclusive access.

use std::fmt;

use arbor_model::ToolSpec;
use async_trait::async_trait;
use serde::de::DeserializeOwned;

use crate::supervisor::runtime::Supervisor;
use crate::tool::{DynTool, ToolContext, ToolError};

/// A model-facing delegation tool.
#[async_trait]
pub(crate) trait ModelTool: fmt::Debug + Send + Sync + 'static {
    /// Its arguments, parsed after the schema check.
    type Args: DeserializeOwned + Send;

    /// Whether a call may leave its arguments out entirely (`null` then reads as `{}`).
    const ARGUMENTS_OPTIONAL: bool = false;

    /// Name, description, parameter schema.
    fn spec(&self) -> &ToolSpec;

    /// The supervisor whose redactor and error wording the tool uses.
    fn supervisor(&self) -> &Supervisor;

    /// Runs a call with checked, parsed arguments; returns the text the model reads.
    async fn call(&self, args: Self::Args, ctx: ToolContext) -> Result<String, ToolError>;
}

#[async_trait]
impl<T: ModelTool> DynTool for T {
    fn spec(&self) -> &ToolSpec {
        ModelTool::spec(self)
    }

    fn exclusive(&self) -> bool {
        false
    }

    async fn call_json(
        &self,
        arguments: serde_json::Value,
        ctx: ToolContext,
    ) -> Result<String, ToolError> {
        let arguments = match arguments {
            serde_json::Value::Null if T::ARGUMENTS_OPTIONAL => {
                serde_json::Value::Object(serde_json::Map::new())
            }
            other => other,
        };
        let args = self
            .supervisor()
            .parse_arguments(ModelTool::spec(self), arguments)?;
        self.call(args, ctx).await
    }
}
