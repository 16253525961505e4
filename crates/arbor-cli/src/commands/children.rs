//! `arbor send` and `arbor rm`: acting on a retained child after the run that made it ended.
//!
//! `send` rebuilds the tree's agents from the definition kept in its root record (never from
//! the file on disk, which may have changed since), takes over the tree (its root records
//! this process as the owner), delivers the message, and waits until the child's follow-up
//! run and whatever it set off are done; then prints what the child sent its parent.

use arbor_core::registry;
use arbor_core::supervisor::Sender;
use arbor_protocol::{EntryKind, SessionId, SessionStatus};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::cli::{RenameArgs, RmArgs, SendArgs};
use crate::fail::{EXIT_RUN, Fail};
use crate::interrupt::Watch;
use crate::owner::delete_stored;
use crate::store::open;
use crate::{owner, render::output, resolve, spec, tree};

/// What the background process of `send --no-wait` prints once the message is delivered.
const RECEIPT: &str = "queued";

/// `arbor send SESSION NAME TEXT`.
pub(crate) async fn send(mut args: SendArgs) -> Result<u8, Fail> {
    if args.text == "-" {
        args.text = crate::input::read_stdin("send TEXT -")?;
    }
    let store = open(&args.store).await?;
    let parent = resolve::session(store.as_ref(), &args.session).await?;
    let parent_record = registry::session(store.as_ref(), parent)
        .await
        .map_err(Fail::core)?;
    let selector = resolve::child(store.as_ref(), parent, &args.name, false).await?;
    let child = registry::find_child(store.as_ref(), parent, &selector)
        .await
        .map_err(Fail::core)?;
    if args.no_wait {
        drop(store);
        return tokio::task::spawn_blocking(move || in_background(&args, parent, &child))
            .await
            .map_err(|e| Fail::usage(format!("cannot start the background process: {e}")))?;
    }
    let root = registry::session(store.as_ref(), parent_record.root_id)
        .await
        .map_err(Fail::core)?;
    let Some(spec) = spec::Spec::from_definition(&root.meta["definition"]).map_err(Fail::usage)?
    else {
        return Err(Fail::usage(format!(
            "session {} keeps no definition to rebuild its agents from",
            root.id
        )));
    };
    let token = CancellationToken::new();
    let built = tree::build(&spec, store.clone(), token.clone())
        .await
        .map_err(Fail::core)?;
    let Some(sup) = built.supervisor else {
        return Err(Fail::usage(format!(
            "the tree of {} has no children",
            root.id
        )));
    };
    // This process runs the tree's sessions now (refused while another live one does).
    let _lease = owner::take_over(&store, &root, &token).await?;

    let before = store
        .transcript(parent, 0, None)
        .await
        .map_err(|e| Fail::store(e.to_string()))?
        .last()
        .map_or(0, |e| e.seq);
    let child_before = last_seq(&store, child.id).await?;
    let receipt = sup
        .send_message(Sender::Host, child.id, &args.text)
        .await
        .map_err(Fail::core)?;
    if args.receipt {
        output::out(&format!("{RECEIPT} {}", receipt.id));
    }
    let no_mail = arbor_core::inbox::Inbox::new();
    // Ctrl-C, SIGTERM or SIGHUP cancel the follow-up; a second signal exits at once.
    let signals = Watch::start(token.clone(), false);
    tokio::select! {
        () = sup.wait_for_mail_or_quiet(&no_mail) => {}
        () = token.cancelled() => {}
    }
    sup.shutdown().await;
    built.mcp.close().await;
    signals.finish();

    let replies = replies_from(&store, parent, child.id, before).await?;
    let answer = answer_after(&store, child.id, child_before).await?;
    let after = registry::session(store.as_ref(), child.id)
        .await
        .map_err(Fail::core)?;
    if args.store.json {
        output::out(
            &json!({
                "message_id": receipt.id,
                "child": registry::SessionView::of(&after),
                "replies": replies,
                "answer": answer,
            })
            .to_string(),
        );
    } else {
        for text in &replies {
            output::out(&format!("{}: {text}", after.name));
        }
        // A child that answers its follow-up without a message: its answer is the reply.
        if let (true, Some(text)) = (replies.is_empty(), &answer) {
            output::out(&format!("{}: {text}", after.name));
        }
        output::err(&format!(
            "{}: follow-up run {} ({} tokens own, {} aggregate)",
            after.name,
            after.status,
            after.own_usage.total_tokens,
            after.aggregate_usage().total_tokens
        ));
    }
    Ok(match after.status {
        SessionStatus::Succeeded => 0,
        SessionStatus::Aborted => signals.aborted_code(EXIT_RUN),
        _ => EXIT_RUN,
    })
}

