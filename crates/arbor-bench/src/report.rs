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
}

impl Row {
    /// Whether the token figure read back equals the expected one.
    pub(crate) fn tokens_ok(&self) -> bool {
        self.root_total_tokens == self.expected_tokens
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
            tokens(r.root_total_tokens),
            tokens(r.expected_tokens),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| cells.iter().map(|row| row[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &cells {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c < 3 {
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
        }
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
