//! Round 3's targets (docs/BENCHMARKS.md, "Round 3"), each read from the document `--all`
//! builds and set beside what was measured.
//!
//! A target is a goal, not a bound: one missed does not fail the program (the bounds that do
//! are each mode's own). A figure whose mode did not run (`--workers` without a PostgreSQL
//! server, a scenario not asked for) is reported as not measured.

use serde::Serialize;
use serde_json::Value;

/// One target beside its figure.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Target {
    /// What is measured, as the issue names it.
    pub(crate) figure: &'static str,
    /// Its unit.
    pub(crate) unit: &'static str,
    /// `<=` or `>=`.
    pub(crate) bound: &'static str,
    /// The target.
    pub(crate) target: f64,
    /// What was measured, if its mode ran.
    pub(crate) measured: Option<f64>,
    /// Whether the measured figure meets the target (null when not measured).
    pub(crate) met: Option<bool>,
}

/// Where a figure is in the document, and how it is turned into the target's unit.
enum Source {
    /// A scenario row's field on a store, times a factor.
    Row(&'static str, &'static str, &'static str, f64),
    /// A field of a mode's object.
    Field(&'static str, &'static str),
    /// The big store's command: its time or memory on the big store, or what it adds to the
    /// small one.
    Command(&'static str, Command),
}

#[derive(Clone, Copy)]
enum Command {
    BigMs,
    BigMb,
    ExtraMs,
}

/// Round 3's targets, in the order.
const TARGETS: &[(&str, &str, &str, f64, Source)] = &[
    (
        "memory B",
        "us",
        "<=",
        1.6,
        Source::Row("B", "memory", "us_per_op", 1.0),
    ),
    (
        "memory S",
        "us",
        "<=",
        8.5,
        Source::Row("S", "memory", "us_per_op", 1.0),
    ),
    (
        "memory C (a child)",
        "us",
        "<=",
        3.3,
        Source::Row("C", "memory", "us_per_op", 1.0),
    ),
    (
        "memory D",
        "us",
        "<=",
        25.0,
        Source::Row("D", "memory", "us_per_op", 1.0),
    ),
    (
        "SQLite B",
        "us",
        "<=",
        90.0,
        Source::Row("B", "sqlite", "us_per_op", 1.0),
    ),
    (
        "SQLite S",
        "us",
        "<=",
        250.0,
        Source::Row("S", "sqlite", "us_per_op", 1.0),
    ),
    (
        "SQLite D",
        "us",
        "<=",
        700.0,
        Source::Row("D", "sqlite", "us_per_op", 1.0),
    ),
    (
        "SQLite P",
        "roots/s",
        ">=",
        10_000.0,
        Source::Row("P", "sqlite", "ops_per_sec", 1.0),
    ),
    (
        "SQLite P p99",
        "ms",
        "<=",
        10.0,
        Source::Row("P", "sqlite", "p99_us", 0.001),
    ),
    (
        "arbor serve",
        "runs/s",
        ">=",
        1500.0,
        Source::Field("serve_load", "runs_per_s"),
    ),
    (
        "PostgreSQL hand-over",
        "ms",
        "<=",
        3.0,
        Source::Field("workers", "handover_ms"),
    ),
    (
        "children through workers",
        "children/s",
        ">=",
        1000.0,
        Source::Field("workers", "children_per_sec"),
    ),
    (
        "big store: arbor ls",
        "ms",
        "<=",
        100.0,
        Source::Command("arbor ls", Command::BigMs),
    ),
    (
        "big store: arbor ls",
        "MB",
        "<=",
        30.0,
        Source::Command("arbor ls", Command::BigMb),
    ),
    (
        "big store: small arbor run, extra",
        "ms",
        "<=",
        50.0,
        Source::Command("arbor run review.toml -q", Command::ExtraMs),
    ),
    (
        "big store: small arbor run",
        "MB",
        "<=",
        30.0,
        Source::Command("arbor run review.toml -q", Command::BigMb),
    ),
    // Growth in MiB per 10,000 children (long_life divides KiB by 1,024), as bytes per
    // child: MiB × 1,048,576 / 10⁴.
    (
        "memory store per retained child",
        "bytes",
        "<=",
        1024.0,
        Source::Row("L", "memory", "rss_growth_mb_per_10k", 104.857_6),
    ),
];

/// Each target beside its figure in `doc` (the object `--all` prints).
pub(crate) fn judge(doc: &Value) -> Vec<Target> {
    TARGETS
        .iter()
        .map(|(figure, unit, bound, target, source)| {
            let measured = read(doc, source);
            let met = measured.map(|m| {
                if *bound == "<=" {
                    m <= *target
                } else {
                    m >= *target
                }
            });
            Target {
                figure,
                unit,
                bound,
                target: *target,
                measured,
                met,
            }
        })
        .collect()
}

fn read(doc: &Value, source: &Source) -> Option<f64> {
    match source {
        Source::Row(scenario, store, field, factor) => doc["scenarios"]["rows"]
            .as_array()?
            .iter()
            .find(|r| r["scenario"] == *scenario && r["store"] == *store)?[*field]
            .as_f64()
            .map(|v| v * factor),
        Source::Field(mode, field) => doc[*mode][*field].as_f64(),
        Source::Command(command, which) => {
            let c = doc["big_store"]["commands"]
                .as_array()?
                .iter()
                .find(|c| c["command"] == *command)?;
            let f = |k: &str| c[k].as_f64();
            match which {
                Command::BigMs => f("big_ms"),
                Command::BigMb => f("big_mb"),
                Command::ExtraMs => Some(f("big_ms")? - f("small_ms")?),
            }
        }
    }
}

/// The targets as an aligned text table.
pub(crate) fn table(targets: &[Target]) -> String {
    let mut out = format!(
        "{:<36} {:>12} {:>12} {:>6}\n",
        "round 3 target", "measured", "target", "met"
    );
    for t in targets {
        let measured = t
            .measured
            .map_or_else(|| "-".to_owned(), |m| format!("{m:.1}"));
        let met = match t.met {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        out.push_str(&format!(
            "{:<36} {:>12} {:>12} {:>6}\n",
            format!("{} ({})", t.figure, t.unit),
            measured,
            format!("{} {}", t.bound, t.target),
            met
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_target_reads_its_figure_and_says_whether_it_is_met() {
        let doc = serde_json::json!({
            "scenarios": {"rows": [
                {"scenario": "B", "store": "memory", "us_per_op": 1.5},
                {"scenario": "S", "store": "sqlite", "us_per_op": 300.0},
                {"scenario": "P", "store": "sqlite", "ops_per_sec": 12_000.0, "p99_us": 11_000.0},
                {"scenario": "L", "store": "memory", "rss_growth_mb_per_10k": 47.2},
            ]},
            "serve_load": {"runs_per_s": 1000.0},
            "big_store": {"commands": [
                {"command": "arbor ls", "small_ms": 4.0, "big_ms": 5.0, "small_mb": 15.0, "big_mb": 16.0},
                {"command": "arbor run review.toml -q", "small_ms": 11.0, "big_ms": 13.0, "small_mb": 24.0, "big_mb": 31.0},
            ]},
            "workers": {"skipped": "no server"},
        });
        let t = judge(&doc);
        let find = |figure: &str, unit: &str| {
            t.iter()
                .find(|t| t.figure == figure && t.unit == unit)
                .map(|t| (t.measured, t.met))
        };
        assert_eq!(find("memory B", "us"), Some((Some(1.5), Some(true))));
        assert_eq!(find("SQLite S", "us"), Some((Some(300.0), Some(false))));
        assert_eq!(
            find("SQLite P", "roots/s"),
            Some((Some(12_000.0), Some(true)))
        );
        assert_eq!(find("SQLite P p99", "ms"), Some((Some(11.0), Some(false))));
        assert_eq!(
            find("arbor serve", "runs/s"),
            Some((Some(1000.0), Some(false)))
        );
        assert_eq!(find("PostgreSQL hand-over", "ms"), Some((None, None)));
        assert_eq!(find("memory D", "us"), Some((None, None)));
        assert_eq!(
            find("big store: arbor ls", "ms"),
            Some((Some(5.0), Some(true)))
        );
        assert_eq!(
            find("big store: small arbor run, extra", "ms"),
            Some((Some(2.0), Some(true)))
        );
        assert_eq!(
            find("big store: small arbor run", "MB"),
            Some((Some(31.0), Some(false)))
        );
        let (Some(Some(per_child)), Some(Some(false))) =
            find("memory store per retained child", "bytes").unzip()
        else {
            panic!("the memory store's figure is read and judged");
        };
        assert!((per_child - 4949.27872).abs() < 1e-6, "{per_child}");
        assert_eq!(t.len(), TARGETS.len());
        assert!(table(&t).contains("memory B (us)"));
    }
}
