//! The scenarios: what one operation is, how many a run makes, and the exact token figure
//! each implies. [`measure`] runs one scenario on one store kind in this process.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arbor_core::Agent;
use arbor_core::supervisor::{DelegationRequest, Supervisor, WaitOptions, WaitOutcome};
use arbor_protocol::SessionId;
use arbor_store::{SessionRecord, Store};

use crate::long_life::{self, LongLife};
use crate::report::Row;
use crate::stores::StoreKind;
use crate::trees::{self, CALL_TOKENS};
use crate::{parallel, pump, rss, service};

/// A benchmark scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// A root run with one model turn.
    B,
    /// A root run delegating once, sync.
    S,
    /// One tool call running 1,000 children concurrently.
    C,
    /// A sync chain of depth 4.
    D,
    /// Admission alone.
    A,
    /// The child-event pump.
    E,
    /// Long life: many message-mode children under one supervisor, memory measured.
    L,
    /// A sync delegation over HTTP (`arbor-server` on loopback).
    H,
    /// Parallel roots: many roots each delegating once, on a worker per core.
    P,
    /// A root per conversation: one supervisor, each root attached, run (delegating once),
    /// closed and dropped; memory measured like L.
    R,
}

/// Children that C runs.
pub(crate) const FAN_OUT: u32 = 1000;

impl Scenario {
    pub(crate) const ALL: [Scenario; 10] = [
        Scenario::B,
        Scenario::S,
        Scenario::C,
        Scenario::D,
        Scenario::A,
        Scenario::E,
        Scenario::L,
        Scenario::H,
        Scenario::P,
        Scenario::R,
    ];

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|c| c.letter().eq_ignore_ascii_case(s))
    }

    pub(crate) fn letter(self) -> &'static str {
        match self {
            Scenario::B => "B",
            Scenario::S => "S",
            Scenario::C => "C",
            Scenario::D => "D",
            Scenario::A => "A",
            Scenario::E => "E",
            Scenario::L => "L",
            Scenario::H => "H",
            Scenario::P => "P",
            Scenario::R => "R",
        }
    }

    /// What one operation is.
    pub(crate) fn op(self) -> &'static str {
        match self {
            Scenario::B => "root run, 1 turn",
            Scenario::S => "sync delegation",
            Scenario::C => "child (fan-out)",
            Scenario::D => "depth-4 chain",
            Scenario::A => "admission",
            Scenario::E => "child event",
            Scenario::L => "message-mode child",
            Scenario::H => "sync delegation over HTTP",
            Scenario::P => "root + 1 delegation, 32 at once",
            Scenario::R => "host root, delegating once, closed",
        }
    }

    /// Operations in one run on `kind`, and how many runs the median is taken over. L is one
    /// long run of 100,000 children (about 5 s in memory, a minute on SQLite).
    pub(crate) fn plan(self, kind: StoreKind, quick: bool) -> (u64, u32) {
        let sqlite = kind.durable();
        let (ops, runs) = match self {
            Scenario::B => (1000, 5),
            Scenario::S => (1000, 5),
            Scenario::C => (u64::from(FAN_OUT), 5),
            Scenario::D => (200, 5),
            Scenario::A => (1000, 5),
            Scenario::E => (20_000, 5),
            Scenario::L => (100_000, 1),
            Scenario::H => (1000, 3),
            Scenario::P => (1000, 3),
            Scenario::R => (10_000, 1),
        };
        if quick {
            let ops = match self {
                Scenario::C => 50,
                Scenario::E => 1000,
                Scenario::L if sqlite => 100,
                Scenario::L => 200,
                Scenario::R => 200,
                _ => 10,
            };
            (ops, 1)
        } else {
            (ops, runs)
        }
    }

    /// Model calls per operation, and how many tokens they add up to at the root.
    fn tokens_per_op(self) -> Option<u64> {
        match self {
            Scenario::B => Some(CALL_TOKENS),
            Scenario::S => Some(3 * CALL_TOKENS),
            // The root's own two calls are counted once per run, below.
            Scenario::C => Some(CALL_TOKENS),
            Scenario::D => Some(7 * CALL_TOKENS),
            Scenario::A => Some(CALL_TOKENS),
            Scenario::E => None,
            // Plus one call per follow-up run, below.
            Scenario::L => Some(CALL_TOKENS),
            Scenario::H => Some(CALL_TOKENS),
            Scenario::P => Some(3 * CALL_TOKENS),
            Scenario::R => Some(3 * CALL_TOKENS),
        }
    }

    /// The exact token total at the roots of one run of `ops` operations.
    pub(crate) fn expected_tokens(self, ops: u64) -> Option<u64> {
        let per = self.tokens_per_op()?;
        Some(match self {
            Scenario::C => ops * per + 2 * CALL_TOKENS,
            Scenario::L => (ops + long_life::follow_ups(ops)) * per,
            _ => ops * per,
        })
    }
}

