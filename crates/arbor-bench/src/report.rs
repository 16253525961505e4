//! One row of results per scenario and store, printed as a table or as JSON.

use serde::{Deserialize, Serialize};

/// What one scenario measured on one store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Row {
    /// The scenario letter.
    pub(crate) scenario: String,
    /// `memory` or `sqlite`.
    pub(crate) store: String,
    /// Operations per second (from the median time per operation).
    pub(crate) ops_per_sec: f64,
    /// Median over the runs of the time per operation (for A, the p50 admission latency).
    pub(crate) us_per_op: f64,
    /// Peak resident memory of the process that ran the scenario.
    pub(crate) peak_rss_mb: f64,
    /// The token total read back from the store at the roots after the runs (null where no
    /// model is called).
    pub(crate) root_total_tokens: Option<u64>,
    /// The exact figure the scenario's script implies.
    pub(crate) expected_tokens: Option<u64>,
    /// What one operation is.
    pub(crate) op: String,
    /// Operations in one run.
    pub(crate) ops_per_run: u64,
    /// Runs measured (the median is over these).
    pub(crate) runs: u32,
    /// The 99th percentile of the per-operation latency, where single operations are timed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) p99_us: Option<f64>,
    /// Median wall time of one run, in milliseconds.
    pub(crate) wall_ms: f64,
    /// Resident memory added during the scenario (peak minus the set before it began).
    pub(crate) added_rss_mb: f64,
    /// L: operations run before the warm-up reading.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) warm_ops: Option<u64>,
    /// L: resident memory after the warm-up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) warm_rss_mb: Option<f64>,
    /// L: resident memory at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) end_rss_mb: Option<f64>,
    /// L: resident growth per 10,000 operations after the warm-up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rss_growth_mb_per_10k: Option<f64>,
    /// L: sessions the supervisor still tracks at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tracked_sessions: Option<u64>,
    /// Store writes per operation (each one atomic write), where an operation is a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) store_writes_per_op: Option<f64>,
    /// Store reads per operation, where an operation is a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) store_reads_per_op: Option<f64>,
    /// SQLite: writes per commit over the timed runs (group commit shares one commit between
    /// the writes that wait at the same moment; 1.0 where nothing overlaps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) writes_per_commit: Option<f64>,
}

impl Row {
    /// Whether the token figure read back equals the expected one.
    pub(crate) fn tokens_ok(&self) -> bool {
        self.root_total_tokens == self.expected_tokens
    }

    /// Whether the sessions tracked at the end (where measured) are within
    /// [`MAX_TRACKED`](crate::long_life::MAX_TRACKED).
    pub(crate) fn tracked_ok(&self) -> bool {
        self.tracked_sessions
            .is_none_or(|n| n <= crate::long_life::MAX_TRACKED)
    }

    /// Whether L's growth on a durable store (where it ran long enough to tell) stays within
    /// [`MAX_GROWTH_MB_PER_10K`](crate::long_life::MAX_GROWTH_MB_PER_10K). The memory store
    /// keeps every child by design, so its growth is not a leak.
    pub(crate) fn growth_ok(&self) -> bool {
        self.store == "memory"
            || self.ops_per_run < crate::long_life::GROWTH_CHECKED_FROM
            || self
                .rss_growth_mb_per_10k
                .is_none_or(|g| g <= crate::long_life::MAX_GROWTH_MB_PER_10K)
    }
}

fn tokens(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |t| t.to_string())
}

/// The rows as an aligned text table.
pub(crate) fn table(rows: &[Row]) -> String {
    let header = [
        "scenario",
        "store",
        "op",
        "ops/run",
        "ops/s",
        "us/op",
        "p99 us",
        "wall ms",
        "peak MB",
        "added MB",
        "writes/op",
        "root tokens",
        "expected",
    ];
    let mut cells: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    for r in rows {
        cells.push(vec![
            r.scenario.clone(),
            r.store.clone(),
            r.op.clone(),
            r.ops_per_run.to_string(),
            format!("{:.0}", r.ops_per_sec),
            format!("{:.2}", r.us_per_op),
            r.p99_us
                .map_or_else(|| "-".to_owned(), |p| format!("{p:.2}")),
            format!("{:.1}", r.wall_ms),
            format!("{:.1}", r.peak_rss_mb),
            format!("{:.1}", r.added_rss_mb),
            r.store_writes_per_op
                .map_or_else(|| "-".to_owned(), |w| format!("{w:.2}")),
            tokens(r.root_total_tokens),
            tokens(r.expected_tokens),
        ]);
    }
    let mut out = aligned(&cells, 3);
    let lives: Vec<&Row> = rows
        .iter()
        .filter(|r| r.tracked_sessions.is_some())
        .collect();
    if !lives.is_empty() {
        let header = [
            "long life",
            "store",
            "ops",
            "warm-up ops",
            "warm MB",
            "end MB",
            "MB per 10k",
            "tracked",
        ];
        let mut cells: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
        let mb = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
        for r in lives {
            cells.push(vec![
                r.scenario.clone(),
                r.store.clone(),
                r.ops_per_run.to_string(),
                tokens(r.warm_ops),
                mb(r.warm_rss_mb),
                mb(r.end_rss_mb),
                r.rss_growth_mb_per_10k
                    .map_or_else(|| "-".to_owned(), |v| format!("{v:+.2}")),
                tokens(r.tracked_sessions),
            ]);
        }
        out.push('\n');
        out.push_str(&aligned(&cells, 2));
    }
    out
}

