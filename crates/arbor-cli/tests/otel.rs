//! The traces a backend receives (feature `otel`): a loopback OTLP/HTTP receiver decodes
//! what `arbor run` and a later `arbor resume` export (protobuf, with the `opentelemetry-proto`
//! types) and checks the tree's shape, the parent links across each delegation, the
//! attributes, own usage summing to the tree's total, and the resumed run in the same trace.
//! A collector that is down or never answers does not fail or hold up a run.
//!
//! Run with `cargo test -p arbor-cli --features otel --test otel`.
#![cfg(feature = "otel")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point};
use prost::Message as _;
use serde_json::Value;

/// One span as the receiver decoded it.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace: String,
    id: String,
    parent: String,
    kind: i32,
    status: i32,
    attrs: BTreeMap<String, String>,
    links: Vec<(String, String)>,
    service: String,
}

impl Span {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attrs.get(key).map(String::as_str)
    }
    fn int(&self, key: &str) -> u64 {
        self.attr(key).map_or(0, |v| v.parse().unwrap())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// A loopback OTLP/HTTP receiver: answers every POST with an empty 200 and keeps the spans.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
    /// One row per data point: metric name, its attributes (`k=v`, sorted), and its value
    /// (a sum's value, a histogram's count).
    points: Arc<Mutex<Vec<(String, String, f64)>>>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    fn start() -> (Self, String) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let me = Self::default();
        let this = me.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let this = this.clone();
                std::thread::spawn(move || this.serve(stream));
            }
        });
        (me, url)
    }

    fn serve(&self, stream: TcpStream) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut out = stream;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let request = line.trim().to_owned();
            let mut length = 0usize;
            let mut content_type = String::new();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 {
                    return;
                }
                let h = h.trim();
                if h.is_empty() {
                    break;
                }
                let (k, v) = h.split_once(':').unwrap();
                match k.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = v.trim().parse().unwrap(),
                    "content-type" => content_type = v.trim().to_owned(),
                    _ => {}
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            self.requests
                .lock()
                .unwrap()
                .push(format!("{request} {content_type}"));
            if content_type == "application/x-protobuf" {
                if request.starts_with("POST /v1/metrics") {
                    self.decode_metrics(&body);
                } else {
                    self.decode(&body);
                }
            }
            let _ = out.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
            );
        }
    }

    fn decode(&self, body: &[u8]) {
        let request = ExportTraceServiceRequest::decode(body).unwrap();
        let mut spans = self.spans.lock().unwrap();
        for rs in request.resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
                .map(|a| text(a.value.as_ref()))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    spans.push(Span {
                        name: s.name,
                        trace: hex(&s.trace_id),
                        id: hex(&s.span_id),
                        parent: hex(&s.parent_span_id),
                        kind: s.kind,
                        status: s.status.map_or(0, |st| st.code),
                        attrs: s
                            .attributes
                            .iter()
                            .map(|a| (a.key.clone(), text(a.value.as_ref())))
                            .collect(),
                        links: s
                            .links
                            .iter()
                            .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                            .collect(),
                        service: service.clone(),
                    });
                }
            }
        }
    }

    fn decode_metrics(&self, body: &[u8]) {
        let request = ExportMetricsServiceRequest::decode(body).unwrap();
        let mut points = self.points.lock().unwrap();
        let attrs = |a: &[opentelemetry_proto::tonic::common::v1::KeyValue]| {
            let mut v: Vec<String> = a
                .iter()
                .map(|kv| format!("{}={}", kv.key, text(kv.value.as_ref())))
                .collect();
            v.sort();
            v.join(",")
        };
        for rm in request.resource_metrics {
            for sm in rm.scope_metrics {
                for m in sm.metrics {
                    match m.data {
                        Some(Data::Sum(sum)) => {
                            for p in sum.data_points {
                                let value = match p.value {
                                    Some(number_data_point::Value::AsInt(i)) => i as f64,
                                    Some(number_data_point::Value::AsDouble(d)) => d,
                                    None => 0.0,
                                };
                                points.push((m.name.clone(), attrs(&p.attributes), value));
                            }
                        }
                        Some(Data::Histogram(h)) => {
                            for p in h.data_points {
                                points.push((m.name.clone(), attrs(&p.attributes), p.count as f64));
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    /// The sum of `metric`'s points with exactly these attributes, over every export.
    fn metric(&self, metric: &str, attrs: &str) -> f64 {
        self.points
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, a, _)| n == metric && a == attrs)
            .map(|(_, _, v)| v)
            .sum()
    }

    fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }
}

const TREE: &str = r#"
task = "trace me"
root = "root"

[supervisor]
approvals = true

[agents.root]
children = ["worker", "bg", "bad", "publisher"]
[[agents.root.turns]]
usage = { input_tokens = 100, output_tokens = 1 }
tool_calls = [
  { name = "spawn_agent", arguments = { child_id = "worker", name = "worker", input = "work" } },
  { name = "spawn_agent", arguments = { child_id = "bg", name = "bg", mode = "async", input = "work on" } },
]
[[agents.root.turns]]
usage = { input_tokens = 200, output_tokens = 2 }
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "bad", name = "bad", input = "fail" } }]
[[agents.root.turns]]
usage = { input_tokens = 300, output_tokens = 3 }
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "publisher", name = "publisher", input = "publish" } }]
[[agents.root.turns]]
usage = { input_tokens = 400, output_tokens = 4 }
text = "done"

