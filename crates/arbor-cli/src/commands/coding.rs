//! `arbor diff`, `arbor merge` and `arbor discard`: a person acting on a coding child's work
//! from the terminal. The child is named by its session (id, prefix, short id); the tree's
//! `[workspace]` comes from the definition its root record keeps (never the file on disk).
//! Running `arbor merge` is the approval: nothing else is asked.

use arbor_coding::child_work::{diff_json, discarded_json, merged_json};
use arbor_coding::{ChildWork, Merged, Strategy};
use arbor_core::registry;
use serde_json::Value;

use crate::cli::{ChildArgs, DiffArgs, MergeArgs};
use crate::fail::{EXIT_RUN, Fail};
use crate::render::output;
use crate::store::open;
use crate::{resolve, spec, tree};

/// The tree's coding children's work, the child's root (its record) and the child's id.
async fn work_of(
    args: &ChildArgs,
) -> Result<(ChildWork, arbor_store::SessionRecord, String), Fail> {
    let store = open(&args.store).await?;
    let child = resolve::session(store.as_ref(), &args.child).await?;
    let record = registry::session(store.as_ref(), child)
        .await
        .map_err(Fail::core)?;
    if record.parent_id.is_none() {
        return Err(Fail::usage(format!(
            "session {child} is a root: name one of its coding children (see arbor tree)"
        )));
    }
    let root = registry::session(store.as_ref(), record.root_id)
        .await
        .map_err(Fail::core)?;
    let Some(spec) = spec::Spec::from_definition(&root.meta["definition"]).map_err(Fail::usage)?
    else {
        return Err(Fail::usage(format!(
            "session {} keeps no definition to find its repository in",
            root.id
        )));
    };
    let Some(work) = tree::child_work(&spec, store).map_err(Fail::core)? else {
        return Err(Fail::usage(format!(
            "the tree of {} has no coding children (no [workspace] agent)",
            root.id
        )));
    };
    Ok((work, root, child.to_string()))
}

fn files_text(v: &Value) -> Vec<String> {
    let mut lines: Vec<String> = v["files"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            let n = |k: &str| f[k].as_u64().map_or("-".to_owned(), |n| n.to_string());
            format!(
                "  {} +{} -{}",
                output::inert(f["path"].as_str().unwrap_or_default()),
                n("added"),
                n("removed")
            )
        })
        .collect();
    let (shown, total) = (lines.len(), v["files_total"].as_u64().unwrap_or(0));
    if (shown as u64) < total {
        lines.push(format!("  … {} more", total - shown as u64));
    }
    lines
}

/// A patch or hunks, line by line, with every control character shown inert (a file's
/// content cannot draw on the terminal either).
fn inert_lines(text: &str) -> String {
    text.trim_end_matches('\n')
        .split('\n')
        .map(output::inert)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `arbor diff CHILD`.
pub(crate) async fn diff(args: DiffArgs) -> Result<u8, Fail> {
    let (work, root, child) = work_of(&args.child).await?;
    let (found, diff) = work
        .diff(root.id, &child, args.offset, args.max_bytes)
        .await
        .map_err(Fail::core)?;
    let v = diff_json(&found, &diff);
    if args.child.store.json {
        output::out(&v.to_string());
        return Ok(0);
    }
    output::out(&format!(
        "{} ({}) at {}: {} files, +{} -{}",
        found.name, diff.branch, diff.tip, v["files_total"], v["added"], v["removed"]
    ));
    for line in files_text(&v) {
        output::out(&line);
    }
    if !diff.patch.is_empty() {
        output::out("");
        output::out(&inert_lines(&diff.patch));
    }
    if let Some(next) = diff.next_offset {
        output::err(&format!(
            "the patch goes on: arbor diff {} --offset {next}",
            args.child.child
        ));
    }
    Ok(0)
}

/// `arbor merge CHILD [--squash | --ff]`.
pub(crate) async fn merge(args: MergeArgs) -> Result<u8, Fail> {
    let (work, root, child) = work_of(&args.child).await?;
    let root = root.id;
    let strategy = if args.squash {
        Some(Strategy::Squash)
    } else if args.ff {
        Some(Strategy::FastForward)
    } else {
        Some(Strategy::Merge)
    };
    // The person at the terminal chose the strategy: the spec's list binds the model only.
    let work = work.strategies(&[strategy.unwrap_or(Strategy::Merge)]);
    let (found, merged) = work
        .merge(root, &child, strategy, args.expect_tip.as_deref())
        .await
        .map_err(Fail::core)?;
    let v = merged_json(&found, &merged);
    if args.child.store.json {
        output::out(&v.to_string());
    } else {
        match &merged {
            Merged::Done { commit, .. } => {
                output::out(&format!(
                    "merged {} into the main checkout: {commit} ({} files, +{} -{})",
                    found.name, v["files_total"], v["added"], v["removed"]
                ));
                for line in files_text(&v) {
                    output::out(&line);
                }
            }
            Merged::AlreadyMerged { commit } => output::out(&format!(
                "{} was merged already: the checkout is at {commit}, nothing changed",
                found.name
            )),
            Merged::Conflicts(conflicts) => {
                output::out(&format!(
                    "{} conflicts with the main checkout in {} files (nothing changed):",
                    found.name,
                    conflicts.len()
                ));
                for c in conflicts {
                    output::out(&format!("  {}", output::inert(&c.path)));
                }
                output::out("");
                for c in conflicts {
                    output::out(&format!("--- {}", output::inert(&c.path)));
                    output::out(&inert_lines(&c.hunks));
                }
            }
            _ => output::out(&v.to_string()),
        }
    }
    Ok(if matches!(merged, Merged::Conflicts(_)) {
        EXIT_RUN
    } else {
        0
    })
}

/// `arbor discard CHILD`.
pub(crate) async fn discard(args: ChildArgs) -> Result<u8, Fail> {
    let (work, root, child) = work_of(&args).await?;
    // Never under a live run of another process: a message could wake the child there.
    crate::owner::not_run_elsewhere(&root)?;
    let (found, gone) = work.discard(root.id, &child).await.map_err(Fail::core)?;
    if args.store.json {
        output::out(&discarded_json(&found, &gone).to_string());
        return Ok(0);
    }
    let what: Vec<String> = gone
        .branch
        .iter()
        .map(|b| format!("branch {b}"))
        .chain(
            gone.worktree
                .iter()
                .map(|w| format!("worktree {}", w.display())),
        )
        .collect();
    output::out(&if what.is_empty() {
        format!("{}: nothing was left to discard", found.name)
    } else {
        format!("discarded {}: {}", found.name, what.join(", "))
    });
    Ok(0)
}
