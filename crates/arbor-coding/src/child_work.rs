//! A parent's hold on its coding children's work: [`ChildWork`] finds a child by the name or
//! session id its parent knows it by (family-scoped: anything else answers as an unknown
//! child), and shows its change ([`ChildWork::diff`]), merges it into the main checkout
//! ([`ChildWork::merge`]) or throws it away ([`ChildWork::discard`]). The model reaches the
//! same through three tools ([`ChildWork::tools`]):
//!
//! - `diff_child`: the child's files with their lines added and removed, and its patch by
//!   pages (at most [`MAX_PAGE_BYTES`] a page);
//! - `merge_child`: always waits for a person's decision ([`DynTool::requires_approval`]);
//!   the person sees the change's files and lines ([`DynTool::review`]) and, once approved,
//!   exactly that commit is merged (a branch that moved since is refused); recorded as an
//!   idempotent effect, so a resume never merges twice; a conflict comes back by file with
//!   its hunks and the checkout untouched;
//! - `discard_child`: its worktree and branch go (its transcript stays).
//!
//! A child still running, queued, waiting for a decision or cut off by a crash is neither
//! merged nor discarded: its work is not done (it goes on in its worktree when resumed).
//!
//! A host that stands in for the parent (an MCP client driving a root) gets the same tools
//! without the approval ([`ChildWork::host_tool`]): it is the approver, as a person calling
//! `/v1` or the CLI is.

use std::sync::Arc;

use arbor_core::tool::effect::ToolEffect;
use arbor_core::{CoreError, CoreResult, DynTool, ToolContext, ToolError, registry};
use arbor_model::ToolSpec;
use arbor_protocol::{SessionId, SessionStatus};
use arbor_store::Store;
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::error::{CodingError, CodingErrorKind};
use crate::merge::{Diff, Discarded, FileChange, Merged, Strategy};
use crate::workspace::Worktrees;

/// The names of the tools [`ChildWork::tools`] makes.
pub const CHILD_WORK_TOOL_NAMES: [&str; 3] = ["diff_child", "merge_child", "discard_child"];
/// The largest page of a patch one call returns, in bytes.
pub const MAX_PAGE_BYTES: usize = 64 * 1024;
/// A page's size when the call names none, in bytes.
pub const DEFAULT_PAGE_BYTES: usize = 16 * 1024;
/// The most files listed (the totals count them all).
pub const MAX_FILES: usize = 200;

/// A child found for its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Its session.
    pub session_id: SessionId,
    /// Its name.
    pub name: String,
    /// Its delegation, which names its worktree and branch.
    pub delegation_id: String,
    /// Its status now.
    pub status: SessionStatus,
}

/// The coding children's work of one tree: their worktrees and the store their records are
/// in. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ChildWork {
    worktrees: Arc<Worktrees>,
    store: Arc<dyn Store>,
    strategies: Arc<[Strategy]>,
}

impl ChildWork {
    /// The work of the children made by `worktrees`, whose records are in `store`; merged
    /// with a merge commit unless [`ChildWork::strategies`] says otherwise.
    pub fn new(worktrees: Arc<Worktrees>, store: Arc<dyn Store>) -> Self {
        Self {
            worktrees,
            store,
            strategies: Arc::new([Strategy::Merge]),
        }
    }

    /// The strategies a merge may use, the first the default (an empty list keeps the
    /// default).
    #[must_use]
    pub fn strategies(mut self, strategies: &[Strategy]) -> Self {
        if !strategies.is_empty() {
            self.strategies = strategies.into();
        }
        self
    }

    /// The strategies allowed, the default first.
    pub fn allowed(&self) -> &[Strategy] {
        &self.strategies
    }

    /// The descendant of `parent` that `child` names (a direct child by name or session id,
    /// a deeper one by session id). Anything else is the unknown-child error.
    pub async fn locate(&self, parent: SessionId, child: &str) -> CoreResult<Located> {
        let record = registry::find_descendant(self.store.as_ref(), parent, child).await?;
        let Some(delegation_id) = record.meta["delegation_id"].as_str() else {
            return Err(CoreError::Conflict(format!(
                "{:?} was not delegated: it has no branch",
                record.name
            )));
        };
        Ok(Located {
            session_id: record.id,
            name: record.name.clone(),
            delegation_id: delegation_id.to_owned(),
            status: record.status,
        })
    }

