//! `arbor run`: read and check the spec, open the store, run the root, report.
//!
//! The order matters: the spec is read, parsed, validated and built in full before the store
//! is opened, so a bad spec exits 2 without touching stored data. The root session's record
//! keeps the definition a later process needs (`meta.definition`: the spec path as given, its
//! full text and its SHA-256 fingerprint; never environment variables or credentials).
//! A termination signal (Ctrl-C, SIGTERM, SIGHUP) cancels the run through its cancellation
//! token and the process exits with the signal's code; a second one exits at once (see
//! [`crate::interrupt`]). The tree's run itself (root, follow-ups, quiet, end) is [`follow`]'s.

use std::time::Duration;

use std::sync::Arc;

use arbor_core::Session;
use arbor_protocol::RunStatus;
use arbor_store::Store;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cli::RunArgs;
use crate::fail::{EXIT_RUN, EXIT_SUSPENDED, Fail};
use crate::interrupt::Watch;
use crate::render::progress::{self, RootProgress};
use crate::store::{StoreChoice, StoreName};
use crate::{answers, input, owner, render::output, spec, tree};

mod follow;

pub(crate) use follow::{Start, drive_tree, end_tree, run_tree, suspended_run};

/// How long the progress printers may take to drain after the run ended.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// A root run that went as far as it could without a person: its exit code, and what a
/// caller needs to go on with it ([`crate::commands::run::run`] asks about what waits and resumes).
pub(crate) struct Started {
    /// The store it runs on.
    pub(crate) store: Arc<dyn Store>,
    /// Which store that is.
    pub(crate) choice: StoreChoice,
    /// The root session.
    pub(crate) root: arbor_protocol::SessionId,
    /// The exit code so far.
    pub(crate) code: u8,
    /// This process's lease on the tree, kept while the caller goes on.
    pub(crate) _lease: owner::Heartbeat,
}

/// Runs the command; the exit code (0 succeeded, 1 the run did not, 4 it waits for
/// approval) is in what it returns. `asking`: the person at the terminal is asked next
/// (see [`View::asking`]).
pub(crate) async fn run(args: &RunArgs, asking: Option<&Held>) -> Result<Started, Fail> {
    let choice = StoreChoice::from_args(args.memory, args.store.as_deref())?;
    let (path, text) = input::read_spec(&args.spec)?;
    let overrides = Overrides::from(&args.overrides);
    let prepared = prepare(&path, &text, &overrides).await?;
    let task = input::task(&path, args.task.as_deref(), &prepared.spec.task)?;
    let store = crate::workers::open_store(&choice, args.workers, "--workers").await?;
    owner::sweep(&store).await?;
    let token = CancellationToken::new();
    let (built, session) = create_root(
        &prepared,
        &overrides,
        &store,
        &token,
        (serde_json::Value::Null, None),
    )
    .await?;
    let root = session.id();
    let lease = owner::Heartbeat::start(store.clone(), root, token.clone());
    let view = View {
        store: &store,
        store_name: choice.name(),
        json: args.json,
        quiet: args.quiet,
        asking,
        progress: args.progress,
    };
    let code = drive_root(view, &built, session, Start::Task(task), token).await?;
    Ok(Started {
        store,
        choice,
        root,
        code,
        _lease: lease,
    })
}

/// What may change a spec for one run: its repository, the root's provider and model.
#[derive(Debug, Clone, Default)]
pub(crate) struct Overrides {
    pub(crate) repository: Option<std::path::PathBuf>,
    pub(crate) provider: Option<String>,
    pub(crate) model: Option<String>,
    /// Model controls for the root agent, over its spec's (`--controls`, a request's).
    pub(crate) controls: Option<arbor_model::Controls>,
    /// The tree's pool, over the root agent's `budget` (`--max-tree-tokens`,
    /// `--max-tree-cost`, a request's `budget`), checked.
    pub(crate) budget: Option<arbor_core::budget::Budget>,
}

impl From<&crate::cli::SpecOverrides> for Overrides {
    fn from(o: &crate::cli::SpecOverrides) -> Self {
        Self {
            repository: o.repository.clone(),
            provider: o.provider.clone(),
            model: o.model.clone(),
            controls: o.controls.clone(),
            // Checked by clap (tokens) and when the run starts (cost).
            budget: (o.max_tree_tokens.is_some() || o.max_tree_cost.is_some())
                .then(|| crate::spec::BudgetSpec::new(o.max_tree_tokens, o.max_tree_cost))
                .and_then(|b| b.budget().ok()),
        }
    }
}