[agents.worker]
[[agents.worker.turns]]
usage = { input_tokens = 10, output_tokens = 1 }
text = "worked"

[agents.bg]
[[agents.bg.turns]]
usage = { input_tokens = 20, output_tokens = 2 }
text = "in the background"

[agents.bad]
[[agents.bad.turns]]
fail = "model unavailable"

[agents.publisher]
tools = ["echo"]
[[agents.publisher.turns]]
usage = { input_tokens = 30, output_tokens = 3 }
tool_calls = [{ name = "echo", arguments = { text = "published" } }]
[[agents.publisher.turns]]
usage = { input_tokens = 40, output_tokens = 4 }
text = "published"
"#;

fn arbor(dir: &Path, endpoint: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_arbor"));
    cmd.args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_TRACES_EXPORTER")
        .env_remove("OTEL_SDK_DISABLED")
        .env("OTEL_SERVICE_NAME", "arbor-test")
        // Batches go out at once, so a test does not wait on the schedule; metrics once, at
        // exit (each process's cumulative totals).
        .env("OTEL_BSP_SCHEDULE_DELAY", "10")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "600000")
        .env_remove("OTEL_METRICS_EXPORTER")
        .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT");
    match endpoint {
        Some(e) => cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", e),
        None => cmd.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT"),
    };
    cmd.output().unwrap()
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success() || out.status.code() == Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name:?} in {:#?}", names(spans));
    found[0]
}

/// The trace as an indented tree, with each span's kind, status and own input/output tokens
/// (printed by the test: docs/OBSERVABILITY.md shows one).
fn render(spans: &[Span]) -> String {
    fn walk(spans: &[Span], parent: &str, depth: usize, out: &mut String) {
        for s in spans.iter().filter(|s| s.parent == parent) {
            let kind = match s.kind {
                1 => "internal",
                3 => "client",
                _ => "other",
            };
            let mut extra = Vec::new();
            if let Some(status) = s.attr("arbor.run.status") {
                extra.push(format!("status={status}"));
            }
            if let Some(mode) = s.attr("gen_ai.transfer.mode") {
                extra.push(format!("transfer={mode}"));
            }
            if s.attr("gen_ai.usage.input_tokens").is_some() {
                extra.push(format!(
                    "tokens={}/{}",
                    s.int("gen_ai.usage.input_tokens"),
                    s.int("gen_ai.usage.output_tokens")
                ));
            }
            if s.attr("arbor.tool.waiting").is_some() {
                extra.push("waiting".to_owned());
            }
            if let Some(e) = s.attr("error.type") {
                extra.push(format!("error={e}"));
            }
            if !s.links.is_empty() {
                extra.push(format!("links={}", s.links.len()));
            }
            out.push_str(&format!(
                "{}{} [{kind}] {}\n",
                "  ".repeat(depth),
                s.name,
                extra.join(" ")
            ));
            walk(spans, &s.id, depth + 1, out);
        }
    }
    let mut out = String::new();
    walk(spans, "", 0, &mut out);
    out
}