    /// What `child` changes against the main checkout now, with a page of its patch.
    pub async fn diff(
        &self,
        parent: SessionId,
        child: &str,
        offset: usize,
        max_bytes: usize,
    ) -> CoreResult<(Located, Diff)> {
        if max_bytes == 0 || max_bytes > MAX_PAGE_BYTES {
            return Err(CoreError::invalid(
                "max_bytes",
                format!("max_bytes must be 1 to {MAX_PAGE_BYTES}"),
            ));
        }
        let found = self.locate(parent, child).await?;
        let diff = self
            .worktrees
            .diff(&found.delegation_id, offset, max_bytes)
            .await
            .map_err(core)?;
        Ok((found, diff))
    }

    /// Merges `child`'s branch into the main checkout with `strategy` (default: the first
    /// allowed), only while it is still at `expected` when one is given.
    pub async fn merge(
        &self,
        parent: SessionId,
        child: &str,
        strategy: Option<Strategy>,
        expected: Option<&str>,
    ) -> CoreResult<(Located, Merged)> {
        let strategy = self.strategy(strategy)?;
        let found = self.settled(parent, child, "merged").await?;
        let merged = self
            .worktrees
            .merge_expecting(&found.delegation_id, strategy, expected)
            .await
            .map_err(core)?;
        Ok((found, merged))
    }

    /// Throws `child`'s worktree and branch away.
    pub async fn discard(
        &self,
        parent: SessionId,
        child: &str,
    ) -> CoreResult<(Located, Discarded)> {
        let found = self.settled(parent, child, "discarded").await?;
        let gone = self
            .worktrees
            .discard(&found.delegation_id)
            .await
            .map_err(core)?;
        Ok((found, gone))
    }

    /// The strategy asked for (or the default), if allowed.
    pub fn strategy(&self, asked: Option<Strategy>) -> CoreResult<Strategy> {
        let Some(s) = asked else {
            return Ok(self.strategies[0]);
        };
        if self.strategies.contains(&s) {
            return Ok(s);
        }
        Err(CoreError::invalid(
            "strategy",
            format!(
                "strategy {:?} is not allowed here (allowed: {})",
                s.as_str(),
                self.names().join(", ")
            ),
        ))
    }

    fn names(&self) -> Vec<&'static str> {
        self.strategies.iter().map(|s| s.as_str()).collect()
    }

    /// The child, refused while it still runs.
    async fn settled(&self, parent: SessionId, child: &str, what: &str) -> CoreResult<Located> {
        let found = self.locate(parent, child).await?;
        if matches!(
            found.status,
            SessionStatus::Running
                | SessionStatus::Queued
                | SessionStatus::Suspended
                | SessionStatus::Interrupted
        ) {
            return Err(CoreError::Conflict(format!(
                "child {:?} is not done ({}): its work is {what} once it has finished",
                found.name,
                status_word(found.status)
            )));
        }
        Ok(found)
    }

    /// The model-facing tools: `diff_child`, `merge_child`, `discard_child`.
    pub fn tools(&self) -> Vec<Arc<dyn DynTool>> {
        CHILD_WORK_TOOL_NAMES
            .iter()
            .filter_map(|n| self.tool(n))
            .collect()
    }

    /// One of [`CHILD_WORK_TOOL_NAMES`], by name, for an agent: its `merge_child` waits
    /// for a person.
    pub fn tool(&self, name: &str) -> Option<Arc<dyn DynTool>> {
        self.make(name, false)
    }

    /// The same for a host standing in for the parent (an MCP client): it is the approver,
    /// so its `merge_child` merges at once (what the branch holds when it runs).
    pub fn host_tool(&self, name: &str) -> Option<Arc<dyn DynTool>> {
        self.make(name, true)
    }

    fn make(&self, name: &str, host: bool) -> Option<Arc<dyn DynTool>> {
        let kind = match name {
            "diff_child" => Kind::Diff,
            "merge_child" => Kind::Merge,
            "discard_child" => Kind::Discard,
            _ => return None,
        };
        Some(Arc::new(WorkTool {
            spec: spec(kind, &self.names(), host),
            kind,
            host,
            work: self.clone(),
        }))
    }
}

fn status_word(s: SessionStatus) -> &'static str {
    match s {
        SessionStatus::Running => "running",
        SessionStatus::Queued => "queued",
        SessionStatus::Suspended => "waiting for a decision",
        SessionStatus::Interrupted => "cut off by a crash: resume it first",
        _ => "not finished",
    }
}

/// A coding error as the runtime's: the state of a repository (a dirty checkout, a moved
/// branch, no branch) is a conflict the caller can act on.
fn core(e: CodingError) -> CoreError {
    match e.kind() {
        CodingErrorKind::Repository | CodingErrorKind::Dirty => CoreError::Conflict(e.to_string()),
        _ => e.into(),
    }
}