/// `cells` as lines of columns two spaces apart: the first `left` columns aligned left, the
/// others right.
fn aligned(cells: &[Vec<String>], left: usize) -> String {
    let columns = cells.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| cells.iter().map(|row| row[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in cells {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c < left {
                    format!("{cell:<w$}", w = widths[c])
                } else {
                    format!("{cell:>w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tokens: Option<u64>, expected: Option<u64>) -> Row {
        Row {
            scenario: "S".into(),
            store: "memory".into(),
            ops_per_sec: 50_000.0,
            us_per_op: 20.0,
            peak_rss_mb: 12.5,
            root_total_tokens: tokens,
            expected_tokens: expected,
            op: "sync delegation".into(),
            ops_per_run: 1000,
            runs: 5,
            p99_us: None,
            wall_ms: 20.0,
            added_rss_mb: 1.0,
            warm_ops: None,
            warm_rss_mb: None,
            end_rss_mb: None,
            rss_growth_mb_per_10k: None,
            tracked_sessions: None,
            store_writes_per_op: Some(4.0),
            store_reads_per_op: Some(1.0),
            writes_per_commit: None,
        }
    }

    fn long_life(tracked: u64) -> Row {
        Row {
            scenario: "L".into(),
            op: "message-mode child".into(),
            ops_per_run: 20_000,
            warm_ops: Some(2000),
            warm_rss_mb: Some(20.25),
            end_rss_mb: Some(20.5),
            rss_growth_mb_per_10k: Some(0.139),
            tracked_sessions: Some(tracked),
            ..row(Some(330_000), Some(330_000))
        }
    }

    #[test]
    fn a_long_life_row_gets_its_own_table_and_fails_past_the_tracked_bound() {
        let t = table(&[row(Some(45_000), Some(45_000)), long_life(1)]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 6, "{t}");
        assert_eq!(lines[3], "");
        assert_eq!(
            lines[4],
            "long life  store     ops  warm-up ops  warm MB  end MB  MB per 10k  tracked"
        );
        assert_eq!(
            lines[5],
            "L          memory  20000         2000     20.2    20.5       +0.14        1"
        );
        assert!(long_life(1).tracked_ok());
        assert!(!long_life(2).tracked_ok());
        assert!(row(None, None).tracked_ok());
        // Growth fails only on a durable store, and only over a long enough run.
        let grown = |store: &str, ops: u64, growth: f64| Row {
            store: store.to_owned(),
            ops_per_run: ops,
            rss_growth_mb_per_10k: Some(growth),
            ..long_life(1)
        };
        assert!(grown("sqlite", 100_000, 0.02).growth_ok());
        assert!(!grown("sqlite", 100_000, 1.16).growth_ok());
        assert!(grown("sqlite", 100, 1.16).growth_ok(), "too short to tell");
        assert!(
            grown("memory", 100_000, 44.0).growth_ok(),
            "the memory store keeps all"
        );
        assert!(row(None, None).growth_ok());
        let v = serde_json::to_value(long_life(1)).unwrap();
        assert_eq!(v["tracked_sessions"], 1);
        assert_eq!(v["rss_growth_mb_per_10k"], 0.139);
        assert!(
            serde_json::to_value(row(None, None))
                .unwrap()
                .get("tracked_sessions")
                .is_none()
        );
    }

    #[test]
    fn a_table_aligns_its_columns_and_shows_the_token_check() {
        let t = table(&[row(Some(45_000), Some(45_000)), row(None, None)]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("scenario  store "), "{t}");
        assert!(lines[1].ends_with("45000     45000"), "{t}");
        assert!(lines[2].ends_with("-         -"), "{t}");
        assert!(row(Some(1), Some(2)).tokens_ok().eq(&false));
        assert!(row(None, None).tokens_ok());
    }

    #[test]
    fn json_rows_carry_the_named_fields() {
        let v = serde_json::to_value(row(Some(45), Some(45))).unwrap();
        for key in [
            "scenario",
            "store",
            "ops_per_sec",
            "us_per_op",
            "peak_rss_mb",
            "root_total_tokens",
        ] {
            assert!(v.get(key).is_some(), "{key} missing in {v}");
        }
        assert!(v.get("p99_us").is_none());
    }
}
