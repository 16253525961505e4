//! A root run as an A2A task: its state, its answer as an artifact, its usage, and what it
//! waits for as the agent's question.
//!
//! The task's id is the root session's. Its state follows the root: idle or queued is
//! `SUBMITTED`; running (or suspended with nothing waiting yet) `WORKING`; suspended with
//! calls waiting for a decision `INPUT_REQUIRED`; succeeded `COMPLETED`; aborted
//! `CANCELED`; failed or denied `FAILED`. A root whose run ended while its tree is live in
//! this server is settled only once its result is kept (`meta.result`, written after the
//! tree's end: a tree whose message-mode children still report may run its root again);
//! until then it is `WORKING`. A tree not live here (ended, or driven by another process:
//! `arbor resume`) is settled by the root's status. An interrupted root (its process died)
//! is `FAILED` at once.

use arbor_a2a::wire::{
    Artifact, Message, Part, Role, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent,
};
use arbor_protocol::SessionStatus;
use arbor_store::SessionRecord;
use serde_json::{Value, json};

use crate::api::approvals::SuspensionView;

/// The label a run started over A2A keeps its client's `contextId` in.
pub(crate) const CONTEXT_LABEL: &str = "a2a_context";
/// The id of the answer's artifact.
pub(crate) const ANSWER: &str = "answer";

/// What a task is made of, read from the store at one moment.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub(crate) root: SessionRecord,
    /// What waits for a decision at the root (empty unless suspended).
    pub(crate) waiting: Vec<SuspensionView>,
    /// The tree is live in this server (its launcher holds it): a root whose run ended may
    /// still run again, and its result is kept once the tree is done.
    pub(crate) live: bool,
}

impl Snapshot {
    /// The task's state.
    pub(crate) fn state(&self) -> TaskState {
        match self.root.status {
            // A run that failed before it started leaves the root idle, its result kept.
            SessionStatus::Idle | SessionStatus::Queued
                if self.kept() && self.result_status().as_deref() == Some("failed") =>
            {
                TaskState::Failed
            }
            SessionStatus::Idle | SessionStatus::Queued => TaskState::Submitted,
            SessionStatus::Running => TaskState::Working,
            SessionStatus::Suspended if self.pending() > 0 => TaskState::InputRequired,
            SessionStatus::Suspended => TaskState::Working,
            SessionStatus::Interrupted => TaskState::Failed,
            // Ended, but the tree goes on here (its result not kept yet): it may run again.
            _ if self.live && !self.kept() => TaskState::Working,
            SessionStatus::Succeeded => TaskState::Completed,
            SessionStatus::Aborted => TaskState::Canceled,
            _ => TaskState::Failed,
        }
    }

    /// Whether the root's result is kept for the run that ended (not a suspension's).
    fn kept(&self) -> bool {
        self.result_status().is_some_and(|s| s != "suspended")
    }

    fn result_status(&self) -> Option<String> {
        self.root
            .meta
            .field("result")?
            .get("status")?
            .as_str()
            .map(str::to_owned)
    }

    /// Suspended with nothing left to decide: decisions were recorded and the tree awaits
    /// its resume (a reply or a cancel retries it).
    pub(crate) fn decided(&self) -> bool {
        self.root.status == SessionStatus::Suspended && self.pending() == 0
    }

    fn pending(&self) -> usize {
        self.waiting.iter().map(|s| s.pending.len()).sum()
    }

    /// The task's conversation: its client's `contextId`, else the root's id.
    pub(crate) fn context(&self) -> String {
        self.root.meta.to_value()["labels"][CONTEXT_LABEL]
            .as_str()
            .map_or_else(|| self.root.id.to_string(), str::to_owned)
    }

    /// The root's answer, once it succeeded.
    pub(crate) fn answer(&self) -> Option<String> {
        (self.root.status == SessionStatus::Succeeded)
            .then(|| {
                self.root.meta.to_value()["result"]["text"]
                    .as_str()
                    .map(str::to_owned)
            })
            .flatten()
    }

    /// What the root's run ended with, when it failed.
    fn error(&self) -> Option<String> {
        let meta = self.root.meta.to_value();
        meta["result"]["error"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| {
                meta["result"]["stop_reason"]
                    .as_str()
                    .map(|r| format!("stopped: {r}"))
            })
    }

