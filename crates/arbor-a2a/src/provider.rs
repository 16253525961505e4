//! [`A2aProvider`]: a remote A2A agent standing in for an agent's model, so that a catalog
//! entry whose agent uses it is a child like any other: admitted under the same limits,
//! spawned sync, async or by message, timed out, cancelled, its usage attributed.
//!
//! One turn is one message to the remote agent:
//! - fresh input (the conversation ends with a user message) starts a task in the
//!   conversation named after the arbor session (`contextId` = the session id, so that a
//!   message-mode child's later messages share the remote context);
//! - the answer to a question goes back to the task that asked it (its `taskId`, in the
//!   same context).
//!
//! What the task streams becomes the turn's events: its status messages
//! [`ModelEvent::Status`], its artifacts' text the answer ([`ModelEvent::TextDelta`]),
//! `metadata.usage` (if the agent reports any, [`usage_in`]: the task's cumulative usage, as
//! `arbor serve` reports it) the turn's usage. How it ends:
//! - `TASK_STATE_COMPLETED`: the answer;
//! - `TASK_STATE_INPUT_REQUIRED`: when the agent may ask (its tools include `ask_human`), an
//!   `ask_human` call with the agent's question, whose id (`a2a:INPUT:OUTPUT:TASK`) names
//!   the task and the usage it had reported, so the answer (recorded once, after a restart
//!   too) continues it and the next turn counts only what the task adds; otherwise an error
//!   naming the state, and the task is cancelled;
//! - failed, rejected, canceled or `TASK_STATE_AUTH_REQUIRED`: an error naming the state;
//! - a stream that ends before any of these: the task is read once (`GetTask`), then an
//!   error naming the state it was left in.
//!
//! A turn dropped before its task ended or asked (the delegation cancelled, timed out, or
//! deleted) cancels the remote task (`CancelTask`, in the background, within 5 s); so does a
//! question nobody will answer ([`ModelProvider::abandon`]: the child was deleted while it
//! waited at the root, or the run that carried the question ended).

use std::time::Duration;

use arbor_model::{FinishReason, ModelError, ModelEvent, ModelProvider, ModelRequest, ModelStream};
use arbor_protocol::{Message as ArborMessage, ToolCall, Usage};
use async_trait::async_trait;
use futures::StreamExt;

use crate::client::{A2aClient, EventStream};
use crate::wire::{
    Message, SendConfiguration, SendMessageRequest, StreamEvent, Task, TaskState, text_of, usage_in,
};

/// The tool a question goes to (`arbor_core`'s `ask_human`).
const ASK_HUMAN: &str = "ask_human";
/// The prefix of the id of a question's call: the rest is the task's id.
pub const CALL_PREFIX: &str = "a2a:";
/// Bytes of a question passed on (`arbor_core`'s `MAX_QUESTION_BYTES`); a longer one is cut.
const MAX_QUESTION_BYTES: usize = 2048;
/// How long a cancel sent for a dropped turn may take.
const CANCEL_WITHIN: Duration = Duration::from_secs(5);

/// The cancels sent for dropped turns, still under way: a process waits for them before it
/// ends ([`settle`]), so a run's timeout or a Ctrl-C still cancels its remote tasks.
static CANCELS: std::sync::LazyLock<tokio_util::task::TaskTracker> =
    std::sync::LazyLock::new(tokio_util::task::TaskTracker::new);

/// Waits (at most `within`) for the `CancelTask`s sent for dropped turns to be answered: a
/// host calls it before its runtime ends (each is bounded by 5 s on its own).
pub async fn settle(within: Duration) {
    CANCELS.close();
    let _ = tokio::time::timeout(within, CANCELS.wait()).await;
    CANCELS.reopen();
}

/// A remote A2A agent as a model provider (see the module docs).
#[derive(Debug, Clone)]
pub struct A2aProvider {
    name: String,
    client: A2aClient,
}

impl A2aProvider {
    /// The agent `client` reaches, named `name` in reports and errors.
    pub fn new(name: impl Into<String>, client: A2aClient) -> Self {
        Self {
            name: name.into(),
            client,
        }
    }

    /// Its client.
    pub fn client(&self) -> &A2aClient {
        &self.client
    }

    fn error(&self, message: String) -> ModelError {
        ModelError::Provider {
            message: format!("{}: {message}", self.name),
        }
    }

