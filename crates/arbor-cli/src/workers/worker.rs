//! `arbor worker`: claims child runs from the store's queue and runs them.
//!
//! Each claim is run by a supervisor built from the spec its tree was started from (the
//! payload names the spec's fingerprint; the worker knows the specs of `--specs`), through
//! [`Supervisor::run_claimed`](arbor_core::Supervisor::run_claimed): from the record, under
//! the terms its spawn narrowed to, inside its tree. A heartbeat renews the claim's lease a
//! few times per lease and carries cancellation (a cancel at the parent, a delete of the
//! child or an ancestor): the run stops within one heartbeat. A claim whose lease was lost
//! stops without reporting (another worker has it). A claim above the first is a takeover:
//! the run goes on from its transcript.
//!
//! The first Ctrl-C or SIGTERM stops claiming and lets the runs in hand finish; a second
//! exits at once (their leases run out and other workers take them over).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arbor_core::process::{ClaimedRun, SupervisorProcess};
use arbor_core::supervisor::{LimitsInput, RemoteOutcome};
use arbor_store::Store;
use arbor_store_postgres::{Claim, Heartbeat, WorkQueue};
use serde_json::Value;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cli::WorkerArgs;
use crate::drive::{Overrides, prepare};
use crate::fail::Fail;
use crate::render::output;
use crate::spec::Spec;
use crate::store::{StoreChoice, io_reason};

/// How often a running child's stored mail is looked for.
const MAIL_EVERY: Duration = Duration::from_millis(500);