/// What one run measured.
struct RunOutcome {
    elapsed: Duration,
    /// Per-operation latencies, where operations are timed one by one.
    samples: Vec<Duration>,
    /// The roots whose aggregate is summed.
    roots: Vec<SessionId>,
    /// Scenario L's memory readings.
    long_life: Option<LongLife>,
}

/// Runs `scenario` (`ops` operations) on fresh `kind` stores `runs` times and summarizes.
pub(crate) async fn measure(
    scenario: Scenario,
    kind: StoreKind,
    ops: u64,
    runs: u32,
) -> Result<Row, String> {
    let before = rss::current_kib();
    let mut per_op = Vec::new();
    let mut walls = Vec::new();
    let mut samples = Vec::new();
    let mut tokens: Option<u64> = None;
    let mut life = None;
    let (mut writes, mut commits) = (0, 0);
    for _ in 0..runs {
        let bench = kind.open().await?;
        let store = bench.store.clone();
        let out = run_once(scenario, &store, ops).await?;
        if let Some(stats) = bench.write_stats() {
            writes += stats.writes;
            commits += stats.commits;
        }
        walls.push(out.elapsed.as_secs_f64() * 1e3);
        per_op.push(out.elapsed.as_secs_f64() * 1e6 / ops as f64);
        samples.extend(out.samples);
        life = out.long_life.or(life);
        if scenario.tokens_per_op().is_some() {
            // Every run must give the same exact figure: the last one's is reported, and a
            // run that differs is reported instead.
            let got = root_total(&store, &out.roots).await?;
            if tokens.is_none() || Some(got) != scenario.expected_tokens(ops) {
                tokens = Some(got);
            }
        }
        drop(store);
        bench.close().await?;
    }
    let peak = rss::peak_kib();
    let mut us_per_op = median(&mut per_op);
    let mut p99 = None;
    if !samples.is_empty() {
        samples.sort();
        us_per_op = percentile(&samples, 50.0);
        p99 = Some(percentile(&samples, 99.0));
    }
    let mut row = Row {
        scenario: scenario.letter().to_owned(),
        store: kind.name().to_owned(),
        ops_per_sec: 0.0,
        us_per_op,
        peak_rss_mb: rss::mib(peak),
        root_total_tokens: tokens,
        expected_tokens: scenario.expected_tokens(ops),
        op: scenario.op().to_owned(),
        ops_per_run: ops,
        runs,
        p99_us: p99,
        wall_ms: median(&mut walls),
        added_rss_mb: rss::mib(peak.saturating_sub(before)),
        warm_ops: None,
        warm_rss_mb: None,
        end_rss_mb: None,
        rss_growth_mb_per_10k: None,
        tracked_sessions: None,
        store_writes_per_op: None,
        store_reads_per_op: None,
        writes_per_commit: (commits > 0).then(|| writes as f64 / commits as f64),
    };
    // Throughput: of the whole run where operations overlap (P), else one per latency.
    row.ops_per_sec = match scenario {
        Scenario::P if row.wall_ms > 0.0 => ops as f64 / (row.wall_ms / 1e3),
        _ if row.us_per_op > 0.0 => 1e6 / row.us_per_op,
        _ => 0.0,
    };
    if let Some((writes, reads)) = store_calls(scenario, kind).await? {
        row.store_writes_per_op = Some(writes);
        row.store_reads_per_op = Some(reads);
    }
    if let Some(life) = life {
        row.warm_ops = Some(life.warm_ops);
        row.warm_rss_mb = Some(rss::mib(life.warm_kib));
        row.end_rss_mb = Some(rss::mib(life.end_kib));
        row.rss_growth_mb_per_10k = Some(long_life::growth_per_10k_mb(&life, ops));
        row.tracked_sessions = Some(life.tracked);
    }
    Ok(row)
}