    /// What this turn sends: the conversation's new input (every user message since the
    /// model's last turn: a run's input, or the messages of its inbox, joined), as a fresh
    /// message; or, when the answer to the agent's question is among it, all of it to the
    /// task that asked, with the usage the task had reported when it asked.
    async fn message(&self, request: &ModelRequest<'_>) -> Result<(Message, Usage), ModelError> {
        let start = request
            .messages
            .iter()
            .rposition(|m| {
                matches!(
                    m,
                    ArborMessage::Assistant { .. } | ArborMessage::System { .. }
                )
            })
            .map_or(0, |i| i + 1);
        let tail = &request.messages[start..];
        let texts: Vec<&str> = tail
            .iter()
            .filter_map(|m| match m {
                ArborMessage::User { content } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        let answer = tail.iter().find_map(|m| match m {
            ArborMessage::Tool(r) => Question::of_call(&r.call_id).map(|q| (r, q)),
            _ => None,
        });
        let context = request.session.map(|s| s.to_string());
        if let Some((result, (task, baseline))) = answer {
            if result.is_error && texts.is_empty() {
                let _ = tokio::time::timeout(CANCEL_WITHIN, self.client.cancel_task(task)).await;
                return Err(self.error(format!(
                    "its question was not answered ({}); task {task} was cancelled",
                    result.content
                )));
            }
            if result.is_error {
                // Declined, and new input came after (the turn that read the decline failed,
                // and the child was sent more): the old task is done with; the new input
                // starts a new one.
                let _ = tokio::time::timeout(CANCEL_WITHIN, self.client.cancel_task(task)).await;
                let mut m = Message::user(texts.join("\n\n"));
                m.context_id = context;
                return Ok((m, Usage::default()));
            }
            let mut text = result.content.clone();
            for t in &texts {
                text.push_str("\n\n");
                text.push_str(t);
            }
            let mut m = Message::user(text);
            m.task_id = Some(task.to_owned());
            m.context_id = context.clone();
            // If the task is gone (its answer was sent before, by a turn that then failed,
            // and it ended), the new input starts a new task instead.
            if !texts.is_empty()
                && let Ok(t) = self.client.get_task(task).await
                && t.status.state != crate::wire::TaskState::InputRequired
            {
                let mut fresh = Message::user(texts.join("\n\n"));
                fresh.context_id = context;
                return Ok((fresh, Usage::default()));
            }
            return Ok((m, baseline));
        }
        if texts.is_empty() {
            return Err(ModelError::Config {
                provider: self.name.clone(),
                message: "a remote A2A agent takes a turn on fresh input or on the answer to \
                          its question, and the conversation ends with neither"
                    .to_owned(),
            });
        }
        let mut m = Message::user(texts.join("\n\n"));
        m.context_id = context;
        Ok((m, Usage::default()))
    }
}

/// The id of a question's `ask_human` call: `a2a:INPUT:OUTPUT:TASK`, the task that asked and
/// the usage it had reported by then (reported usage is the task's cumulative figure, so a
/// later turn of the same task counts only what it adds).
struct Question;

impl Question {
    fn call_id(task: &str, reported: Usage) -> String {
        format!(
            "{CALL_PREFIX}{}:{}:{task}",
            reported.input_tokens, reported.output_tokens
        )
    }

    /// The task and the usage reported by the time it asked, from a call's id.
    fn of_call(id: &str) -> Option<(&str, Usage)> {
        let mut parts = id.strip_prefix(CALL_PREFIX)?.splitn(3, ':');
        let input = parts.next()?.parse().ok()?;
        let output = parts.next()?.parse().ok()?;
        let task = parts.next().filter(|t| !t.is_empty())?;
        Some((task, Usage::new(input, output)))
    }
}

#[async_trait]
impl ModelProvider for A2aProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        let (message, baseline) = self.message(&request).await?;
        let send = SendMessageRequest {
            message,
            configuration: Some(SendConfiguration {
                accepted_output_modes: vec!["text/plain".to_owned(), "application/json".to_owned()],
                ..SendConfiguration::default()
            }),
            metadata: None,
        };
        let events = self
            .client
            .send(send)
            .await
            .map_err(|e| e.into_model_error(&self.name))?;
        let turn = Turn {
            name: self.name.clone(),
            client: self.client.clone(),
            events,
            may_ask: request.tools.iter().any(|t| t.name == ASK_HUMAN),
            task: None,
            state: TaskState::Unspecified,
            last_artifact: None,
            answered: false,
            baseline,
            reported: None,
            out: std::collections::VecDeque::new(),
            ended: false,
        };
        Ok(Box::pin(futures::stream::unfold(
            turn,
            |mut t| async move { t.next().await.map(|item| (item, t)) },
        )))
    }

    /// Fetches and checks the agent's card.
    async fn preflight(&self, _model: &str) -> Result<(), ModelError> {
        self.client
            .card()
            .await
            .map(|_| ())
            .map_err(|e| e.into_model_error(&self.name))
    }

