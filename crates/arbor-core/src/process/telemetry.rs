//! Traces in the OpenTelemetry GenAI semantic conventions, as `tracing` spans: this module
//! owns every span name and attribute arbor emits, and nothing else creates them.
//!
//! - `invoke_agent {agent}` (internal): one per run attempt of a session, root or child. Its
//!   `gen_ai.usage.*` is what *this attempt's* provider turns used (a resumed run counts
//!   only what it used after the resume), so summing `gen_ai.usage.*` over the
//!   `invoke_agent` spans of a trace gives the tree's total without double counting; the
//!   session's subtree total is under `arbor.usage.subtree.*`.
//! - `execute_tool {tool}` (internal): one per tool call. A `spawn_agent` call names its
//!   target (`execute_tool spawn_agent {child}`, `gen_ai.transfer.*`), and the child's
//!   `invoke_agent` span is its descendant, also for a child that outlives the call.
//! - `chat {model}` (client): one per provider turn, with that turn's usage. The `chat`
//!   spans of a trace sum to the same total as its `invoke_agent` spans.
//!
//! The spans have the target [`TARGET`] at level INFO: a host's subscriber (the CLI's
//! OpenTelemetry layer, say) picks them up with a filter on that target, and they cost a
//! disabled-callsite check when nothing listens. Content (tool arguments and results, the
//! model's system prompt, input and output) is captured only after [`capture_content`]
//! turned it on, always through the agent's redactor, each attribute capped at
//! [`MAX_CONTENT_BYTES`].

use std::sync::atomic::{AtomicBool, Ordering};

use arbor_model::FinishReason;
use arbor_protocol::{RunId, RunLimits, Usage};
use tracing::Span;
use tracing::field::Empty;

use crate::outcome::RunResult;
use crate::redact::Redactor;

/// Who a span is about: the agent and its session (what the session hands over).
#[derive(Clone, Copy)]
pub(crate) struct Who<'a> {
    pub(crate) agent: &'a str,
    pub(crate) provider: &'a str,
    pub(crate) model: &'a str,
    pub(crate) session: arbor_protocol::SessionId,
    pub(crate) root: arbor_protocol::SessionId,
    pub(crate) depth: u32,
    pub(crate) parent: Option<arbor_protocol::SessionId>,
    pub(crate) redactor: Option<&'a dyn Redactor>,
}

/// The target of every span this module creates.
pub const TARGET: &str = "arbor::trace";

/// The target of the events a metrics layer counts (never exported as trace content): each
/// has a `metric` field naming it — `admission_refused` (`limit`, `kind`), `store_commit`
/// (`seconds`) — and arbor-model's `provider_retry` (`provider`, `reason`).
pub const METRICS_TARGET: &str = arbor_model::METRICS_TARGET;