/// `send --no-wait`: the same `send` in a background process (its own process group, so a
/// Ctrl-C here does not reach it), which says on its stdout when the message is delivered;
/// returns then. A background process that fails before that has its error passed on.
fn in_background(
    args: &SendArgs,
    parent: SessionId,
    child: &arbor_store::SessionRecord,
) -> Result<u8, Fail> {
    use std::io::{BufRead, Read};
    let exe = std::env::current_exe()
        .map_err(|e| Fail::usage(format!("cannot find the arbor binary: {e}")))?;
    let mut command = std::process::Command::new(exe);
    command.arg("send").arg("--receipt");
    if let Some(store) = &args.store.store {
        if crate::store::is_postgres_url(&store.to_string_lossy()) {
            // A URL may carry a password: the environment, not a command line others can read.
            command.env(crate::store::STORE_URL_ENV, store);
        } else {
            command.arg("--store").arg(store);
        }
    }
    // The text goes on standard input, never on a command line other users can read.
    command
        .arg("--")
        .arg(parent.to_string())
        .arg(child.id.to_string())
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut process = command
        .spawn()
        .map_err(|e| Fail::usage(format!("cannot start the background process: {e}")))?;
    if let Some(mut stdin) = process.stdin.take() {
        use std::io::Write;
        // Closed when dropped: the background process reads to its end.
        let _ = stdin.write_all(args.text.as_bytes());
    }
    // Its stderr is read on a thread of its own, so that a chatty background process never
    // blocks on a full pipe before it says the message is delivered.
    let stderr = process.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = (&mut e).take(64 * 1024).read_to_string(&mut text);
            // Drained to its end: the process never blocks writing it.
            let _ = std::io::copy(&mut e, &mut std::io::sink());
            text
        })
    });
    let Some(stdout) = process.stdout.take() else {
        return Err(Fail::usage("the background process has no stdout"));
    };
    let mut line = String::new();
    let _ = std::io::BufReader::new(stdout).read_line(&mut line);
    if let Some(message) = line.trim().strip_prefix(RECEIPT) {
        let message = message.trim();
        if args.store.json {
            output::out(
                &json!({"message_id": message, "child_id": child.id, "name": child.name,
                        "pid": process.id(), "waiting": false})
                .to_string(),
            );
        } else {
            output::out(&format!(
                "queued {message} for {} ({}); its follow-up runs in the background (pid {}): \
                 arbor tree {}",
                child.name,
                crate::resolve::short(child.id),
                process.id(),
                crate::resolve::short(child.root_id)
            ));
        }
        // The background process goes on alone; its output is no longer read.
        return Ok(0);
    }
    // It stopped before the message was delivered: its error is the answer.
    let err = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    let status = process
        .wait()
        .map_err(|e| Fail::usage(format!("the background process: {e}")))?;
    let text = err
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or(err.trim());
    Err(Fail {
        code: status
            .code()
            .map_or(crate::fail::EXIT_RUN, |c| u8::try_from(c).unwrap_or(1)),
        message: if text.is_empty() {
            format!("the background process ended ({status}) before the message was delivered")
        } else {
            text.to_owned()
        },
        source: None,
    })
}

