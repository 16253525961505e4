//! Questions for a person (`ask_human`), as the approvals checkpoint keeps them: what a
//! question may hold ([`Question`]), what answers it ([`answer`], checked by
//! [`RunCheckpoint::decide`](crate::approval::RunCheckpoint::decide)), and what the model
//! reads once it is answered or declined. The tool itself is `arbor_core::tool::ask::AskHuman`.
//!
//! A question is checked before it waits: `question` is 1 to [`MAX_QUESTION_BYTES`] bytes,
//! `choices` (optional) 1 to [`MAX_CHOICES`] distinct strings of 1 to [`MAX_CHOICE_BYTES`]
//! bytes; a bad one is an error result naming the field, and nobody is asked. An answer is 1
//! to [`MAX_ANSWER_BYTES`] bytes and, with choices, one of them: an `allow_once` decision
//! whose reason is the answer; a `reject_once` declines. Run-wide verdicts, standing
//! decisions and sticky rules never answer a question.

use arbor_protocol::{ApprovalDecision, PendingDecision, Verdict};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{CoreError, CoreResult};

/// The tool's name (reserved: only arbor's own `AskHuman` tool may carry it).
pub const ASK_HUMAN: &str = "ask_human";
/// Bytes of a question.
pub const MAX_QUESTION_BYTES: usize = 2048;
/// Choices of one question.
pub const MAX_CHOICES: usize = 16;
/// Bytes of one choice.
pub const MAX_CHOICE_BYTES: usize = 256;
/// Bytes of an answer (a decision's reason).
pub const MAX_ANSWER_BYTES: usize = super::MAX_REASON_BYTES;

/// A question for the person at the root: the arguments of an `ask_human` call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// The question, for a person to read (1 to 2048 bytes).
    pub question: String,
    /// The answers to choose from (1 to 16 distinct, each 1 to 256 bytes); leave it out for
    /// a free-text answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
}

impl Question {
    /// A free-text question (checked).
    pub fn new(question: impl Into<String>) -> CoreResult<Self> {
        let q = Self {
            question: question.into(),
            choices: Vec::new(),
        };
        q.check()?;
        Ok(q)
    }

    /// The same question with these choices (checked).
    pub fn choices(
        mut self,
        choices: impl IntoIterator<Item = impl Into<String>>,
    ) -> CoreResult<Self> {
        self.choices = choices.into_iter().map(Into::into).collect();
        if self.choices.is_empty() {
            return Err(CoreError::invalid(
                "choices",
                "choices, when given, hold 1 to 16 answers",
            ));
        }
        self.check()?;
        Ok(self)
    }