    /// Cancels the tasks whose questions `call_ids` name (ids of the form
    /// `a2a:INPUT:OUTPUT:TASK`; others are ignored): their child was deleted, or the run that carried the question ended, so no
    /// answer will come. Sent in the background, each within 5 s ([`settle`] waits for them).
    async fn abandon(&self, call_ids: &[String]) -> Result<(), ModelError> {
        let mut tasks: Vec<&str> = call_ids
            .iter()
            .filter_map(|id| Question::of_call(id).map(|(task, _)| task))
            .collect();
        tasks.sort_unstable();
        tasks.dedup();
        for task in tasks {
            tracing::info!(agent = %self.name, task, "cancelling a remote task whose question nobody will answer");
            cancel_in_background(self.client.clone(), task.to_owned());
        }
        Ok(())
    }

    async fn list_models(&self) -> Result<Option<Vec<String>>, ModelError> {
        let card = self
            .client
            .card()
            .await
            .map_err(|e| e.into_model_error(&self.name))?;
        Ok(Some(vec![card.name.clone()]))
    }
}

/// One turn's reading of the remote task.
struct Turn {
    name: String,
    client: A2aClient,
    events: EventStream,
    may_ask: bool,
    /// The task, once named; cancelled if the turn is dropped while it is armed.
    task: Option<CancelOnDrop>,
    state: TaskState,
    last_artifact: Option<String>,
    /// Some answer text was sent.
    answered: bool,
    /// What the task had reported before this turn (its answer's call id says).
    baseline: Usage,
    /// The task's cumulative usage, as last reported in this turn.
    reported: Option<Usage>,
    out: std::collections::VecDeque<Result<ModelEvent, ModelError>>,
    ended: bool,
}

impl Turn {
    async fn next(&mut self) -> Option<Result<ModelEvent, ModelError>> {
        loop {
            if let Some(item) = self.out.pop_front() {
                return Some(item);
            }
            if self.ended {
                return None;
            }
            match self.events.next().await {
                Some(Ok(event)) => self.read(event),
                Some(Err(e)) => self.fail(e.into_model_error(&self.name)),
                None => self.closed().await,
            }
        }
    }

    fn name_task(&mut self, id: &str) {
        if self.task.is_none() && !id.is_empty() {
            self.task = Some(CancelOnDrop {
                client: self.client.clone(),
                task: id.to_owned(),
                armed: true,
            });
        }
    }

