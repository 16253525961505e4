//! The host tools' specs: closed schemas, like the model tools'.

use arbor_model::ToolSpec;
use serde_json::json;

/// The longest `read_messages` waits, in milliseconds.
pub(crate) const MAX_READ_WAIT_MS: u64 = 25_000;

pub(crate) fn list_approvals() -> ToolSpec {
    ToolSpec {
        name: "list_approvals".to_owned(),
        description: "List the calls of your children that wait for a human decision: each \
                      with its id, tool, arguments and the path of children that made it."
            .to_owned(),
        parameters: json!({"type": "object", "properties": {}, "additionalProperties": false}),
    }
}

pub(crate) fn decide_approval() -> ToolSpec {
    ToolSpec {
        name: "decide_approval".to_owned(),
        description: "Decide calls waiting for approval (ids from list_approvals), all on calls \
                      of one child's run. Once nothing of that run waits, the child goes on: \
                      an approved call runs exactly once; wait_agent on its handle gives its \
                      answer."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {
                "decisions": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string", "description": "The pending call's id."},
                            "verdict": {
                                "type": "string",
                                "enum": ["allow_once", "allow_for_run", "reject_once", "reject_for_run"],
                                "description": "allow or reject, this call or every call of the same tool and path in that run."
                            },
                            "reason": {"type": "string", "description": "Why (the child reads it for a rejection; at most 2048 bytes)."},
                            "answer": {"type": "string", "description": "The answer to a question a child asked (ask_human; pending calls with a `question`): one of its choices when it has some, at most 2048 bytes. The verdict is then allow_once (reject_once declines the question)."}
                        },
                        "required": ["id"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["decisions"],
            "additionalProperties": false
        }),
    }
}

pub(crate) fn read_messages() -> ToolSpec {
    ToolSpec {
        name: "read_messages".to_owned(),
        description: "Read the messages your children sent you (replies of message-mode \
                      children, and notices of how they ended), oldest first; each is read \
                      once. wait_ms waits for one when none has arrived."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {
                "wait_ms": {
                    "type": "integer", "minimum": 0, "maximum": MAX_READ_WAIT_MS,
                    "description": "How long to wait for a message when none is there (default 0)."
                }
            },
            "additionalProperties": false
        }),
    }
}