/// The attribute names arbor emits (the GenAI conventions' and arbor's own).
pub mod attr {
    /// `invoke_agent`, `execute_tool` or `chat`.
    pub const OPERATION: &str = "gen_ai.operation.name";
    /// The model provider (`openai`, `anthropic`, `scripted`, …).
    pub const PROVIDER: &str = "gen_ai.provider.name";
    /// The agent's name.
    pub const AGENT_NAME: &str = "gen_ai.agent.name";
    /// The agent's session id.
    pub const AGENT_ID: &str = "gen_ai.agent.id";
    /// The root session's id: one conversation per tree.
    pub const CONVERSATION: &str = "gen_ai.conversation.id";
    /// The model asked for.
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    /// The model the provider says answered (when it names one; the scripted provider does
    /// not).
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    /// Why the model stopped (`stop`, `tool_calls`, `length`, `content_filter`, …), or why
    /// the run did (its stop reason).
    pub const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
    /// Prompt tokens (cached ones included).
    pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    /// Completion tokens.
    pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    /// Prompt tokens served from a provider cache.
    pub const CACHE_READ_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
    /// Prompt tokens written to a provider cache.
    pub const CACHE_CREATION_TOKENS: &str = "gen_ai.usage.cache_creation.input_tokens";
    /// The tool's name.
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    /// The model's id of the call.
    pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    /// `function`.
    pub const TOOL_TYPE: &str = "gen_ai.tool.type";
    /// The call's arguments (content: opt-in, redacted).
    pub const TOOL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
    /// The call's result (content: opt-in, redacted).
    pub const TOOL_RESULT: &str = "gen_ai.tool.call.result";
    /// The system prompt of a model call (content: opt-in, redacted), as the conventions'
    /// JSON parts.
    pub const SYSTEM_INSTRUCTIONS: &str = "gen_ai.system_instructions";
    /// The messages a model call was sent (content: opt-in, redacted, capped), as JSON.
    pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
    /// What the model answered: its text and tool calls (content: opt-in, redacted, capped),
    /// as JSON.
    pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
    /// The child a `spawn_agent` call delegates to.
    pub const TRANSFER_TARGET: &str = "gen_ai.transfer.target.name";
    /// `return_to_caller` (a sync child) or `pass_control` (async, message).
    pub const TRANSFER_MODE: &str = "gen_ai.transfer.mode";
    /// Why the operation failed (a stop reason, `tool_error`, a provider error's kind).
    pub const ERROR_TYPE: &str = "error.type";
    /// The run (attempt) id.
    pub const RUN_ID: &str = "arbor.run.id";
    /// Whether the run attempt resumed a suspended or interrupted run.
    pub const RUN_RESUMED: &str = "arbor.run.resumed";
    /// The run's terminal status (`succeeded`, `failed`, `suspended`, …).
    pub const RUN_STATUS: &str = "arbor.run.status";
    /// Model turns the run took (over all its attempts).
    pub const RUN_TURNS: &str = "arbor.run.turns";
    /// Tool calls the run made (over all its attempts).
    pub const RUN_TOOL_CALLS: &str = "arbor.run.tool_calls";
    /// The run's step limit.
    pub const LIMIT_MAX_STEPS: &str = "arbor.limits.max_steps";
    /// The run's token limit.
    pub const LIMIT_MAX_TOKENS: &str = "arbor.limits.max_tokens";
    /// The run's tool-call limit.
    pub const LIMIT_MAX_TOOL_CALLS: &str = "arbor.limits.max_tool_calls";
    /// The run's timeout.
    pub const LIMIT_TIMEOUT_MS: &str = "arbor.limits.timeout_ms";
    /// The session's depth (0 for a root).
    pub const DEPTH: &str = "arbor.agent.depth";
    /// The parent session's id (children only).
    pub const PARENT_ID: &str = "arbor.agent.parent_id";
    /// The session's subtree total (its own and its descendants') when the run ended.
    pub const SUBTREE_INPUT_TOKENS: &str = "arbor.usage.subtree.input_tokens";
    /// See [`SUBTREE_INPUT_TOKENS`].
    pub const SUBTREE_OUTPUT_TOKENS: &str = "arbor.usage.subtree.output_tokens";
    /// See [`SUBTREE_INPUT_TOKENS`].
    pub const SUBTREE_TOTAL_TOKENS: &str = "arbor.usage.subtree.total_tokens";
    /// What a `chat` span's turn, or an `invoke_agent` span's attempt, cost: micro-units of
    /// the price table's currency (set only with prices).
    pub const COST_MICROS: &str = "arbor.cost_micros";
    /// The session's subtree cost (its own and its descendants') when the run ended.
    pub const SUBTREE_COST_MICROS: &str = "arbor.cost.subtree_micros";
    /// The turn of the run a `chat` or `execute_tool` span belongs to.
    pub const TURN: &str = "arbor.turn";
    /// The call's child stopped for an approval: the call goes on in a resumed attempt.
    pub const TOOL_WAITING: &str = "arbor.tool.waiting";
}

static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

/// How a host's trace exporter reads a span's context and continues it in another process:
/// a run that suspends stores its attempt's `traceparent` with its checkpoint, and the
/// attempt that resumes it (after an approval, in a later process) joins that trace.
pub trait TraceContext: Send + Sync + 'static {
    /// The W3C `traceparent` of `span` (`None` when it is not exported).
    fn traceparent(&self, span: &Span) -> Option<String>;
    /// Continues the trace of `before` (the suspended attempt's `traceparent`) on `span`, a
    /// new attempt's span not yet entered: always a link to `before`; with `adopt` (the span
    /// has no parent in this process), `before` also becomes its parent, so the attempt is
    /// in the same trace.
    fn continue_from(&self, span: &Span, before: &str, adopt: bool);
}