/// The store writes and reads one operation of `scenario` makes: counted over two short
/// runs of `n` and `2n` operations, so what a run sets up once is not counted. `None` for
/// the scenarios whose operation is not a run (E, L, H).
async fn store_calls(scenario: Scenario, kind: StoreKind) -> Result<Option<(f64, f64)>, String> {
    use std::sync::atomic::Ordering::Relaxed;
    if matches!(
        scenario,
        Scenario::E | Scenario::L | Scenario::H | Scenario::P | Scenario::R
    ) {
        return Ok(None);
    }
    let n = 20;
    let mut counted = Vec::new();
    for ops in [n, 2 * n] {
        let bench = kind.open_counted().await?;
        run_once(scenario, &bench.store, ops).await?;
        let counts = bench.counts.clone().ok_or("the store was not counted")?;
        counted.push((counts.writes.load(Relaxed), counts.reads.load(Relaxed)));
        bench.close().await?;
    }
    let per = |a: u64, b: u64| b.saturating_sub(a) as f64 / n as f64;
    Ok(Some((
        per(counted[0].0, counted[1].0),
        per(counted[0].1, counted[1].1),
    )))
}

/// The median of `v` (sorted in place; 0 when empty).
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The `p`th percentile (nearest rank) of sorted samples, in microseconds.
fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e6
}

/// The summed aggregate tokens of `roots`, read back from the store.
async fn root_total(store: &Arc<dyn Store>, roots: &[SessionId]) -> Result<u64, String> {
    let mut total = 0;
    for id in roots {
        let record = store
            .session(*id)
            .await
            .map_err(|e| format!("reading root {id}: {e}"))?
            .ok_or_else(|| format!("root {id} is missing from the store"))?;
        total += record.aggregate_usage().total_tokens;
    }
    Ok(total)
}

async fn run_once(
    scenario: Scenario,
    store: &Arc<dyn Store>,
    ops: u64,
) -> Result<RunOutcome, String> {
    let e = |e: arbor_core::CoreError| e.to_string();
    match scenario {
        Scenario::B => {
            let root = trees::scripted("root", vec![arbor_model::ScriptedTurn::text("done")])
                .build()
                .map_err(e)?;
            roots_in_sequence(&root, store, ops).await
        }
        Scenario::S => {
            let (root, _sup) = trees::one_child(store).map_err(e)?;
            roots_in_sequence(&root, store, ops).await
        }
        Scenario::D => {
            let (root, _sup) = trees::chain(store).map_err(e)?;
            roots_in_sequence(&root, store, ops).await
        }
        Scenario::C => {
            let count = u32::try_from(ops).map_err(|_| "too many children".to_owned())?;
            let (root, _sup) = trees::fan_out(store, count).map_err(e)?;
            roots_in_sequence(&root, store, 1).await.map(|mut out| {
                out.samples.clear();
                out
            })
        }
        Scenario::A => admissions(store, ops).await,
        Scenario::E => {
            let elapsed = pump::project_events(store, ops)?;
            Ok(RunOutcome {
                elapsed,
                samples: Vec::new(),
                roots: Vec::new(),
                long_life: None,
            })
        }
        Scenario::H => {
            let m = service::delegations(store, ops).await?;
            Ok(RunOutcome {
                elapsed: m.elapsed,
                samples: m.samples,
                roots: vec![m.root],
                long_life: None,
            })
        }
        Scenario::P => {
            let p = parallel::run(store, ops).await?;
            Ok(RunOutcome {
                elapsed: p.elapsed,
                samples: p.samples,
                roots: p.roots,
                long_life: None,
            })
        }
        Scenario::R => {
            let life = long_life::roots(store, ops).await?;
            Ok(RunOutcome {
                elapsed: life.elapsed,
                samples: Vec::new(),
                roots: life.roots.clone(),
                long_life: Some(life),
            })
        }
        Scenario::L => {
            let life = long_life::run(store, ops).await?;
            Ok(RunOutcome {
                elapsed: life.elapsed,
                samples: Vec::new(),
                roots: vec![life.root],
                long_life: Some(life),
            })
        }
    }
}

/// Creates a root session and runs it, `ops` times in sequence; each run must succeed.
async fn roots_in_sequence(
    root: &Agent,
    store: &Arc<dyn Store>,
    ops: u64,
) -> Result<RunOutcome, String> {
    let mut roots = Vec::with_capacity(ops as usize);
    let start = Instant::now();
    for _ in 0..ops {
        roots.push(trees::run_root(root, store).await?);
    }
    Ok(RunOutcome {
        elapsed: start.elapsed(),
        samples: Vec::new(),
        roots,
        long_life: None,
    })
}