/// A spec read, checked and built in full, before any store is opened.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) path: String,
    pub(crate) spec: spec::Spec,
    /// The text kept with the run (secrets redacted).
    pub(crate) kept: String,
    /// The repository, absolute.
    pub(crate) repository: Option<std::path::PathBuf>,
}

/// Parses, overrides, preflights and checks a spec's text; the error is a usage error
/// naming `path`. Nothing is stored.
pub(crate) async fn prepare(
    path: &str,
    text: &str,
    overrides: &Overrides,
) -> Result<Prepared, Fail> {
    prepare_with(path, text, overrides, true).await
}

/// [`prepare`], asking the root's provider about its model only when `preflight` (`arbor
/// validate` works offline unless told otherwise).
pub(crate) async fn prepare_with(
    path: &str,
    text: &str,
    overrides: &Overrides,
    preflight: bool,
) -> Result<Prepared, Fail> {
    let mut spec = spec::Spec::parse(path, text).map_err(Fail::usage)?;
    if let Some(repository) = &overrides.repository {
        spec.set_repository(repository.clone());
    }
    if overrides.provider.is_some() || overrides.model.is_some() || overrides.controls.is_some() {
        spec.override_root(
            overrides.provider.as_deref(),
            overrides.model.as_deref(),
            overrides.controls.as_ref(),
        )
        .map_err(|e| Fail::usage(format!("{path}: {e}")))?;
    }
    if preflight {
        preflight_root(&spec).await?;
    }
    // Kept absolute with the run, so a later process (resume, send) finds it from anywhere.
    let repository = spec
        .repository()
        .map_err(|e| Fail::usage(format!("{path}: {e}")))?
        .map(|r| std::path::absolute(r).unwrap_or_else(|_| r.to_path_buf()));
    // The worktree root too: a later process (resume, send) may run from elsewhere.
    if let Some(w) = &spec.workspace
        && let Ok(abs) = std::path::absolute(&w.worktrees)
    {
        spec.set_worktrees(abs);
    }
    tree::check(&spec).map_err(|e| Fail::usage(spec::at(path, text, &e)))?;
    // An MCP server's `${VAR}` must be set now, not found missing mid-run.
    if let Some(missing) = spec.missing_variables().first() {
        return Err(Fail::usage(format!(
            "{path}: environment variable {missing} is not set"
        )));
    }

    // What is kept of the spec is redacted like everything else (its fingerprint is the
    // original's, so durable approvals resume under the same revision).
    let kept = match spec.redaction.redactor().map_err(Fail::core)? {
        Some(r) => r.redact(text).into_owned(),
        None => text.to_owned(),
    };
    if kept != text {
        spec::Spec::parse(path, &kept).map_err(|e| {
            Fail::usage(format!(
                "{path}: the spec does not parse once its secrets are redacted (keep secrets \
                 inside strings): {e}"
            ))
        })?;
    }
    Ok(Prepared {
        path: path.to_owned(),
        spec,
        kept,
        repository,
    })
}

/// Builds the tree of a prepared spec and creates its root session, its record keeping the
/// definition and the owner (and whatever `extra` adds to `meta`, such as the tenant).
pub(crate) async fn create_root(
    prepared: &Prepared,
    overrides: &Overrides,
    store: &Arc<dyn Store>,
    token: &CancellationToken,
    (extra, id): (serde_json::Value, Option<arbor_protocol::SessionId>),
) -> Result<(tree::Built, Session), Fail> {
    let spec = &prepared.spec;
    let built = tree::build(spec, store.clone(), token.clone())
        .await
        .map_err(Fail::core)?;
    let mut meta = root_meta(
        &prepared.path,
        (&prepared.kept, &spec.fingerprint),
        (
            prepared.repository.as_deref(),
            spec.workspace.as_ref().map(|w| w.worktrees.as_path()),
        ),
        (overrides.provider.as_deref(), overrides.model.as_deref()),
    );
    if let Some(c) = &overrides.controls {
        meta["definition"]["root_controls"] = serde_json::to_value(c).unwrap_or_default();
    }
    if let Some(table) = spec.price_table().filter(|t| t.currency() != "USD") {
        // What the tree's costs are in, for every report of it (USD when not kept).
        meta["definition"]["currency"] = serde_json::json!(table.currency());
    }
    if let (Some(meta), serde_json::Value::Object(extra)) = (meta.as_object_mut(), extra) {
        meta.extend(extra);
    }
    let mut builder = built.root.session().store(store.clone()).meta(meta);
    if let Some(budget) = root_budget(spec, overrides)? {
        builder = builder.budget(budget);
    }
    if let Some(output) = spec.root_output().map_err(Fail::usage)? {
        builder = builder.output_schema(output);
    }
    if let Some(id) = id {
        builder = builder.id(id);
    }
    let session = builder.create().await.map_err(Fail::core)?;
    Ok((built, session))
}