static CONTEXT: std::sync::OnceLock<Box<dyn TraceContext>> = std::sync::OnceLock::new();

/// Installs the process's [`TraceContext`] (once: a second call is refused and returns
/// `false`). Without one, runs store no trace context and a resumed run starts a new trace.
pub fn set_trace_context(context: impl TraceContext) -> bool {
    CONTEXT.set(Box::new(context)).is_ok()
}

/// The current span's `traceparent`, when a [`TraceContext`] is installed.
pub(crate) fn traceparent() -> Option<String> {
    traceparent_of(&Span::current())
}

/// `span`'s `traceparent`, when a [`TraceContext`] is installed and the span is recorded.
pub(crate) fn traceparent_of(span: &Span) -> Option<String> {
    let context = CONTEXT.get()?;
    if span.is_none() {
        return None;
    }
    context.traceparent(span)
}

/// See [`TraceContext::continue_from`].
fn continue_trace(span: &Span, before: &str, adopt: bool) {
    if let Some(context) = CONTEXT.get()
        && !span.is_disabled()
    {
        context.continue_from(span, before, adopt);
    }
}

/// Turns capture of content (tool arguments and results, model input and output) on the
/// spans on or off (off by default; the OpenTelemetry GenAI opt-in, `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`,
/// is read by the host, not here). Captured content always goes through the agent's
/// redactor first.
pub fn capture_content(on: bool) {
    CAPTURE_CONTENT.store(on, Ordering::Relaxed);
}

fn capturing() -> bool {
    CAPTURE_CONTENT.load(Ordering::Relaxed)
}

/// The `invoke_agent` span of a run attempt; one that continues `before` (a suspended or
/// cut-off attempt's `traceparent`) is linked to it, and is its child when nothing in this
/// process is its parent (see [`TraceContext::continue_from`]).
pub(crate) fn attempt_span(
    who: Who<'_>,
    run_id: RunId,
    limits: &RunLimits,
    resumed: bool,
    before: Option<&str>,
) -> Span {
    let orphan = Span::current().is_none();
    let span = agent_span(who, run_id, limits, resumed);
    if let Some(before) = before {
        continue_trace(&span, before, orphan);
    }
    span
}

/// The `invoke_agent` span of one run attempt of `session`.
fn agent_span(who: Who<'_>, run_id: RunId, limits: &RunLimits, resumed: bool) -> Span {
    let agent = who.agent;
    let span = tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        otel.name = %format_args!("invoke_agent {agent}"),
        otel.kind = "internal",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.provider.name = who.provider,
        gen_ai.agent.name = agent,
        gen_ai.agent.id = %who.session,
        gen_ai.conversation.id = %who.root,
        gen_ai.request.model = who.model,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        error.type = Empty,
        arbor.run.id = %run_id,
        arbor.run.resumed = resumed,
        arbor.run.status = Empty,
        arbor.run.turns = Empty,
        arbor.run.tool_calls = Empty,
        arbor.limits.max_steps = limits.max_steps,
        arbor.limits.max_tokens = limits.max_tokens,
        arbor.limits.max_tool_calls = limits.max_tool_calls,
        arbor.limits.timeout_ms = limits.timeout_ms,
        arbor.agent.depth = who.depth,
        arbor.agent.parent_id = Empty,
        arbor.usage.subtree.input_tokens = Empty,
        arbor.usage.subtree.output_tokens = Empty,
        arbor.usage.subtree.total_tokens = Empty,
        arbor.cost_micros = Empty,
        arbor.cost.subtree_micros = Empty,
    );
    if let Some(parent) = who.parent {
        span.record(attr::PARENT_ID, tracing::field::display(parent));
    }
    span
}