/// `delegate_async` timed until the handle returns, then the child is waited for (untimed),
/// `ops` times under one parent session.
async fn admissions(store: &Arc<dyn Store>, ops: u64) -> Result<RunOutcome, String> {
    let sup: Supervisor = trees::admission(store).map_err(|e| e.to_string())?;
    let parent = SessionRecord::new_root("parent", "parent", "scripted");
    store
        .create_session(&parent)
        .await
        .map_err(|e| e.to_string())?;
    let parent_ref = arbor_core::SessionRef::from(&parent);
    let mut samples = Vec::with_capacity(ops as usize);
    let start = Instant::now();
    for _ in 0..ops {
        let request = DelegationRequest {
            parent: Some(parent_ref),
            ..DelegationRequest::new("child", "go")
        };
        let t = Instant::now();
        let handle = sup
            .delegate_async(request)
            .await
            .map_err(|e| e.to_string())?;
        samples.push(t.elapsed());
        match sup
            .wait(&handle.delegation_id, WaitOptions::default())
            .await
            .map_err(|e| e.to_string())?
        {
            WaitOutcome::Finished(_) => {}
            WaitOutcome::Cancelled { .. } => return Err("a child was cancelled".to_owned()),
        }
    }
    Ok(RunOutcome {
        elapsed: start.elapsed(),
        samples,
        roots: vec![parent.id],
        long_life: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_tokens_follow_the_scripts() {
        assert_eq!(Scenario::B.expected_tokens(1000), Some(15_000));
        assert_eq!(Scenario::S.expected_tokens(1000), Some(45_000));
        assert_eq!(Scenario::C.expected_tokens(1000), Some(15_030));
        assert_eq!(Scenario::D.expected_tokens(200), Some(21_000));
        assert_eq!(Scenario::A.expected_tokens(1000), Some(15_000));
        assert_eq!(Scenario::E.expected_tokens(1000), None);
        // 1,000 children and 100 follow-ups, one call each.
        assert_eq!(Scenario::L.expected_tokens(1000), Some(16_500));
        assert_eq!(Scenario::L.expected_tokens(401), Some(6_630));
        assert_eq!(Scenario::parse("s"), Some(Scenario::S));
        assert_eq!(Scenario::parse("X"), None);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&samples, 50.0), 50.0);
        assert_eq!(percentile(&samples, 99.0), 99.0);
        assert_eq!(percentile(&samples[..1], 99.0), 1.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0, 10.0]), 2.5);
    }

    /// Every scenario, in quick mode, on both stores: the token figure read back equals the
    /// exact one the scripts imply.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_scenario_runs_and_loses_no_tokens() {
        for kind in [StoreKind::Memory, StoreKind::Sqlite] {
            for scenario in Scenario::ALL {
                let (ops, runs) = scenario.plan(kind, true);
                let row = measure(scenario, kind, ops, runs).await.unwrap();
                assert!(row.tokens_ok(), "{row:?}");
                assert_eq!(
                    row.tracked_sessions.is_some(),
                    matches!(scenario, Scenario::L | Scenario::R)
                );
                assert!(row.us_per_op > 0.0, "{row:?}");
            }
        }
    }

    /// L quick, on both stores, on `flavor`'s runtime: every child's and follow-up's tokens
    /// reach the root, the warm-up is half the run (the least warm-up is more), and only the host's root is tracked.
    async fn a_long_life_ends_tracking_only_the_root() {
        for kind in [StoreKind::Memory, StoreKind::Sqlite] {
            let (ops, runs) = Scenario::L.plan(kind, true);
            let row = measure(Scenario::L, kind, ops, runs).await.unwrap();
            assert!(row.tokens_ok(), "{row:?}");
            // Half the run, read at the end of a batch.
            let warm = (ops / 2).next_multiple_of(u64::from(long_life::BATCH));
            assert_eq!(row.warm_ops, Some(warm), "{row:?}");
            assert_eq!(row.tracked_sessions, Some(1), "{row:?}");
            assert!(row.tracked_ok());
        }
    }

    /// As the program runs it by default: on one thread.
    #[tokio::test]
    async fn a_long_life_on_one_thread_ends_tracking_only_the_root() {
        a_long_life_ends_tracking_only_the_root().await;
    }

    /// On two workers a follow-up run can end on one thread while `send_message` still
    /// holds the child's inbox on the other.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_life_on_two_workers_ends_tracking_only_the_root() {
        a_long_life_ends_tracking_only_the_root().await;
    }
}
