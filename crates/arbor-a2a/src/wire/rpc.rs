//! JSON-RPC 2.0 envelopes as A2A uses them: requests, responses, and errors with the typed
//! details (`google.rpc.ErrorInfo`) the official SDKs send and read.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// JSON-RPC error codes of A2A and JSON-RPC itself.
pub mod codes {
    /// The task does not exist (or is not the caller's).
    pub const TASK_NOT_FOUND: i64 = -32001;
    /// The task cannot be canceled (it has ended).
    pub const TASK_NOT_CANCELABLE: i64 = -32002;
    /// Push notifications are not offered.
    pub const PUSH_NOT_SUPPORTED: i64 = -32003;
    /// The operation is not offered, or not in the task's state.
    pub const UNSUPPORTED_OPERATION: i64 = -32004;
    /// The content types asked for are not offered.
    pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
    /// The protocol version asked for is not spoken.
    pub const VERSION_NOT_SUPPORTED: i64 = -32009;
    /// The body is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// The body is not a JSON-RPC request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The parameters are wrong; the message names the field.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The server failed.
    pub const INTERNAL_ERROR: i64 = -32603;
}

/// A JSON-RPC request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcRequest {
    /// `2.0`.
    pub jsonrpc: String,
    /// Echoed in the response.
    #[serde(default)]
    pub id: Value,
    /// The method.
    pub method: String,
    /// Its parameters.
    #[serde(default)]
    pub params: Value,
}

impl RpcRequest {
    /// A request of `method` with `params` and a fresh id.
    pub fn new(method: &str, params: Value) -> Self {
        Self {
            jsonrpc: "2.0".to_owned(),
            id: Value::String(uuid::Uuid::now_v7().to_string()),
            method: method.to_owned(),
            params,
        }
    }
}

/// A JSON-RPC error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// Its code ([`codes`]).
    pub code: i64,
    /// What went wrong.
    pub message: String,
    /// Details: A2A sends an array of typed details (`google.rpc.ErrorInfo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with `code` and `message`, its details the `ErrorInfo` A2A's SDKs send.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        let reason = match code {
            codes::TASK_NOT_FOUND => "TASK_NOT_FOUND",
            codes::TASK_NOT_CANCELABLE => "TASK_NOT_CANCELABLE",
            codes::PUSH_NOT_SUPPORTED => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            codes::UNSUPPORTED_OPERATION => "UNSUPPORTED_OPERATION",
            codes::CONTENT_TYPE_NOT_SUPPORTED => "CONTENT_TYPE_NOT_SUPPORTED",
            codes::VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
            codes::INVALID_REQUEST => "INVALID_REQUEST",
            codes::METHOD_NOT_FOUND => "METHOD_NOT_FOUND",
            codes::INVALID_PARAMS => "INVALID_PARAMS",
            _ => "INTERNAL_ERROR",
        };
        Self {
            code,
            message: message.into(),
            data: (code != codes::PARSE_ERROR).then(|| {
                serde_json::json!([{
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reason,
                    "domain": "a2a-protocol.org",
                    "metadata": {},
                }])
            }),
        }
    }
}

/// A JSON-RPC response: a result or an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcResponse {
    /// `2.0`.
    pub jsonrpc: String,
    /// The request's id.
    #[serde(default)]
    pub id: Value,
    /// The result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
}

impl RpcResponse {
    /// A result for request `id`.
    pub fn result(id: Value, result: Value) -> Self {
        Self {
            jsonrpc: "2.0".to_owned(),
            id,
            result: Some(result),
            error: None,
        }
    }

    /// An error for request `id`.
    pub fn error(id: Value, error: RpcError) -> Self {
        Self {
            jsonrpc: "2.0".to_owned(),
            id,
            result: None,
            error: Some(error),
        }
    }
}