/// A report held while the person is asked (see [`View::asking`]).
pub(crate) type Held = std::sync::Mutex<Vec<String>>;

/// Where the report goes.
#[derive(Debug)]
pub(crate) struct View<'a> {
    pub(crate) store: &'a Arc<dyn Store>,
    pub(crate) store_name: &'a StoreName,
    pub(crate) json: bool,
    pub(crate) quiet: bool,
    /// The person at the terminal is asked about calls waiting for approval: a run that
    /// stops on them holds its report here instead of printing it (the questions follow,
    /// then the resumed run's report; the held one is printed if something is left for
    /// later).
    pub(crate) asking: Option<&'a Held>,
    /// How progress is shown (when not quiet).
    pub(crate) progress: crate::render::live::Progress,
}

/// Runs (or resumes) the root with progress and signal handling, runs it again on its children's
/// replies until the tree is quiet, stops what still runs, and prints the report.
pub(crate) async fn drive_root(
    view: View<'_>,
    built: &tree::Built,
    mut session: Session,
    start: Start,
    token: CancellationToken,
) -> Result<u8, Fail> {
    let store = view.store;
    let root_id = session.id();
    if let Some(sup) = &built.supervisor {
        sup.attach(&mut session);
    }

    let done = CancellationToken::new();
    let followers = start_followers(&view, built, &session, &done);
    let signals = Watch::start(token.clone(), view.quiet);
    let result = run_tree(built, &mut session, start, &token).await;
    // Nothing is left to cancel: a signal from now on exits at once.
    signals.finish();
    done.cancel();
    drain(followers, result.is_ok()).await;
    let mut result = result.map_err(Fail::core)?;
    // The run keeps the model's own text; what is shown is redacted like what is stored.
    if let Some(r) = built.root.redactor() {
        result.text = r.redact(&result.text).into_owned();
        result.error = result.error.map(|e| r.redact(&e).into_owned());
    }

    // Children nobody awaits that stopped on a call waiting for approval: the tree is not
    // done, it waits for decisions (`arbor approvals`, then `arbor resume`).
    let children_waiting = if result.status == RunStatus::Succeeded {
        answers::waiting_at(store.as_ref(), root_id).await?
    } else {
        Vec::new()
    };
    let code = match result.status {
        RunStatus::Succeeded if !children_waiting.is_empty() => EXIT_SUSPENDED,
        RunStatus::Succeeded => 0,
        RunStatus::Suspended => EXIT_SUSPENDED,
        RunStatus::Aborted => signals.aborted_code(EXIT_RUN),
        _ => EXIT_RUN,
    };
    // Walked depth first, never held whole: a tree of 65,000 sessions fits in what its
    // report prints.
    let tree = crate::render::walk::summarize(store.as_ref(), root_id, view.json).await?;
    let check = &tree.reconciliation;
    if !check.is_consistent() {
        for m in &check.mismatches {
            tracing::warn!(session = %m.session, "usage does not reconcile: {}", m.what);
        }
    }
    let breach_at = result.breach.map(|b| crate::render::run_report::BreachAt {
        origin: built.root_limits.origin(b.limit).as_str(),
        setting: built.root_limits.key(b.limit),
        described: built.root_limits.describe(b.limit),
    });
    let waiting: Vec<&arbor_core::approval::Suspension> = result
        .suspension
        .iter()
        .chain(children_waiting.iter())
        .collect();
    let reviews = crate::render::report::reviews(store.as_ref(), &waiting).await;
    let lines = crate::render::run_report::lines(
        view.json,
        view.store_name.kind(),
        breach_at.as_ref(),
        &result,
        &children_waiting,
        tree,
        &reviews,
    );
    match view.asking {
        // The person is asked next: the report is held, for when something is left for later.
        Some(held) if code == EXIT_SUSPENDED => {
            *held
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = lines;
        }
        _ => {
            for line in &lines {
                output::out(line);
            }
        }
    }
    Ok(code)
}