fn names(spans: &[Span]) -> Vec<String> {
    spans
        .iter()
        .map(|s| format!("{} ({} <- {})", s.name, s.id, s.parent))
        .collect()
}

#[test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn a_tree_and_its_resume_in_a_later_process_are_one_trace() {
    let (receiver, url) = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tree.toml"), TREE).unwrap();
    let run = arbor(
        dir.path(),
        Some(&url),
        &["run", "tree.toml", "--json", "-q"],
    );
    let report = json(&run);
    assert_eq!(report["status"], "suspended", "{report}");
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let first = receiver.spans();
    assert!(
        receiver
            .requests
            .lock()
            .unwrap()
            .iter()
            .all(|r| r == "POST /v1/traces HTTP/1.1 application/x-protobuf"
                || r == "POST /v1/metrics HTTP/1.1 application/x-protobuf"),
        "{:?}",
        receiver.requests.lock().unwrap()
    );

    // The first process: one trace, rooted at the root's run.
    let root_run = one(&first, "invoke_agent root");
    assert!(root_run.parent.is_empty(), "{root_run:?}");
    assert_eq!(root_run.kind, 1, "internal");
    assert_eq!(root_run.service, "arbor-test");
    assert!(
        first.iter().all(|s| s.trace == root_run.trace),
        "{:#?}",
        names(&first)
    );
    for s in &first {
        assert_eq!(
            s.attr("gen_ai.conversation.id"),
            Some(root.as_str()),
            "{s:?}"
        );
    }
    assert_eq!(root_run.attr("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(root_run.attr("gen_ai.provider.name"), Some("scripted"));
    assert_eq!(root_run.attr("gen_ai.agent.name"), Some("root"));
    assert_eq!(root_run.attr("arbor.run.status"), Some("suspended"));
    assert_eq!(root_run.int("gen_ai.usage.input_tokens"), 600);
    let chats: Vec<&Span> = first
        .iter()
        .filter(|s| s.parent == root_run.id && s.attr("gen_ai.operation.name") == Some("chat"))
        .collect();
    assert_eq!(chats.len(), 3, "{:#?}", names(&first));
    assert!(
        chats
            .iter()
            .all(|c| c.kind == 3 && c.name == "chat scripted"),
        "client"
    );
    for (child, mode) in [
        ("worker", "return_to_caller"),
        ("bg", "pass_control"),
        ("bad", "return_to_caller"),
        ("publisher", "return_to_caller"),
    ] {
        let call = one(&first, &format!("execute_tool spawn_agent {child}"));
        assert_eq!(call.parent, root_run.id, "{child}");
        assert_eq!(call.attr("gen_ai.tool.name"), Some("spawn_agent"));
        assert_eq!(call.attr("gen_ai.transfer.target.name"), Some(child));
        assert_eq!(call.attr("gen_ai.transfer.mode"), Some(mode));
        let run = one(&first, &format!("invoke_agent {child}"));
        assert_eq!(run.parent, call.id, "{child}'s run is under its spawn call");
        assert_eq!(run.attr("arbor.agent.depth"), Some("1"));
        assert_eq!(run.attr("arbor.agent.parent_id"), Some(root.as_str()));
    }
    let bad = one(&first, "invoke_agent bad");
    assert_eq!(bad.attr("error.type"), Some("provider_error"));
    assert_eq!(bad.status, 2, "error status");
    assert_eq!(
        one(&first, "execute_tool spawn_agent bad").attr("error.type"),
        Some("tool_error")
    );
    let publishing = one(&first, "execute_tool spawn_agent publisher");
    assert_eq!(
        publishing.attr("error.type"),
        None,
        "waiting is not failing"
    );
    assert_eq!(publishing.attr("arbor.tool.waiting"), Some("true"));
    let publisher = one(&first, "invoke_agent publisher");
    assert_eq!(publisher.attr("arbor.run.status"), Some("suspended"));
    // Its call waits for a decision: nothing ran, so no tool span yet.
    assert!(first.iter().all(|s| s.name != "execute_tool echo"));

    // A later process approves and resumes: its spans join the same trace.
    let pending = json(&arbor(dir.path(), None, &["approvals", &root, "--json"]));
    let id = pending["suspensions"][0]["pending"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        arbor(dir.path(), None, &["approve", &root, &id])
            .status
            .success()
    );
    let resumed = arbor(dir.path(), Some(&url), &["resume", &root, "--json"]);
    assert_eq!(json(&resumed)["status"], "succeeded");
    let all = receiver.spans();
    let later: Vec<Span> = all[first.len()..].to_vec();
    assert!(!later.is_empty());
    assert!(
        later.iter().all(|s| s.trace == root_run.trace),
        "{:#?}",
        names(&later)
    );
    let root_again = later
        .iter()
        .find(|s| s.name == "invoke_agent root")
        .unwrap();
    assert_eq!(root_again.attr("arbor.run.resumed"), Some("true"));
    assert_eq!(
        root_again.parent, root_run.id,
        "continues the attempt before"
    );
    assert!(
        root_again
            .links
            .contains(&(root_run.trace.clone(), root_run.id.clone()))
    );
    let publisher_again = later
        .iter()
        .find(|s| s.name == "invoke_agent publisher")
        .unwrap();
    assert!(
        publisher_again
            .links
            .contains(&(publisher.trace.clone(), publisher.id.clone())),
        "{publisher_again:?}"
    );
    assert_eq!(publisher_again.attr("arbor.run.status"), Some("succeeded"));
    assert_eq!(
        one(&later, "execute_tool echo").parent,
        publisher_again.id,
        "the approved call ran in the resumed attempt"
    );

    // Own usage: the agent spans and the chat spans each sum to the tree's total.
    let tree: Value =
        serde_json::from_slice(&arbor(dir.path(), None, &["tree", &root, "--json"]).stdout)
            .unwrap();
    let total: u64 = tree["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["usage"]["own"]["input_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 1100);
    for op in ["invoke_agent", "chat"] {
        let sum: u64 = all
            .iter()
            .filter(|s| s.attr("gen_ai.operation.name") == Some(op))
            .map(|s| s.int("gen_ai.usage.input_tokens"))
            .sum();
        assert_eq!(sum, total, "{op}");
    }
    assert_eq!(root_again.int("arbor.usage.subtree.input_tokens"), total);

    eprintln!("{}", render(&all));

    // The same run as metrics: each process exported its counts at exit.
    let m = |name: &str, attrs: &str| receiver.metric(name, attrs);
    assert_eq!(m("arbor.agent.runs", "role=root,status=suspended"), 1.0);
    assert_eq!(m("arbor.agent.runs", "role=root,status=succeeded"), 1.0);
    assert_eq!(
        m("arbor.agent.runs", "role=child,status=failed"),
        1.0,
        "bad"
    );
    assert_eq!(
        m("arbor.agent.runs", "role=child,status=suspended"),
        1.0,
        "publisher"
    );
    assert_eq!(
        m("arbor.agent.runs", "role=child,status=succeeded"),
        3.0,
        "worker, bg, publisher"
    );
    assert_eq!(m("arbor.tokens", "kind=input,scope=own") as u64, total);
    assert_eq!(
        m("arbor.tokens", "kind=input,scope=attributed"),
        100.0,
        "the children's"
    );
    assert_eq!(
        m(
            "arbor.provider.request.duration",
            "provider=scripted,status=error"
        ),
        1.0
    );
    assert!(m("arbor.store.commit.duration", "") >= 10.0);
}

/// The run's own duration as its progress line reports it (`root: run succeeded (…): …, 12.3 ms`).
fn run_ms(stderr: &str) -> f64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("root: run succeeded"))
        .unwrap_or_else(|| panic!("no run line in {stderr}"));
    let last = line.rsplit(", ").next().unwrap();
    let (n, unit) = last.split_once(' ').unwrap();
    let n: f64 = n.replace(',', "").parse().unwrap();
    match unit {
        "ms" => n,
        "s" => n * 1000.0,
        other => panic!("unit {other} in {line}"),
    }
}