/// Runs `arbor worker`.
pub(crate) async fn work(args: WorkerArgs) -> Result<u8, Fail> {
    if args.concurrency == 0 {
        return Err(Fail::usage("--concurrency must be at least 1"));
    }
    let lease = Duration::from_millis(args.lease_ms);
    if lease < Duration::from_millis(300) {
        return Err(Fail::usage("--lease-ms must be at least 300"));
    }
    let specs = read_specs(&args.specs).await?;
    let choice = StoreChoice::from_args(false, args.store.as_deref())?;
    let pg = super::queue_store(&choice, "arbor worker").await?;
    // Grandchildren go to the queue too.
    super::enable(&pg, lease);
    let store: Arc<dyn Store> = Arc::new(pg.clone());
    let queue = WorkQueue::new(&pg, super::owner_name(), lease);
    let mut wakeups = queue
        .listen()
        .await
        .map_err(|e| Fail::store(e.to_string()))?;
    output::err(&format!(
        "arbor worker: {} spec(s), up to {} run(s) at once, lease {} ms, store {}",
        specs.len(),
        args.concurrency,
        args.lease_ms,
        choice.name()
    ));
    let worker = Arc::new(Worker {
        specs,
        store,
        queue: queue.clone(),
        lease,
    });
    let mut runs: JoinSet<()> = JoinSet::new();
    let draining = CancellationToken::new();
    let stop_now = CancellationToken::new();
    {
        let (draining, stop_now) = (draining.clone(), stop_now.clone());
        tokio::spawn(async move {
            crate::interrupt::shutdown_signal().await;
            output::err("arbor worker: stopping once the runs in hand end (again: at once)");
            draining.cancel();
            crate::interrupt::shutdown_signal().await;
            stop_now.cancel();
        });
    }
    loop {
        while runs.try_join_next().is_some() {}
        if draining.is_cancelled() {
            if runs.is_empty() {
                return Ok(0);
            }
        } else if runs.len() < args.concurrency {
            // The leases start when the server takes the claim: after this.
            let asked = tokio::time::Instant::now();
            match queue.claim(args.concurrency - runs.len()).await {
                Ok(claims) => {
                    let got = !claims.is_empty();
                    for claim in claims {
                        let worker = Arc::clone(&worker);
                        let stop = stop_now.clone();
                        runs.spawn(async move { worker.run(claim, asked, stop).await });
                    }
                    if got {
                        // More may wait: claim again before sleeping.
                        continue;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "claiming failed; retrying"),
            }
        }
        tokio::select! {
            _ = wakeups.next(args.poll()) => {}
            Some(_) = runs.join_next(), if !runs.is_empty() => {}
            () = draining.cancelled(), if !draining.is_cancelled() => {}
            () = stop_now.cancelled() => return Ok(130),
        }
    }
}

/// What every claim's run shares.
#[derive(Debug)]
struct Worker {
    /// The specs of `--specs`, by fingerprint.
    specs: BTreeMap<String, Spec>,
    store: Arc<dyn Store>,
    queue: WorkQueue,
    lease: Duration,
}

impl Worker {
    /// Runs one claim to its report, unless its lease is lost (then it stops writing and
    /// leaves the run to the takeover) or `stop` ends the process. `asked` is when the claim
    /// was asked for: its lease runs from a later instant.
    async fn run(&self, claim: Claim, mut asked: Instant, stop: CancellationToken) {
        // A claim that took long to come back (its server slow or just back) may hold little
        // of its lease: renew it before the run writes anything.
        if asked.elapsed() >= self.lease / 4 {
            let sent = Instant::now();
            match self.queue.heartbeat(&claim).await {
                Ok(Heartbeat::Held { .. }) if sent.elapsed() < self.lease / 4 => asked = sent,
                _ => {
                    tracing::warn!(child = %claim.session, "the claim could not be confirmed in time; leaving it to a takeover");
                    return;
                }
            }
        }
        let cancel = CancellationToken::new();
        let lost = CancellationToken::new();
        let beat = self.heartbeat(&claim, asked, cancel.clone(), lost.clone());
        let run = self.run_claim(&claim, cancel, lost.clone());
        tokio::pin!(run, beat);
        let outcome = loop {
            tokio::select! {
                o = &mut run => break o,
                // The heartbeat only ends when the claim is lost; the run then stops.
                () = &mut beat, if !lost.is_cancelled() => {}
                () = stop.cancelled() => return,
            }
        };
        let Some(outcome) = outcome.filter(|_| !lost.is_cancelled()) else {
            tracing::warn!(child = %claim.session, "the claim's lease was lost: the run stopped without writing more, for the worker that takes it over");
            return;
        };
        let ok = outcome.succeeded();
        let report = serde_json::to_value(&outcome).unwrap_or(Value::Null);
        match self.queue.finish(&claim, ok, &report).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(child = %claim.session, "the run was taken over; not reported")
            }
            Err(e) => {
                tracing::warn!(child = %claim.session, error = %e, "could not report the run; its lease will run out and another worker goes on")
            }
        }
    }

    /// Renews the lease a few times per lease; cancels the run when asked to (or when the
    /// child was deleted). Returns only when the claim is lost: the server says another
    /// worker holds it, or no renewal came back before the lease this process can count on
    /// ran out. That is measured from before the last renewal was sent (the server counts
    /// from when it received it, later), less a margin, so the run stops writing before
    /// another worker may claim it.
    async fn heartbeat(
        &self,
        claim: &Claim,
        asked: Instant,
        cancel: CancellationToken,
        lost: CancellationToken,
    ) {
        let every = self.lease / 4;
        let held_for = self.lease - self.lease / 10;
        let mut held_until = asked + held_for;
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = tokio::time::sleep_until(held_until) => break,
            }
            let sent = Instant::now();
            match tokio::time::timeout_at(held_until, self.queue.heartbeat(claim)).await {
                Ok(Ok(Heartbeat::Held { cancel: asked })) => {
                    held_until = sent + held_for;
                    if asked && !cancel.is_cancelled() {
                        tracing::info!(child = %claim.session, "run cancelled");
                        cancel.cancel();
                    }
                }
                Ok(Ok(Heartbeat::Lost)) => break,
                Ok(Err(e)) => {
                    tracing::warn!(child = %claim.session, error = %e, "heartbeat failed; trying again");
                }
                Err(_) => {
                    tracing::warn!(child = %claim.session, "no heartbeat got through within the lease");
                    break;
                }
            }
        }
        lost.cancel();
    }

    /// Builds the claim's tree from its spec and runs the child to its outcome; `None` when the claim was lost (`lost`): the run is dropped where it stands, as if
    /// this process had died, and nothing more of it is written.
    async fn run_claim(
        &self,
        claim: &Claim,
        cancel: CancellationToken,
        lost: CancellationToken,
    ) -> Option<RemoteOutcome> {
        // Read strictly: a payload that does not read fails the run, never runs it with
        // less than its parent decided (its limits, say).
        let payload = match Payload::read(&claim.payload) {
            Ok(p) => p,
            Err(why) => return Some(failed(why)),
        };
        let Some(spec) = self.specs.get(&payload.spec) else {
            return Some(failed(format!(
                "no spec of this worker's --specs has revision {:?} (the spec the tree was \
                 started from)",
                payload.spec
            )));
        };
        let Payload {
            input,
            limits,
            resume_run,
            mapping,
            stream,
            ..
        } = payload;
        // The parent streams the child's events: they go back through the store.
        let (relay, relayer) = if stream {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            (
                Some(tx),
                Some(tokio::spawn(relay_events(
                    self.queue.clone(),
                    claim.clone(),
                    rx,
                ))),
            )
        } else {
            (None, None)
        };
        let token = CancellationToken::new();
        let built = match crate::tree::build(spec, self.store.clone(), token.clone()).await {
            Ok(b) => b,
            Err(e) => return Some(RemoteOutcome::of(&Err(e))),
        };
        let Some(sup) = built.supervisor.clone() else {
            built.close().await;
            return Some(failed("the spec has no children to run".to_owned()));
        };
        let takeover = claim.attempt > 1;
        if takeover {
            tracing::info!(child = %claim.session, attempt = claim.attempt, "taking over a run");
        }
        let run = sup.run_claimed(ClaimedRun {
            session: claim.session,
            input,
            limits: Some(limits),
            takeover,
            cancel,
            resume_run,
            mapping,
            relay,
        });
        let mut run = Box::pin(run);
        // Messages other processes store for the child reach its next turn.
        let mut read_to = 0;
        let result = loop {
            tokio::select! {
                r = &mut run => break Some(r),
                () = lost.cancelled() => break None,
                () = tokio::time::sleep(MAIL_EVERY) => {
                    tokio::select! {
                        read = sup.collect_mail(claim.session, &mut read_to) => {
                            if let Err(e) = read {
                                tracing::debug!(child = %claim.session, error = %e, "could not read the child's mail");
                            }
                        }
                        () = lost.cancelled() => {}
                    }
                }
            }
        };
        let Some(result) = result else {
            // Dropped where it stands, at once, with every task of its tree: no cancellation
            // runs and nothing more is written (an operation waiting for a connection is
            // dropped with it; its relayed events end with the channel).
            sup.abandon_runs();
            drop(run);
            built.close().await;
            return None;
        };
        // Every event is relayed before the outcome is reported.
        drop(run);
        if let Some(relayer) = relayer {
            let _ = relayer.await;
        }
        token.cancel();
        built.close().await;
        Some(RemoteOutcome::of(&result))
    }
}