/// The files of a change as JSON (at most [`MAX_FILES`]) with its totals.
pub fn files_json(files: &[FileChange]) -> Value {
    let shown: Vec<Value> = files
        .iter()
        .take(MAX_FILES)
        .map(|f| json!({"path": f.path, "added": f.added, "removed": f.removed}))
        .collect();
    json!({
        "files": shown,
        "files_total": files.len(),
        "added": files.iter().filter_map(|f| f.added).sum::<u64>(),
        "removed": files.iter().filter_map(|f| f.removed).sum::<u64>(),
    })
}

/// A diff as JSON.
pub fn diff_json(found: &Located, diff: &Diff) -> Value {
    let mut v = files_json(&diff.files);
    let more = json!({
        "child": found.name,
        "session_id": found.session_id,
        "branch": diff.branch,
        "tip": diff.tip,
        "base": diff.base,
        "patch": diff.patch,
        "next_offset": diff.next_offset,
        "total_bytes": diff.total_bytes,
    });
    merge_objects(&mut v, more);
    v
}

/// How a merge ended, as JSON.
pub fn merged_json(found: &Located, merged: &Merged) -> Value {
    let mut v = match merged {
        Merged::Done {
            commit,
            strategy,
            files,
        } => {
            let mut v = files_json(files);
            merge_objects(
                &mut v,
                json!({"merged": true, "commit": commit, "strategy": strategy.as_str()}),
            );
            v
        }
        Merged::AlreadyMerged { commit } => {
            json!({"merged": true, "already_merged": true, "commit": commit})
        }
        Merged::Conflicts(conflicts) => json!({
            "merged": false,
            "conflicts": conflicts
                .iter()
                .map(|c| json!({"path": c.path, "hunks": c.hunks}))
                .collect::<Vec<_>>(),
            "hint": "nothing was changed: resolve the conflicts (or have a child resolve them on \
                     its branch) and merge again, or discard the child's work",
        }),
    };
    merge_objects(
        &mut v,
        json!({"child": found.name, "session_id": found.session_id}),
    );
    v
}

/// What a discard removed, as JSON.
pub fn discarded_json(found: &Located, gone: &Discarded) -> Value {
    json!({
        "child": found.name,
        "session_id": found.session_id,
        "discarded": true,
        "branch": gone.branch,
        "worktree": gone.worktree,
    })
}

fn merge_objects(into: &mut Value, from: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Diff,
    Merge,
    Discard,
}

fn spec(kind: Kind, strategies: &[&str], host: bool) -> ToolSpec {
    let merge_says = if host {
        "Merge a finished coding child's branch into the main checkout, now (you are the \
         approver). On a conflict nothing changes and the conflicting files come back with \
         their hunks."
    } else {
        "Merge a finished coding child's branch into the main checkout. A person approves each \
         merge first. On a conflict nothing changes and the conflicting files come back with \
         their hunks."
    };
    let child = json!({"type": "string", "description": "Your child's name or session id (a deeper descendant: its session id)."});
    match kind {
        Kind::Diff => ToolSpec {
            name: "diff_child".to_owned(),
            description: "What a coding child's branch changes against the main checkout now \
                          (from their merge base): its files with lines added and removed, and \
                          its patch by pages (pass next_offset as offset for the next)."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "child": child,
                    "offset": {"type": "integer", "minimum": 0, "description": "Bytes of the patch already read (default 0)."},
                    "max_bytes": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_BYTES, "description": "Bytes of patch at most (default 16384)."},
                },
                "required": ["child"],
                "additionalProperties": false
            }),
        },
        Kind::Merge => ToolSpec {
            name: "merge_child".to_owned(),
            description: merge_says.to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "child": child,
                    "strategy": {"type": "string", "enum": strategies, "description": format!("How (default {:?}).", strategies.first().copied().unwrap_or("merge"))},
                },
                "required": ["child"],
                "additionalProperties": false
            }),
        },
        Kind::Discard => ToolSpec {
            name: "discard_child".to_owned(),
            description: "Throw a finished coding child's work away: its worktree and branch go \
                          (its transcript stays)."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {"child": child},
                "required": ["child"],
                "additionalProperties": false
            }),
        },
    }
}

/// One of the three tools.
#[derive(Debug)]
struct WorkTool {
    spec: ToolSpec,
    kind: Kind,
    /// A host's: no approval (the host is the approver).
    host: bool,
    work: ChildWork,
}

/// The arguments every call has, read by hand (the spec's schema says the same).
struct Args {
    child: String,
    offset: usize,
    max_bytes: usize,
    strategy: Option<Strategy>,
}