/// The same tree with no exporter, with the collector's port closed, and with a collector
/// that accepts and never answers: each run succeeds and takes as long (the figures are
/// printed); the process's exit waits for nothing when the collector is down and at most
/// the flush bound (1 s) when it never answers.
#[test]
fn a_collector_down_or_silent_neither_fails_nor_holds_up_a_run() {
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for s in silent.incoming().flatten() {
            keep.lock().unwrap().push(s);
        }
    });
    let simple = TREE
        .replace("[supervisor]\napprovals = true\n", "")
        .replace(", \"publisher\"]", "]");
    let mut figures = Vec::new();
    for round in 0..3 {
        for (label, endpoint) in [
            ("none", None),
            ("closed", Some(closed.as_str())),
            ("silent", Some(silent_url.as_str())),
        ] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("tree.toml"), &simple).unwrap();
            let started = Instant::now();
            let out = arbor(dir.path(), endpoint, &["run", "tree.toml"]);
            let wall = started.elapsed().as_secs_f64() * 1000.0;
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(out.status.success(), "{label}: {stderr}");
            if label == "closed" {
                assert_eq!(
                    stderr.matches("traces could not be exported").count(),
                    1,
                    "logged once: {stderr}"
                );
            }
            figures.push((round, label, run_ms(&stderr), wall));
        }
    }
    for f in &figures {
        eprintln!(
            "round {}: {:>6}: run {:>7.1} ms, process {:>7.1} ms",
            f.0, f.1, f.2, f.3
        );
    }
    let best = |label: &str, pick: fn(&(usize, &str, f64, f64)) -> f64| {
        figures
            .iter()
            .filter(|f| f.1 == label)
            .map(pick)
            .fold(f64::MAX, f64::min)
    };
    let (none_run, none_wall) = (best("none", |f| f.2), best("none", |f| f.3));
    for label in ["closed", "silent"] {
        let run = best(label, |f| f.2);
        assert!(
            run < none_run + 100.0,
            "{label}: run {run} ms vs {none_run} ms without a collector"
        );
    }
    let closed_wall = best("closed", |f| f.3);
    assert!(
        closed_wall < none_wall + 500.0,
        "closed: {closed_wall} ms vs {none_wall} ms"
    );
    let silent_wall = best("silent", |f| f.3);
    assert!(
        silent_wall < none_wall + 1_500.0,
        "silent: {silent_wall} ms vs {none_wall} ms"
    );
}