/// The progress shown while the tree runs (nothing when quiet): the live view of the store,
/// or the root's and the supervisor's event lines.
fn start_followers(
    view: &View<'_>,
    built: &tree::Built,
    session: &Session,
    done: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let store = view.store;
    let root_id = session.id();
    let mut followers: Vec<JoinHandle<()>> = Vec::new();
    if !view.quiet && crate::render::live::wanted(view.progress) {
        output::err(&format!(
            "{} ({}) on {}",
            session.record().name,
            crate::resolve::short(root_id),
            view.store_name
        ));
        followers.push(tokio::spawn(crate::render::live::follow(
            store.clone(),
            root_id,
            done.clone(),
        )));
    } else if !view.quiet {
        let root = RootProgress::new(
            session.record().name.clone(),
            root_id,
            view.store_name.clone(),
        )
        .with_limits(built.root_limits.clone());
        followers.push(tokio::spawn(progress::follow_root(
            root,
            session.subscribe(),
            done.clone(),
        )));
        if let Some(sup) = &built.supervisor {
            followers.push(tokio::spawn(progress::follow_supervisor(
                sup.subscribe(),
                built.child_limits.clone(),
                done.clone(),
            )));
        }
    }
    followers
}

/// The root record's `meta`: what a later process needs to rebuild the same agents, and the
/// process that owns the tree's runs.
/// Checks the root's model with its provider (an HTTP provider asks the server) before
/// anything is stored: a refused key or an unknown model is a usage error, never a silent
/// substitute.
pub(crate) async fn preflight_root(spec: &spec::Spec) -> Result<(), Fail> {
    let root = spec.root_name().map_err(Fail::usage)?;
    if let Some(agent) = spec.agents.get(root)
        && let Some(p) = &agent.http
    {
        p.preflight(&agent.model)
            .await
            .map_err(|e| Fail::usage(format!("agent {root:?}: {e}")))?;
    }
    Ok(())
}

fn root_meta(
    path: &str,
    (text, fingerprint): (&str, &str),
    (repository, worktrees): (Option<&std::path::Path>, Option<&std::path::Path>),
    (provider, model): (Option<&str>, Option<&str>),
) -> serde_json::Value {
    let mut definition =
        serde_json::json!({"path": path, "spec": text, "fingerprint": fingerprint});
    if let Some(r) = repository {
        definition["repository"] = serde_json::Value::from(r.display().to_string());
    }
    if let Some(w) = worktrees {
        definition["worktrees"] = serde_json::Value::from(w.display().to_string());
    }
    if let Some(p) = provider {
        definition["root_provider"] = serde_json::Value::from(p);
    }
    if let Some(m) = model {
        definition["root_model"] = serde_json::Value::from(m);
    }
    serde_json::json!({ "definition": definition, "owner": owner::current() })
}

/// Lets the progress printers print what is left. The root's ends at the run's last event,
/// which a run that failed in the store never publishes: then they are stopped.
async fn drain(followers: Vec<JoinHandle<()>>, finished: bool) {
    for f in followers {
        if !finished {
            f.abort();
        }
        let abort = f.abort_handle();
        if tokio::time::timeout(DRAIN_TIMEOUT, f).await.is_err() {
            abort.abort();
        }
    }
}

/// The run's pool: the overrides' (flags, a request's) over the root agent's `budget`.
fn root_budget(
    spec: &spec::Spec,
    overrides: &Overrides,
) -> Result<Option<arbor_core::budget::Budget>, Fail> {
    if overrides.budget.is_some() {
        return Ok(overrides.budget);
    }
    let root = spec.root_name().map_err(Fail::usage)?;
    spec.agents
        .get(root)
        .and_then(|a| a.budget)
        .map(|b| b.budget())
        .transpose()
        .map_err(Fail::usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_definition_holds_path_text_and_fingerprint() {
        let meta = root_meta(
            "examples/x.toml",
            ("abc", &crate::spec::fingerprint("abc")),
            (None, None),
            (None, None),
        );
        assert_eq!(
            meta["definition"],
            serde_json::json!({
                "path": "examples/x.toml",
                "spec": "abc",
                "fingerprint": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            })
        );
        assert_eq!(meta["owner"]["pid"], std::process::id());
        let meta = root_meta(
            "x.toml",
            ("abc", "f"),
            (
                Some(std::path::Path::new("/srv/repo")),
                Some(std::path::Path::new("/srv/trees")),
            ),
            (Some("openai"), Some("gpt-4o-mini")),
        );
        assert_eq!(meta["definition"]["repository"], "/srv/repo");
        assert_eq!(meta["definition"]["worktrees"], "/srv/trees");
        assert_eq!(meta["definition"]["root_provider"], "openai");
        assert_eq!(meta["definition"]["root_model"], "gpt-4o-mini");
    }
}