fn parse(kind: Kind, arguments: &Value) -> Result<Args, String> {
    let Some(obj) = arguments.as_object() else {
        return Err("arguments must be an object".to_owned());
    };
    let allowed: &[&str] = match kind {
        Kind::Diff => &["child", "offset", "max_bytes"],
        Kind::Merge => &["child", "strategy"],
        Kind::Discard => &["child"],
    };
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!(
            "unknown field {k:?} (expected: {})",
            allowed.join(", ")
        ));
    }
    let child = match obj.get("child") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => return Err("field child: a child's name or session id is required".to_owned()),
    };
    let number = |key: &str, default: usize| -> Result<usize, String> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| format!("field {key}: a non-negative integer is required")),
        }
    };
    let strategy = match obj.get("strategy") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            Some(Strategy::parse(s).map_err(|e| format!("field strategy: {e}"))?)
        }
        Some(_) => return Err("field strategy: a string is required".to_owned()),
    };
    Ok(Args {
        child,
        offset: number("offset", 0)?,
        max_bytes: number("max_bytes", DEFAULT_PAGE_BYTES)?,
        strategy,
    })
}

#[async_trait]
impl DynTool for WorkTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn exclusive(&self) -> bool {
        // A merge and a discard change the repository: one at a time within a turn.
        self.kind != Kind::Diff
    }

    fn effect(&self) -> ToolEffect {
        match self.kind {
            Kind::Diff => ToolEffect::None,
            Kind::Merge => ToolEffect::Idempotent,
            Kind::Discard => ToolEffect::External,
        }
    }

    fn requires_approval(&self) -> bool {
        self.kind == Kind::Merge && !self.host
    }

    async fn review(&self, arguments: &Value, ctx: &ToolContext) -> Option<Value> {
        if self.kind != Kind::Merge {
            return None;
        }
        let args = parse(self.kind, arguments).ok()?;
        let strategy = self.work.strategy(args.strategy).ok()?;
        match self.work.diff(ctx.session.id, &args.child, 0, 1).await {
            Ok((found, diff)) => {
                let mut v = files_json(&diff.files);
                merge_objects(
                    &mut v,
                    json!({
                        "summary": format!(
                            "merge {} ({}) into the main checkout by {}: {} files, +{} -{}",
                            found.name,
                            diff.branch,
                            strategy.as_str(),
                            diff.files.len(),
                            diff.files.iter().filter_map(|f| f.added).sum::<u64>(),
                            diff.files.iter().filter_map(|f| f.removed).sum::<u64>(),
                        ),
                        "child": found.name,
                        "session_id": found.session_id,
                        "branch": diff.branch,
                        "tip": diff.tip,
                        "strategy": strategy.as_str(),
                    }),
                );
                Some(v)
            }
            // Shown as it is: the person sees why, and the call, if approved, merges
            // nothing (what it would merge was never shown).
            Err(e) => Some(json!({
                "summary": format!("cannot show the change of {:?}: {e}", args.child),
                "error": e.to_string(),
            })),
        }
    }

    async fn call_json(&self, arguments: Value, ctx: ToolContext) -> Result<String, ToolError> {
        let args = parse(self.kind, &arguments).map_err(ToolError::ToModel)?;
        let parent = ctx.session.id;
        let to_model = |e: CoreError| ToolError::ToModel(e.to_string());
        let out = match self.kind {
            Kind::Diff => {
                let (found, diff) = self
                    .work
                    .diff(parent, &args.child, args.offset, args.max_bytes)
                    .await
                    .map_err(to_model)?;
                diff_json(&found, &diff)
            }
            Kind::Merge => {
                // What the person approved is what is merged.
                let approved = arbor_core::approval::review::review(
                    self.work.store.as_ref(),
                    ctx.run_id,
                    &ctx.call_id,
                )
                .await
                .map_err(|e| ToolError::Fatal(e.to_string()))?;
                // A call held for a person has a review; without its commit (the change
                // could not be shown) nothing is merged. A host's call (never held) has none.
                let tip = match &approved {
                    Some(r) => match r["tip"].as_str() {
                        Some(t) => Some(t.to_owned()),
                        None => {
                            return Err(ToolError::ToModel(format!(
                                "nothing was merged: the change could not be shown when the \
                                 merge was asked ({}); call merge_child again",
                                r["error"].as_str().unwrap_or("no commit was read")
                            )));
                        }
                    },
                    None => None,
                };
                let (found, merged) = self
                    .work
                    .merge(parent, &args.child, args.strategy, tip.as_deref())
                    .await
                    .map_err(to_model)?;
                merged_json(&found, &merged)
            }
            Kind::Discard => {
                let (found, gone) = self
                    .work
                    .discard(parent, &args.child)
                    .await
                    .map_err(to_model)?;
                discarded_json(&found, &gone)
            }
        };
        Ok(out.to_string())
    }
}
