//! Approvals where the person is: when `arbor run` (or `arbor resume`) stops on calls
//! waiting for approval and its standard input and error are a terminal, it asks there, call by call (the path, the
//! tool and its arguments; approve once, for the run, reject with a reason, or leave it for
//! later) and the questions agents asked (`ask_human`: type the answer, or a choice's
//! number), records the decisions as `arbor approve` / `reject` / `answer` would, and the caller resumes
//! the tree in the same process. `--no-input`, or no terminal, keeps the exit 4 and the
//! separate commands.

use std::io::IsTerminal;

use arbor_core::approval::Suspension;
use arbor_protocol::{ApprovalDecision, PendingDecision, SessionId, Verdict};

use std::sync::{Arc, PoisonError};

use arbor_store::Store;

use crate::drive::{Held, View};
use crate::fail::{EXIT_SUSPENDED, Fail};
use crate::store::StoreName;
use crate::{answers, render::output};

/// How the runs after an answer show themselves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Show {
    pub(crate) json: bool,
    pub(crate) quiet: bool,
    pub(crate) progress: crate::render::live::Progress,
}

/// While the tree under `root` waits for approval and a person can answer: asks, then
/// resumes; the last exit code. When a call is left for later, or nothing could be asked
/// (what waits is decided, yet the tree stopped again), the held report is printed and the
/// tree stays as it is: exit 4, as without a terminal.
pub(crate) async fn go_on(
    (store, store_name): (&Arc<dyn Store>, &StoreName),
    root: SessionId,
    mut code: u8,
    asking: Option<&Held>,
    show: Show,
) -> Result<u8, Fail> {
    let Some(held) = asking else {
        return Ok(code);
    };
    while code == EXIT_SUSPENDED {
        if decide_waiting(store.as_ref(), root).await? != Answered::AllDecided {
            let lines = std::mem::take(&mut *held.lock().unwrap_or_else(PoisonError::into_inner));
            for line in &lines {
                output::out(line);
            }
            break;
        }
        let view = View {
            store,
            store_name,
            json: show.json,
            quiet: show.quiet,
            asking: Some(held),
            progress: show.progress,
        };
        code = crate::resume::resume_at(view, root).await?;
    }
    Ok(code)
}

/// Whether a run may ask on the terminal: not refused with `--no-input`, and both standard
/// input (the answers) and standard error (the questions) are a terminal.
pub(crate) fn can_ask(no_input: bool) -> bool {
    !no_input && std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// What the person answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answered {
    /// Every waiting call is decided: the tree can go on.
    AllDecided,
    /// Some call was left for later (or the input ended): exit 4 as without a terminal.
    Later,
    /// Nothing waits for a decision: there was nothing to ask.
    Nothing,
}

/// One answer to one call.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Choice {
    Decide(Verdict, Option<String>),
    Skip,
    /// The input ended: nothing more will be answered.
    Closed,
}

/// Asks, call by call, about everything that waits under `root`, and records each
/// suspension's decisions. Nothing runs here.
pub(crate) async fn decide_waiting(
    store: &dyn arbor_store::Store,
    root: SessionId,
) -> Result<Answered, Fail> {
    let waiting = answers::waiting_at(store, root).await?;
    let total: usize = waiting.iter().map(|s| s.pending.len()).sum();
    if total == 0 {
        return Ok(Answered::Nothing);
    }
    output::err(&format!(
        "\n{total} call(s) wait for your approval (Ctrl-C leaves them waiting: arbor approvals)"
    ));
    let reviews = crate::render::report::reviews(store, &waiting.iter().collect::<Vec<_>>()).await;
    let mut asked = 0;
    let mut complete = true;
    for s in &waiting {
        let mut decisions = Vec::new();
        for p in &s.pending {
            asked += 1;
            let question = arbor_core::tool::ask::Question::of(p);
            output::err(&describe(asked, total, p, question.as_ref()));
            for line in reviews
                .get(&p.id)
                .map(crate::render::report::review_lines)
                .unwrap_or_default()
            {
                output::err(&format!("    {line}"));
            }
            let choice = match &question {
                Some(q) => ask_question(q).await?,
                None => ask_one().await?,
            };
            match choice {
                Choice::Decide(verdict, reason) => decisions.push(ApprovalDecision {
                    id: p.id.clone(),
                    verdict,
                    reason,
                    decided_by: Some(crate::tree::local_decider()),
                }),
                Choice::Skip => complete = false,
                Choice::Closed => {
                    record(store, root, s, &decisions).await?;
                    return Ok(Answered::Later);
                }
            }
        }
        record(store, root, s, &decisions).await?;
    }
    Ok(if complete {
        Answered::AllDecided
    } else {
        Answered::Later
    })
}