/// Writes the run's events to the store as they come, a batch at a time, until the run
/// drops its end of the channel.
pub(super) async fn relay_events(
    queue: WorkQueue,
    claim: Claim,
    mut events: tokio::sync::mpsc::UnboundedReceiver<arbor_protocol::EventEnvelope>,
) {
    while let Some(first) = events.recv().await {
        let mut batch = vec![first];
        while batch.len() < 64
            && let Ok(next) = events.try_recv()
        {
            batch.push(next);
        }
        let values: Vec<Value> = batch
            .iter()
            .filter_map(|e| serde_json::to_value(e).ok())
            .collect();
        if let Err(e) = queue.relay(&claim, &values).await {
            tracing::warn!(child = %claim.session, error = %e, "could not relay the run's events");
        }
    }
}

/// What a parent hands over with a child's run (the queue runner writes it).
#[derive(Debug, serde::Deserialize)]
struct Payload {
    /// The fingerprint of the tree's spec.
    spec: String,
    /// The child's input, after its `before` hook.
    input: String,
    /// Its limits, after its `before` hook.
    limits: LimitsInput,
    /// A suspended run to resume with its decisions.
    #[serde(default)]
    resume_run: Option<arbor_protocol::RunId>,
    /// The delegation mapping to keep beside a suspension.
    #[serde(default)]
    mapping: Option<Value>,
    /// Whether the parent streams the run's events.
    #[serde(default)]
    stream: bool,
}

impl Payload {
    /// The payload of a claim, or why it cannot be read (naming the field).
    fn read(payload: &Value) -> Result<Self, String> {
        serde_json::from_value(payload.clone())
            .map_err(|e| format!("the child run's hand-over cannot be read: {e}"))
    }
}

fn failed(message: String) -> RemoteOutcome {
    RemoteOutcome::Failed {
        kind: "Validation".to_owned(),
        message,
    }
}

/// Every spec of `dir` that passes the checks `arbor run` makes, by fingerprint. One that
/// does not is skipped with a line saying why; none at all is a usage error.
async fn read_specs(dir: &Path) -> Result<BTreeMap<String, Spec>, Fail> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Fail::usage(format!("--specs {}: {}", dir.display(), io_reason(&e))))?;
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    let mut specs = BTreeMap::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Fail::usage(format!("cannot read {}: {}", path.display(), io_reason(&e)))
        })?;
        match prepare(&path.display().to_string(), &text, &Overrides::default()).await {
            Ok(prepared) => {
                specs.insert(prepared.spec.fingerprint.clone(), prepared.spec);
            }
            Err(fail) => output::err(&format!(
                "arbor worker: skipping a spec: {}",
                output::one_line(&fail.message)
            )),
        }
    }
    if specs.is_empty() {
        return Err(Fail::usage(format!(
            "--specs {}: no spec to run children of",
            dir.display()
        )));
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::Payload;
    use serde_json::json;

    #[test]
    fn a_hand_over_is_read_strictly() {
        let good = json!({
            "spec": "abc", "input": "go", "limits": {"max_depth": 2},
            "resume_run": null, "mapping": null, "stream": true,
        });
        let p = Payload::read(&good).unwrap();
        assert_eq!(
            (p.input.as_str(), p.limits.max_depth, p.stream),
            ("go", Some(2), true)
        );
        let no_input = json!({"spec": "abc", "limits": {}});
        let e = Payload::read(&no_input).unwrap_err();
        assert!(e.contains("missing field `input`"), "{e}");
        let bad_limits = json!({"spec": "abc", "input": "go", "limits": {"max_depth": "deep"}});
        let e = Payload::read(&bad_limits).unwrap_err();
        assert!(
            e.starts_with("the child run's hand-over cannot be read: "),
            "{e}"
        );
    }
}