    /// The agent's message about the state: what waits (each call's id, tool and question,
    /// with the whole list as a data part), or why it failed.
    pub(crate) fn message(&self) -> Option<Message> {
        let text = match self.state() {
            TaskState::InputRequired => {
                let lines: Vec<String> = self
                    .waiting
                    .iter()
                    .flat_map(|s| s.pending.iter())
                    .map(|p| match &p.question {
                        Some(q) if q.choices.is_empty() => {
                            format!("{}: asks {:?}", p.id, q.question)
                        }
                        Some(q) => format!(
                            "{}: asks {:?} [{}]",
                            p.id,
                            q.question,
                            q.choices.join(" | ")
                        ),
                        None => format!("{}: {} {}", p.id, p.tool, p.arguments),
                    })
                    .collect();
                format!(
                    "The tree waits for {} decision(s). Reply with the answer to a question, \
                     \"approve\" or \"reject\" (for every call that waits), or a data part \
                     {{\"decisions\": [{{\"id\", \"verdict\", \"reason\", \"answer\"}}]}}.\n{}",
                    lines.len(),
                    lines.join("\n")
                )
            }
            TaskState::Failed => self.error().unwrap_or_else(|| "the run failed".to_owned()),
            TaskState::Canceled => "the run was cancelled".to_owned(),
            _ => return None,
        };
        let mut m = Message::agent(text);
        m.task_id = Some(self.root.id.to_string());
        m.context_id = Some(self.context());
        if self.state() == TaskState::InputRequired {
            m.parts.push(Part {
                data: Some(json!({ "pending": self.waiting })),
                media_type: Some("application/json".to_owned()),
                ..Part::default()
            });
        }
        Some(m)
    }

    /// The task's metadata: the tree's tokens (the root's aggregate) and the spec.
    pub(crate) fn metadata(&self) -> Value {
        let u = self.root.aggregate_usage();
        json!({
            "usage": {
                "inputTokens": u.input_tokens,
                "outputTokens": u.output_tokens,
                "totalTokens": u.total_tokens,
            },
            "arbor": {
                "rootId": self.root.id.to_string(),
                "spec": self.root.meta.to_value()["spec"],
                "status": self.root.status.as_str(),
            },
        })
    }

    /// The status now.
    pub(crate) fn status(&self) -> TaskStatus {
        TaskStatus {
            state: self.state(),
            message: self.message(),
            timestamp: None,
        }
    }

    /// The answer as an artifact, once there is one.
    pub(crate) fn artifact(&self) -> Option<Artifact> {
        self.answer()
            .filter(|t| !t.is_empty())
            .map(|text| Artifact {
                artifact_id: ANSWER.to_owned(),
                name: Some(ANSWER.to_owned()),
                parts: vec![Part::text(text)],
                ..Artifact::default()
            })
    }

    /// The whole task.
    pub(crate) fn task(&self) -> Task {
        Task {
            id: self.root.id.to_string(),
            context_id: self.context(),
            status: self.status(),
            artifacts: self.artifact().into_iter().collect(),
            history: Vec::new(),
            metadata: Some(self.metadata()),
        }
    }

    /// A status update of the state now (with the usage).
    pub(crate) fn status_update(&self) -> TaskStatusUpdateEvent {
        TaskStatusUpdateEvent {
            task_id: self.root.id.to_string(),
            context_id: self.context(),
            status: self.status(),
            metadata: Some(self.metadata()),
        }
    }

    /// The answer's artifact as an update, once there is one.
    pub(crate) fn artifact_update(&self) -> Option<TaskArtifactUpdateEvent> {
        self.artifact().map(|artifact| TaskArtifactUpdateEvent {
            task_id: self.root.id.to_string(),
            context_id: self.context(),
            artifact,
            append: false,
            last_chunk: true,
            metadata: None,
        })
    }
}

/// The text a client's message carries, and its first data part, if any.
pub(crate) fn read_message(m: &Message) -> (String, Option<Value>) {
    let text = m
        .parts
        .iter()
        .filter_map(|p| p.text.as_deref())
        .collect::<Vec<_>>()
        .join("\n");
    let data = m.parts.iter().find_map(|p| p.data.clone());
    (text, data)
}

/// Whether a message is the client's.
pub(crate) fn from_user(m: &Message) -> bool {
    m.role == Role::User
}
