//! Approvals where the person is: when `arbor run` (or `arbor resume`) stops on calls
//! waiting for approval and its standard input and error are a terminal, it asks there, call by call (the path, the
//! tool and its arguments; approve once, for the run, reject with a reason, or leave it for
//! later), records the decisions as `arbor approve` / `reject` would, and the caller resumes
//! the tree in the same process. `--no-input`, or no terminal, keeps the exit 4 and the
//! separate commands.

use std::io::IsTerminal;

use arbor_core::approval::{self, Suspension};
use arbor_protocol::{ApprovalDecision, PendingDecision, SessionId, Verdict};

use crate::cli::{ResumeArgs, RunArgs};
use crate::fail::{EXIT_SUSPENDED, Fail};
use crate::run::View;
use crate::{answers, approvals, output, report};

/// `arbor run`: runs the spec's root; when it stops on calls waiting for approval and a
/// person is at the terminal, asks about them and resumes the tree in this process, until it
/// ends or something is left for later.
pub(crate) async fn run(args: RunArgs) -> Result<u8, Fail> {
    // Standard input that held the task cannot answer.
    let asking = can_ask(args.no_input) && args.task.as_deref() != Some("-");
    let started = crate::run::run(&args, asking).await?;
    let show = Show {
        json: args.json,
        quiet: args.quiet,
        progress: args.progress,
    };
    go_on(
        &started.store,
        started.choice.name(),
        started.root,
        started.code,
        asking,
        show,
    )
    .await
}

/// `arbor resume`: as [`run`] does after the first stop, from the first resume on.
pub(crate) async fn resume(args: ResumeArgs) -> Result<u8, Fail> {
    let asking = can_ask(args.no_input);
    let resumed = crate::resume::resume(&args, asking).await?;
    let show = Show {
        json: args.store.json,
        quiet: false,
        progress: crate::live::Progress::Auto,
    };
    go_on(
        &resumed.store,
        resumed.choice.name(),
        resumed.root,
        resumed.code,
        asking,
        show,
    )
    .await
}

/// How the runs after an answer show themselves.
#[derive(Debug, Clone, Copy)]
struct Show {
    json: bool,
    quiet: bool,
    progress: crate::live::Progress,
}

/// While the tree under `root` waits for approval and a person can answer: asks, then
/// resumes; the last exit code.
async fn go_on(
    store: &std::sync::Arc<dyn arbor_store::Store>,
    store_name: &crate::store::StoreName,
    root: SessionId,
    mut code: u8,
    asking: bool,
    show: Show,
) -> Result<u8, Fail> {
    while asking && code == EXIT_SUSPENDED {
        if decide_waiting(store.as_ref(), root).await? == Answered::Later {
            // As without a terminal: what waits, and the commands that decide it.
            for s in approvals::waiting_at(store.as_ref(), root).await? {
                output::out(&report::suspension_text(root, &s));
            }
            break;
        }
        let view = View {
            store,
            store_name,
            json: show.json,
            quiet: show.quiet,
            asking,
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
    let waiting = approvals::waiting_at(store, root).await?;
    let total: usize = waiting.iter().map(|s| s.pending.len()).sum();
    if total == 0 {
        return Ok(Answered::AllDecided);
    }
    output::err(&format!(
        "\n{total} call(s) wait for your approval (Ctrl-C leaves them waiting: arbor approvals)"
    ));
    let mut asked = 0;
    let mut complete = true;
    for s in &waiting {
        let mut decisions = Vec::new();
        for p in &s.pending {
            asked += 1;
            output::err(&describe(asked, total, p));
            match ask_one().await? {
                Choice::Decide(verdict, reason) => decisions.push(ApprovalDecision {
                    id: p.id.clone(),
                    verdict,
                    reason,
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

/// The question about one call.
fn describe(n: usize, total: usize, p: &PendingDecision) -> String {
    let path = if p.path.is_empty() {
        "root".to_owned()
    } else {
        p.path.join(" > ")
    };
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
            let reason = read_line().await?.unwrap_or_default();
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
    approval::decide(store, s.run_id, s.version, decisions)
        .await
        .map_err(|e| {
            Fail::usage(format!(
                "{e} (decided elsewhere meanwhile? see arbor approvals {})",
                crate::resolve::short(root)
            ))
        })?;
    Ok(())
}