/// A run a SIGKILL cut off is continued by `arbor resume` in a new process: its start entry
/// kept the trace context, and the continuing run joins that trace, under the cut-off
/// attempt's span and linked to it.
#[test]
fn a_run_continued_after_a_crash_joins_the_trace_it_was_cut_from() {
    use std::io::BufRead as _;
    let (receiver, url) = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let slow = r#"
task = "crash me"
root = "root"

[agents.root]
[[agents.root.turns]]
delay_ms = 1500
text = "at last"
"#;
    std::fs::write(dir.path().join("slow.toml"), slow).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["run", "slow.toml"])
        .current_dir(dir.path())
        .env_remove("ARBOR_LOG")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &url)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let root = loop {
        let line = lines.next().unwrap().unwrap();
        if let Some(rest) = line.strip_prefix("root: run started (") {
            break rest
                .rsplit("session ")
                .next()
                .unwrap()
                .trim_end_matches(')')
                .to_owned();
        }
    };
    child.kill().unwrap();
    child.wait().unwrap();

    let log = arbor(dir.path(), None, &["log", &root, "--json"]);
    assert!(
        log.status.success(),
        "{}",
        String::from_utf8_lossy(&log.stderr)
    );
    let started: Value = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["kind"] == "run_started")
        .unwrap();
    let stored = started["trace"]
        .as_str()
        .unwrap_or_else(|| panic!("no trace in {started}"));
    let parts: Vec<&str> = stored.split('-').collect();
    let (trace, span) = (parts[1].to_owned(), parts[2].to_owned());

    // The kill came during the turn's delay: the continuing run asks it again.
    let out = arbor(dir.path(), Some(&url), &["resume", &root, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = receiver.spans();
    let continued = one(&spans, "invoke_agent root");
    assert_eq!(continued.trace, trace, "the same trace");
    assert_eq!(continued.parent, span, "under the cut-off attempt");
    assert!(continued.links.contains(&(trace.clone(), span.clone())));
    assert_eq!(continued.attr("arbor.run.resumed"), Some("true"));
}