/// The sequence number of the last entry of `id`'s transcript (0 for none).
async fn last_seq(
    store: &std::sync::Arc<dyn arbor_store::Store>,
    id: SessionId,
) -> Result<u64, Fail> {
    let mut after = 0;
    loop {
        let page = store
            .transcript(id, after, Some(512))
            .await
            .map_err(|e| Fail::store(e.to_string()))?;
        match page.last() {
            Some(e) => after = e.seq,
            None => return Ok(after),
        }
    }
}

/// The last text `id`'s model answered with after entry `after` (its follow-up's answer).
async fn answer_after(
    store: &std::sync::Arc<dyn arbor_store::Store>,
    id: SessionId,
    after: u64,
) -> Result<Option<String>, Fail> {
    Ok(store
        .transcript(id, after, None)
        .await
        .map_err(|e| Fail::store(e.to_string()))?
        .into_iter()
        .rev()
        .find_map(|e| match e.kind {
            EntryKind::Message {
                message: arbor_protocol::Message::Assistant { content, .. },
            } if !content.trim().is_empty() => Some(content),
            _ => None,
        }))
}

/// The texts `child` delivered to `parent` after entry `after`.
async fn replies_from(
    store: &std::sync::Arc<dyn arbor_store::Store>,
    parent: SessionId,
    child: SessionId,
    after: u64,
) -> Result<Vec<String>, Fail> {
    Ok(store
        .transcript(parent, after, None)
        .await
        .map_err(|e| Fail::store(e.to_string()))?
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::InboxReceived { message } if message.from == Some(child) => {
                Some(message.text)
            }
            _ => None,
        })
        .collect())
}

/// `arbor rm SESSION NAME`.
pub(crate) async fn rm(args: RmArgs) -> Result<u8, Fail> {
    let store = open(&args.store).await?;
    let parent = resolve::session(store.as_ref(), &args.session).await?;
    let by = format!(
        "user:{}",
        std::env::var("USER").unwrap_or_else(|_| "local".into())
    );
    // Never delete under a live run of another process: it would finish the child anyway.
    let parent_record = registry::session(store.as_ref(), parent)
        .await
        .map_err(Fail::core)?;
    let root = registry::session(store.as_ref(), parent_record.root_id)
        .await
        .map_err(Fail::core)?;
    let selector = resolve::child(store.as_ref(), parent, &args.name, true).await?;
    let deleted = delete_stored(&store, &root, parent, &selector, &by, &args.reason).await?;
    let (id, tombstone) = (deleted.session_id, &deleted.tombstone);
    if args.store.json {
        output::out(
            &json!({"session_id": id, "tombstone": tombstone, "already_deleted": deleted.already,
                "stopped": deleted.stopped})
            .to_string(),
        );
    } else if deleted.already {
        output::out(&format!("{id} was already deleted ({})", tombstone.reason));
    } else {
        output::out(&format!(
            "deleted {id} ({}, {} tokens); its transcript stays: arbor log {id}",
            tombstone.final_status, tombstone.usage.total_tokens
        ));
        for s in &deleted.stopped {
            output::out(&format!(
                "  stopped {} {} (depth {}, was {})",
                s.session_id, s.name, s.depth, s.was
            ));
        }
    }
    Ok(0)
}

/// `arbor rename SESSION NAME NEW`.
pub(crate) async fn rename(args: RenameArgs) -> Result<u8, Fail> {
    let store = open(&args.store).await?;
    let parent = resolve::session(store.as_ref(), &args.session).await?;
    let by = format!(
        "user:{}",
        std::env::var("USER").unwrap_or_else(|_| "local".into())
    );
    let selector = resolve::child(store.as_ref(), parent, &args.name, false).await?;
    let renamed = registry::rename_child(store.as_ref(), parent, &selector, &args.new_name, &by)
        .await
        .map_err(Fail::core)?;
    if args.store.json {
        output::out(
            &json!({"session_id": renamed.session_id, "from": renamed.from, "name": renamed.to})
                .to_string(),
        );
    } else {
        output::out(&format!(
            "renamed {} ({}) to {}",
            renamed.from, renamed.session_id, renamed.to
        ));
    }
    Ok(0)
}