    fn read(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::Task(task) => {
                self.name_task(&task.id);
                self.usage(task.metadata.as_ref());
                self.state = task.status.state;
                if task.status.state.is_terminal() || task.status.state.is_interrupted() {
                    self.end(task);
                } else {
                    self.status(&task.status);
                }
            }
            StreamEvent::Message(m) => {
                self.text(text_of(&m.parts));
                self.out
                    .push_back(Ok(ModelEvent::Finished(FinishReason::Stop)));
                self.disarm();
                self.ended = true;
            }
            StreamEvent::Status(update) => {
                self.name_task(&update.task_id);
                self.usage(update.metadata.as_ref());
                self.state = update.status.state;
                if update.status.state.is_terminal() || update.status.state.is_interrupted() {
                    let task = Task {
                        id: update.task_id,
                        context_id: update.context_id,
                        status: update.status,
                        ..Task::default()
                    };
                    self.end(task);
                } else {
                    self.status(&update.status);
                }
            }
            StreamEvent::Artifact(update) => {
                self.name_task(&update.task_id);
                let text = text_of(&update.artifact.parts);
                let new = self.last_artifact.as_deref() != Some(&update.artifact.artifact_id);
                if new && self.answered && !text.is_empty() {
                    self.text("\n".to_owned());
                }
                self.last_artifact = Some(update.artifact.artifact_id);
                self.text(text);
            }
        }
    }

    fn status(&mut self, status: &crate::wire::TaskStatus) {
        let message = status
            .message
            .as_ref()
            .map(|m| text_of(&m.parts))
            .filter(|t| !t.is_empty());
        self.out.push_back(Ok(ModelEvent::Status {
            state: status.state.name().to_owned(),
            message,
        }));
    }

    fn text(&mut self, text: String) {
        if !text.is_empty() {
            self.answered = true;
            self.out.push_back(Ok(ModelEvent::TextDelta(text)));
        }
    }

    /// A reported usage: the task's cumulative figure, of which this turn used what it
    /// adds to the baseline.
    fn usage(&mut self, metadata: Option<&serde_json::Value>) {
        if let Some(u) = usage_in(metadata) {
            self.reported = Some(u);
            let turn = Usage::new(
                u.input_tokens.saturating_sub(self.baseline.input_tokens),
                u.output_tokens.saturating_sub(self.baseline.output_tokens),
            );
            self.out.push_back(Ok(ModelEvent::Usage(turn)));
        }
    }

    fn disarm(&mut self) {
        if let Some(t) = &mut self.task {
            t.armed = false;
        }
    }

    fn fail(&mut self, e: ModelError) {
        self.out.push_back(Err(e));
        self.ended = true;
    }

    /// The task ended or waits: the turn's last events.
    fn end(&mut self, task: Task) {
        self.ended = true;
        let id = task.id.clone();
        let said = task
            .status
            .message
            .as_ref()
            .map(|m| text_of(&m.parts))
            .unwrap_or_default();
        match task.status.state {
            TaskState::Completed => {
                self.disarm();
                if !self.answered {
                    let text = task
                        .artifacts
                        .iter()
                        .map(|a| text_of(&a.parts))
                        .filter(|t| !t.is_empty())
                        .collect::<Vec<_>>()
                        .join("\n");
                    self.text(if text.is_empty() { said } else { text });
                }
                self.out
                    .push_back(Ok(ModelEvent::Finished(FinishReason::Stop)));
            }
            TaskState::InputRequired if self.may_ask && !id.is_empty() => {
                self.disarm();
                let mut question = if said.trim().is_empty() {
                    "The remote agent needs input to go on.".to_owned()
                } else {
                    said
                };
                if question.len() > MAX_QUESTION_BYTES {
                    let mut cut = MAX_QUESTION_BYTES;
                    while !question.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    question.truncate(cut);
                }
                let reported = self.reported.unwrap_or(self.baseline);
                self.out.push_back(Ok(ModelEvent::ToolCall(ToolCall {
                    id: Question::call_id(&id, reported),
                    name: ASK_HUMAN.to_owned(),
                    arguments: serde_json::json!({ "question": question }),
                })));
                self.out
                    .push_back(Ok(ModelEvent::Finished(FinishReason::ToolCalls)));
            }
            state => {
                // Interrupted without a way to ask: the task is cancelled when the turn
                // drops it. A terminal one needs nothing.
                if state.is_terminal() {
                    self.disarm();
                }
                let how = match state {
                    TaskState::InputRequired if id.is_empty() => {
                        " (the agent named no task to answer)".to_owned()
                    }
                    TaskState::InputRequired => {
                        " (this child cannot ask: give its agent the ask_human tool)".to_owned()
                    }
                    _ => String::new(),
                };
                let said = if said.is_empty() {
                    String::new()
                } else {
                    format!(": {said}")
                };
                self.out.push_back(Err(ModelError::Provider {
                    message: format!(
                        "{}: the remote task {id} ended {state}{how}{said}",
                        self.name
                    ),
                }));
            }
        }
    }

    /// The stream ended: if the task has not ended or asked, read it once.
    async fn closed(&mut self) {
        let Some(id) = self.task.as_ref().map(|t| t.task.clone()) else {
            self.fail(ModelError::Connection {
                provider: self.name.clone(),
                message: "the agent's stream ended before it named a task".to_owned(),
            });
            return;
        };
        match self.client.get_task(&id).await {
            Ok(task) if task.status.state.is_terminal() || task.status.state.is_interrupted() => {
                self.usage(task.metadata.as_ref());
                self.end(task);
            }
            Ok(task) => self.fail(ModelError::Connection {
                provider: self.name.clone(),
                message: format!(
                    "the agent's stream ended while its task {id} was {}",
                    task.status.state
                ),
            }),
            Err(e) => self.fail(ModelError::Connection {
                provider: self.name.clone(),
                message: format!(
                    "the agent's stream ended while its task {id} was {}, and the task \
                     cannot be read: {e}",
                    self.state
                ),
            }),
        }
    }
}

/// Cancels the remote task when dropped armed: the turn was dropped before the task ended
/// or asked.
struct CancelOnDrop {
    client: A2aClient,
    task: String,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        cancel_in_background(self.client.clone(), std::mem::take(&mut self.task));
    }
}

/// Sends `CancelTask` for `task` on the current runtime, tracked by [`settle`], within 5 s
/// (nothing when no runtime runs).
fn cancel_in_background(client: A2aClient, task: String) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    CANCELS.spawn_on(
        async move {
            match tokio::time::timeout(CANCEL_WITHIN, client.cancel_task(&task)).await {
                Ok(Ok(t)) => {
                    tracing::debug!(task, state = %t.status.state, "remote task cancelled")
                }
                Ok(Err(e)) => tracing::debug!(task, error = %e, "remote task not cancelled"),
                Err(_) => tracing::debug!(task, "remote task's cancel timed out"),
            }
        },
        &handle,
    );
}