/// What this attempt used: the run's usage at its end less what it carried in.
pub(crate) fn attempt_usage(end: &Usage, start: &Usage) -> Usage {
    Usage {
        input_tokens: end.input_tokens.saturating_sub(start.input_tokens),
        output_tokens: end.output_tokens.saturating_sub(start.output_tokens),
        total_tokens: end.total_tokens.saturating_sub(start.total_tokens),
        cache_read_tokens: end
            .cache_read_tokens
            .saturating_sub(start.cache_read_tokens),
        cache_write_tokens: end
            .cache_write_tokens
            .saturating_sub(start.cache_write_tokens),
    }
}

fn record_usage(span: &Span, usage: &Usage) {
    span.record(attr::INPUT_TOKENS, usage.input_tokens);
    span.record(attr::OUTPUT_TOKENS, usage.output_tokens);
    span.record(attr::CACHE_READ_TOKENS, usage.cache_read_tokens);
    span.record(attr::CACHE_CREATION_TOKENS, usage.cache_write_tokens);
}

fn record_error(span: &Span, kind: &str, message: Option<&str>) {
    span.record(attr::ERROR_TYPE, kind);
    span.record("otel.status_code", "error");
    if let Some(m) = message {
        span.record("otel.status_description", m);
    }
}

/// Records how the attempt ended on its `invoke_agent` span: `own` is what the attempt
/// used, `subtree` the session's total with its descendants'.
pub(crate) fn record_run(
    span: &Span,
    result: &RunResult,
    (own, own_cost): (&Usage, u64),
    (subtree, subtree_cost): (&Usage, u64),
) {
    record_usage(span, own);
    if subtree_cost > 0 {
        span.record(attr::COST_MICROS, own_cost);
        span.record(attr::SUBTREE_COST_MICROS, subtree_cost);
    }
    let status = result.status.to_string();
    span.record(attr::RUN_STATUS, status.as_str());
    span.record(attr::RUN_TURNS, result.turns);
    span.record(attr::RUN_TOOL_CALLS, result.tool_calls);
    let reason = result.stop_reason.to_string();
    span.record(attr::FINISH_REASONS, reason.as_str());
    span.record(attr::SUBTREE_INPUT_TOKENS, subtree.input_tokens);
    span.record(attr::SUBTREE_OUTPUT_TOKENS, subtree.output_tokens);
    span.record(attr::SUBTREE_TOTAL_TOKENS, subtree.total_tokens);
    use arbor_protocol::RunStatus;
    if !matches!(result.status, RunStatus::Succeeded | RunStatus::Suspended) {
        record_error(span, reason.as_str(), result.error.as_deref());
    }
}

/// The `chat` span of one provider turn.
pub(crate) fn chat_span(who: Who<'_>, turn: u32) -> Span {
    let model = who.model;
    tracing::info_span!(
        target: TARGET,
        "chat",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = who.provider,
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.agent.name = who.agent,
        gen_ai.agent.id = %who.session,
        gen_ai.conversation.id = %who.root,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        gen_ai.system_instructions = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        error.type = Empty,
        arbor.turn = turn,
        arbor.cost_micros = Empty,
    )
}

/// The most content one attribute carries (longer JSON is cut at a character boundary and
/// marked).
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;

fn capped(mut text: String) -> String {
    if text.len() > MAX_CONTENT_BYTES {
        let mut end = MAX_CONTENT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("…[truncated]");
    }
    text
}

/// Records what a model call was sent on its `chat` span, when content is captured.
pub(crate) fn record_chat_input(
    span: &Span,
    who: Who<'_>,
    system: &str,
    messages: &[arbor_protocol::Message],
) {
    if !capturing() || span.is_disabled() {
        return;
    }
    if !system.is_empty() {
        let parts = serde_json::json!([{"type": "text", "content": system}]).to_string();
        span.record(
            attr::SYSTEM_INSTRUCTIONS,
            capped(redacted(who, &parts)).as_str(),
        );
    }
    let sent = serde_json::to_string(messages).unwrap_or_default();
    span.record(attr::INPUT_MESSAGES, capped(redacted(who, &sent)).as_str());
}