/// The question about one call (or the agent's own question).
fn describe(
    n: usize,
    total: usize,
    p: &PendingDecision,
    question: Option<&arbor_core::tool::ask::Question>,
) -> String {
    let path = if p.path.is_empty() {
        "root".to_owned()
    } else {
        p.path.join(" > ")
    };
    if let Some(q) = question {
        let mut text = format!("[{n}/{total}] {path} asks: {}", q.question);
        for (i, c) in q.choices.iter().enumerate() {
            text.push_str(&format!("\n  {}. {c}", i + 1));
        }
        text.push_str(
            "\n  type the answer (or a choice's number), !decline to decline, or Enter to \
             decide later",
        );
        return text;
    }
    let arguments = output::short(&output::one_line(&p.arguments.to_string()), 400);
    format!(
        "[{n}/{total}] {path}: {} {arguments}\n  approve [o]nce, approve for the [r]un, re[j]ect, \
         or [s]kip (decide later)?",
        p.tool
    )
}

/// Reads one answer (asking again on anything else).
async fn ask_one() -> Result<Choice, Fail> {
    loop {
        prompt("> ");
        let Some(line) = read_line().await? else {
            return Ok(Choice::Closed);
        };
        let verdict = match line.trim().to_ascii_lowercase().as_str() {
            "o" | "once" | "y" | "yes" => Verdict::AllowOnce,
            "r" | "run" => Verdict::AllowForRun,
            "j" | "reject" | "n" | "no" => Verdict::RejectOnce,
            "s" | "skip" | "" => return Ok(Choice::Skip),
            other => {
                output::err(&format!("  {other:?}? answer o, r, j or s"));
                continue;
            }
        };
        if verdict == Verdict::RejectOnce {
            prompt("  why (the model reads it; Enter for no reason): ");
            let Some(reason) = read_line().await? else {
                return Ok(Choice::Closed);
            };
            let reason = reason.trim();
            let reason = (!reason.is_empty()).then(|| reason.to_owned());
            if let Err(fail) = answers::check_reason(reason.as_deref()) {
                output::err(&format!("  {}", fail.message));
                continue;
            }
            return Ok(Choice::Decide(verdict, reason));
        }
        return Ok(Choice::Decide(verdict, None));
    }
}

/// Reads the answer to a question (asking again on one that does not fit it).
async fn ask_question(q: &arbor_core::tool::ask::Question) -> Result<Choice, Fail> {
    loop {
        prompt("> ");
        let Some(line) = read_line().await? else {
            return Ok(Choice::Closed);
        };
        let line = line.trim_end_matches(['\r', '\n']).trim();
        if line.is_empty() {
            return Ok(Choice::Skip);
        }
        if line == "!decline" {
            return Ok(Choice::Decide(Verdict::RejectOnce, None));
        }
        // A choice by its number.
        let answer = line
            .parse::<usize>()
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| q.choices.get(i))
            .cloned()
            .unwrap_or_else(|| line.to_owned());
        match q.check_answer(&answer) {
            Ok(()) => return Ok(Choice::Decide(Verdict::AllowOnce, Some(answer))),
            Err(e) => output::err(&format!("  {e}")),
        }
    }
}

fn prompt(text: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
}

/// One line of standard input (`None` at its end).
async fn read_line() -> Result<Option<String>, Fail> {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    })
    .await
    .map_err(|e| Fail::usage(format!("cannot read the terminal: {e}")))
}

/// Records `decisions` on the suspension `s` (nothing when empty).
async fn record(
    store: &dyn arbor_store::Store,
    root: SessionId,
    s: &Suspension,
    decisions: &[ApprovalDecision],
) -> Result<(), Fail> {
    if decisions.is_empty() {
        return Ok(());
    }
    let _ = s;
    arbor_core::supervisor::decide_at(store, root, decisions)
        .await
        .map_err(|e| {
            Fail::usage(format!(
                "{e} (decided elsewhere meanwhile? see arbor approvals {})",
                crate::resolve::short(root)
            ))
        })?;
    Ok(())
}