    /// The question a model's arguments ask; the error names the field.
    pub fn parse(arguments: &Value) -> CoreResult<Self> {
        let Some(object) = arguments.as_object() else {
            return Err(CoreError::invalid(
                "arguments",
                "ask_human takes an object: {question, choices?}",
            ));
        };
        if let Some(key) = object
            .keys()
            .find(|k| !matches!(k.as_str(), "question" | "choices"))
        {
            return Err(CoreError::invalid(
                "arguments",
                format!("unknown field {key:?}: ask_human takes question and choices"),
            ));
        }
        let question = match object.get("question") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(CoreError::invalid("question", "question must be a string")),
            None => return Err(CoreError::invalid("question", "question is required")),
        };
        let choices = match object.get("choices") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                if items.is_empty() {
                    return Err(CoreError::invalid(
                        "choices",
                        "choices, when given, hold 1 to 16 answers",
                    ));
                }
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(s) => out.push(s.clone()),
                        _ => {
                            return Err(CoreError::invalid(
                                "choices",
                                format!("choices[{i}] must be a string"),
                            ));
                        }
                    }
                }
                out
            }
            Some(_) => {
                return Err(CoreError::invalid(
                    "choices",
                    "choices must be an array of strings",
                ));
            }
        };
        let q = Self { question, choices };
        q.check()?;
        Ok(q)
    }

    /// Checks the limits; the error names the field.
    pub fn check(&self) -> CoreResult<()> {
        if self.question.trim().is_empty() || self.question.len() > MAX_QUESTION_BYTES {
            return Err(CoreError::invalid(
                "question",
                format!("question must be 1 to {MAX_QUESTION_BYTES} bytes, not blank"),
            ));
        }
        if self.choices.len() > MAX_CHOICES {
            return Err(CoreError::invalid(
                "choices",
                format!(
                    "choices hold at most {MAX_CHOICES} answers ({} given)",
                    self.choices.len()
                ),
            ));
        }
        for (i, c) in self.choices.iter().enumerate() {
            if c.trim().is_empty() || c.len() > MAX_CHOICE_BYTES {
                return Err(CoreError::invalid(
                    "choices",
                    format!("choices[{i}] must be 1 to {MAX_CHOICE_BYTES} bytes, not blank"),
                ));
            }
            if self.choices[..i].contains(c) {
                return Err(CoreError::invalid(
                    "choices",
                    format!("choices[{i}] repeats {c:?}"),
                ));
            }
        }
        Ok(())
    }

    /// The question a pending decision asks, if it is one.
    pub fn of(pending: &PendingDecision) -> Option<Self> {
        (pending.tool == ASK_HUMAN)
            .then(|| Self::parse(&pending.arguments).ok())
            .flatten()
    }

    /// Checks `answer` answers this question: 1 to [`MAX_ANSWER_BYTES`] bytes, not blank,
    /// and one of the choices when there are some. The error names the field `answer`.
    pub fn check_answer(&self, answer: &str) -> CoreResult<()> {
        if answer.trim().is_empty() || answer.len() > MAX_ANSWER_BYTES {
            return Err(CoreError::invalid(
                "answer",
                format!("an answer is 1 to {MAX_ANSWER_BYTES} bytes, not blank"),
            ));
        }
        if !self.choices.is_empty() && !self.choices.iter().any(|c| c == answer) {
            return Err(CoreError::invalid(
                "answer",
                format!(
                    "the answer must be one of the question's choices: {}",
                    self.choices
                        .iter()
                        .map(|c| format!("{c:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        Ok(())
    }
}

/// The decision that answers the question `id` with `answer`: `allow_once`, the answer as
/// its reason.
pub fn answer(id: impl Into<String>, answer: impl Into<String>) -> ApprovalDecision {
    ApprovalDecision::new(id, Verdict::AllowOnce).with_reason(answer)
}

/// The verdict and reason of one decision as a surface received it (`verdict`, `reason`,
/// `answer`): an answer is `allow_once` with the answer as its reason, and stands alone (no
/// other verdict, no reason). The error names the field (`verdict`, `reason` or `answer`)
/// and says why; what the call itself accepts is checked when the decision is recorded.
pub fn decision_parts(
    verdict: Option<Verdict>,
    reason: Option<&str>,
    answer: Option<&str>,
) -> Result<(Verdict, Option<String>), (&'static str, String)> {
    if reason.is_some_and(|r| r.len() > super::MAX_REASON_BYTES) {
        return Err((
            "reason",
            format!(
                "a decision's reason is at most {} bytes",
                super::MAX_REASON_BYTES
            ),
        ));
    }
    let Some(answer) = answer else {
        return match verdict {
            Some(v) => Ok((v, reason.map(str::to_owned))),
            None => Err((
                "verdict",
                "verdict is required (allow_once, allow_for_run, reject_once, reject_for_run), \
                 unless the decision gives an answer"
                    .to_owned(),
            )),
        };
    };
    if answer.trim().is_empty() || answer.len() > MAX_ANSWER_BYTES {
        return Err((
            "answer",
            format!("an answer is 1 to {MAX_ANSWER_BYTES} bytes, not blank"),
        ));
    }
    if reason.is_some() {
        return Err((
            "reason",
            "an answer is its own reason: give answer or reason, not both".to_owned(),
        ));
    }
    match verdict {
        None | Some(Verdict::AllowOnce) => Ok((Verdict::AllowOnce, Some(answer.to_owned()))),
        Some(_) => Err((
            "verdict",
            "an answer goes with allow_once (or no verdict); reject_once declines a question"
                .to_owned(),
        )),
    }
}

/// Checks a decision on a question: only `allow_once` with an answer, or `reject_once` (a
/// decline). Nothing to check for another call.
pub(crate) fn check_decision(pending: &PendingDecision, d: &ApprovalDecision) -> CoreResult<()> {
    if pending.tool != ASK_HUMAN {
        return Ok(());
    }
    match d.verdict {
        // A malformed question can still be declined; only an answer needs one to fit.
        Verdict::AllowOnce => {
            Question::parse(&pending.arguments)?.check_answer(d.reason.as_deref().unwrap_or(""))
        }
        Verdict::RejectOnce => Ok(()),
        Verdict::AllowForRun | Verdict::RejectForRun => Err(CoreError::invalid(
            "verdict",
            "a question is answered once: answer it (allow_once with the answer) or decline it \
             (reject_once)",
        )),
    }
}

/// The result the model reads for a question answered (`Some(answer)`) or declined.
pub(crate) fn result_text(answer: Option<&str>, declined_why: Option<&str>) -> (String, bool) {
    match (answer, declined_why) {
        (Some(a), _) => (a.to_owned(), false),
        (None, Some(why)) => (format!("the person declined to answer: {why}"), true),
        (None, None) => ("the person declined to answer".to_owned(), true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_question_is_checked_field_by_field() {
        let ok = Question::parse(&json!({"question": "Which?", "choices": ["a", "b"]})).unwrap();
        assert_eq!(ok.choices, ["a", "b"]);
        for (args, field) in [
            (json!("text"), "arguments"),
            (json!({}), "question"),
            (json!({"question": ""}), "question"),
            (
                json!({"question": "x".repeat(MAX_QUESTION_BYTES + 1)}),
                "question",
            ),
            (json!({"question": "q", "choices": []}), "choices"),
            (json!({"question": "q", "choices": "a"}), "choices"),
            (json!({"question": "q", "choices": ["a", 1]}), "choices"),
            (json!({"question": "q", "choices": ["a", "a"]}), "choices"),
            (
                json!({"question": "q", "choices": (0..17).map(|i| i.to_string()).collect::<Vec<_>>()}),
                "choices",
            ),
            (json!({"question": "q", "extra": 1}), "arguments"),
        ] {
            let e = Question::parse(&args).unwrap_err();
            assert_eq!(e.field(), Some(field), "{args}: {e}");
        }
        let e = Question::parse(&json!({"question": "q", "choices": ["a", "a"]})).unwrap_err();
        assert_eq!(e.to_string(), "choices[1] repeats \"a\"");
    }

    #[test]
    fn an_answer_fits_the_question() {
        let q = Question::new("Deploy?")
            .unwrap()
            .choices(["yes", "no"])
            .unwrap();
        q.check_answer("yes").unwrap();
        assert_eq!(q.check_answer("maybe").unwrap_err().field(), Some("answer"));
        assert_eq!(q.check_answer(" ").unwrap_err().field(), Some("answer"));
        let free = Question::new("Why?").unwrap();
        free.check_answer("because").unwrap();
        assert!(
            free.check_answer(&"x".repeat(MAX_ANSWER_BYTES + 1))
                .is_err()
        );
    }

    #[test]
    fn a_surfaces_verdict_reason_and_answer_make_one_decision_or_name_the_field() {
        assert_eq!(
            decision_parts(None, None, Some("blue")),
            Ok((Verdict::AllowOnce, Some("blue".to_owned())))
        );
        assert_eq!(
            decision_parts(Some(Verdict::RejectOnce), Some("no"), None),
            Ok((Verdict::RejectOnce, Some("no".to_owned())))
        );
        let long = "x".repeat(MAX_ANSWER_BYTES + 1);
        for (verdict, reason, answer, field) in [
            (None, None, None, "verdict"),
            (Some(Verdict::AllowForRun), None, Some("blue"), "verdict"),
            (None, Some("why"), Some("blue"), "reason"),
            (None, Some(long.as_str()), None, "reason"),
            (None, None, Some(" "), "answer"),
            (None, None, Some(long.as_str()), "answer"),
        ] {
            let got = decision_parts(verdict, reason, answer).map_err(|(f, _)| f);
            assert_eq!(got, Err(field), "{verdict:?} {reason:?} {answer:?}");
        }
    }

    #[test]
    fn only_an_answer_or_a_decline_decides_a_question() {
        let pending = PendingDecision {
            id: "apr_1".into(),
            tool: ASK_HUMAN.into(),
            arguments: json!({"question": "Which?", "choices": ["a", "b"]}),
            call_id: "c1".into(),
            path: Vec::new(),
            session_id: None,
            run_id: None,
        };
        check_decision(&pending, &answer("apr_1", "a")).unwrap();
        check_decision(
            &pending,
            &ApprovalDecision::new("apr_1", Verdict::RejectOnce),
        )
        .unwrap();
        let e = check_decision(
            &pending,
            &ApprovalDecision::new("apr_1", Verdict::AllowOnce),
        )
        .unwrap_err();
        assert_eq!(e.field(), Some("answer"));
        let e = check_decision(
            &pending,
            &ApprovalDecision::new("apr_1", Verdict::AllowForRun),
        )
        .unwrap_err();
        assert_eq!(e.field(), Some("verdict"));
    }
}