/// Records what the model answered on its `chat` span, when content is captured.
pub(crate) fn record_chat_output(
    span: &Span,
    who: Who<'_>,
    text: &str,
    calls: &[arbor_protocol::ToolCall],
) {
    if !capturing() || span.is_disabled() {
        return;
    }
    let answer =
        serde_json::json!([{"role": "assistant", "text": text, "tool_calls": calls}]).to_string();
    span.record(
        attr::OUTPUT_MESSAGES,
        capped(redacted(who, &answer)).as_str(),
    );
}

/// The convention's name of a finish reason.
pub(crate) fn finish_reason(reason: &FinishReason) -> &str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Length => "length",
        FinishReason::Refusal => "content_filter",
        FinishReason::Other(other) => other.as_str(),
    }
}

/// Records how a provider turn ended on its `chat` span.
pub(crate) fn record_chat(
    span: &Span,
    usage: Option<&Usage>,
    finish: Option<&str>,
    error: Option<&str>,
) {
    if let Some(u) = usage {
        record_usage(span, u);
    }
    if let Some(f) = finish {
        span.record(attr::FINISH_REASONS, f);
    }
    if let Some(e) = error {
        record_error(span, "provider_error", Some(e));
    }
}

/// The `execute_tool` span of one call; a `spawn_agent` call names its target child.
pub(crate) fn tool_span(who: Who<'_>, turn: u32, call: &arbor_protocol::ToolCall) -> Span {
    let tool = call.name.as_str();
    let target = (tool == "spawn_agent")
        .then(|| call.arguments.get("child_id").and_then(|v| v.as_str()))
        .flatten();
    let span = tracing::info_span!(
        target: TARGET,
        "execute_tool",
        otel.name = Empty,
        otel.kind = "internal",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call.id.as_str(),
        gen_ai.tool.type = "function",
        gen_ai.agent.name = who.agent,
        gen_ai.agent.id = %who.session,
        gen_ai.conversation.id = %who.root,
        gen_ai.transfer.target.name = Empty,
        gen_ai.transfer.mode = Empty,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        error.type = Empty,
        arbor.turn = turn,
        arbor.tool.waiting = Empty,
    );
    match target {
        Some(child) => {
            span.record("otel.name", format!("execute_tool {tool} {child}").as_str());
            span.record(attr::TRANSFER_TARGET, child);
            let mode = match call.arguments.get("mode").and_then(|v| v.as_str()) {
                None | Some("sync") => "return_to_caller",
                Some(_) => "pass_control",
            };
            span.record(attr::TRANSFER_MODE, mode);
        }
        None => {
            span.record("otel.name", format!("execute_tool {tool}").as_str());
        }
    }
    if capturing() && !span.is_disabled() {
        let arguments = call.arguments.to_string();
        span.record(attr::TOOL_ARGUMENTS, redacted(who, &arguments).as_str());
    }
    span
}

fn redacted(who: Who<'_>, text: &str) -> String {
    match who.redactor {
        Some(r) => r.redact(text).into_owned(),
        None => text.to_owned(),
    }
}

/// Records how a call ended on its `execute_tool` span: `waiting` when its child suspended
/// for an approval (not a failure: the call goes on when the run is resumed).
pub(crate) fn record_tool(
    span: &Span,
    who: Who<'_>,
    result: &arbor_protocol::ToolResult,
    waiting: bool,
) {
    if waiting {
        span.record(attr::TOOL_WAITING, true);
    } else if result.is_error {
        record_error(span, "tool_error", None);
    }
    if capturing() && !span.is_disabled() {
        span.record(attr::TOOL_RESULT, redacted(who, &result.content).as_str());
    }
}

/// A delegation refused at admission (before anything was counted): `error` says why.
pub(crate) fn admission_refused(error: &crate::CoreError) {
    let limit = error
        .limit()
        .map_or_else(|| "none".to_owned(), |l| l.limit.to_string());
    tracing::info!(
        target: METRICS_TARGET,
        metric = "admission_refused",
        limit = limit.as_str(),
        kind = ?error.kind(),
    );
}

/// One store write of a run took `elapsed`.
pub(crate) fn store_commit(elapsed: std::time::Duration) {
    tracing::info!(
        target: METRICS_TARGET,
        metric = "store_commit",
        seconds = elapsed.as_secs_f64(),
    );
}
