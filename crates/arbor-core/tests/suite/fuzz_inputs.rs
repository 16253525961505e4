//! Fuzz-style properties on stable Rust, so CI always runs them (the coverage-guided targets
//! are `fuzz/fuzz_targets/spawn_args.rs` and `checkpoint.rs`):
//!
//! - `spawn_agent`'s arguments, arbitrary JSON mixing the real keys, real and hostile values
//!   and stray keys, through the public tool against scripted children: every call returns a
//!   result or a `ToolError::ToModel`, never panics.
//! - A run checkpoint as stored JSON with its values replaced by hostile ones or its keys
//!   removed, read with `approval::load` from a `MemoryStore` and then listed and decided:
//!   every step returns a value or an error, never panics.

use arbor_core::approval::{self, RUN_NAMESPACE};
use arbor_core::supervisor::{ChildEntry, LimitsInput, Ownership, SpawnAgentTool, Supervisor};
use arbor_core::{Agent, DynTool, SessionRef, ToolContext, ToolError};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{ApprovalDecision, RunId, SessionId, Verdict};
use arbor_store::{MemoryStore, Store};
use proptest::prelude::*;
use serde_json::{Value, json};

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::from)),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map("[a-z_]{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A value for `key`: a real one most of the time, else anything.
fn value_for(key: &'static str) -> BoxedStrategy<Value> {
    let real: Vec<Value> = match key {
        "child_id" => vec![json!("research"), json!("write"), json!("ghost"), json!("")],
        "mode" => vec![
            json!("sync"),
            json!("async"),
            json!("message"),
            json!("later"),
        ],
        "lifetime" => vec![json!("task"), json!("session")],
        "report" => vec![json!("on-complete"), json!("milestones"), json!("stream")],
        "milestone" => vec![
            json!({"every_turns": 1}),
            json!({"every_turns": 0}),
            json!({"every_turns": u32::MAX}),
            json!({"every": 1}),
        ],
        "budget_share" => vec![
            json!(0.5),
            json!(0.0),
            json!(1.0),
            json!(-1.0),
            json!(1e308),
        ],
        "model" => vec![json!("small"), json!("large"), json!("huge")],
        "name" => vec![json!("a"), json!(""), json!("x".repeat(65)), json!("../x")],
        _ => vec![json!("go"), json!("")],
    };
    prop_oneof![3 => proptest::sample::select(real), 1 => any_json()].boxed()
}

const KEYS: [&str; 10] = [
    "child_id",
    "input",
    "thread_id",
    "name",
    "model",
    "mode",
    "lifetime",
    "report",
    "milestone",
    "budget_share",
];

fn spawn_arguments() -> impl Strategy<Value = Value> {
    let fields: Vec<_> = KEYS
        .iter()
        .map(|&k| proptest::option::weighted(0.6, value_for(k)).prop_map(move |v| (k, v)))
        .collect();
    (
        fields,
        proptest::option::weighted(0.1, ("[a-z]{1,6}", any_json())),
        0u8..10,
    )
        .prop_map(|(fields, stray, shape)| {
            let mut o = serde_json::Map::new();
            for (k, v) in fields {
                if let Some(v) = v {
                    o.insert(k.to_owned(), v);
                }
            }
            if let Some((k, v)) = stray {
                o.insert(k, v);
            }
            match shape {
                0 => Value::Array(vec![Value::Object(o)]),
                1 => Value::String("{\"child_id\": \"research\"}".into()),
                _ => Value::Object(o),
            }
        })
}

fn child(text: &str) -> Agent {
    Agent::builder("child")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            text,
        )
        .with_usage(7, 3)])))
        .build()
        .unwrap()
}

async fn spawn_call(arguments: Value) -> Result<String, ToolError> {
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(
            ChildEntry::agent("research", child("found it"))
                .description("reads sources")
                .model("small")
                .allow_models(["small", "large"]),
        )
        .child(ChildEntry::agent("write", child("written")))
        .limits(LimitsInput {
            max_active_children: Some(2),
            ..LimitsInput::default()
        })
        .build()
        .unwrap();
    let record = arbor_store::SessionRecord::new_root("parent", "parent", "scripted");
    sup.store().create_session(&record).await.unwrap();
    let ctx = ToolContext::new("parent", SessionRef::from(&record), RunId::new(), "c1");
    SpawnAgentTool::new(sup.delegator())
        .call_json(arguments, ctx)
        .await
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// A checkpoint with a call in every state, a child's pending decisions and run-wide rules.
fn checkpoint_json() -> Value {
    let run = RunId::new();
    let child_run = RunId::new();
    let call = |id: &str, name: &str| json!({"id": id, "name": name, "arguments": {"path": "a"}});
    json!({
        "session_id": SessionId::new(),
        "run_id": run,
        "turn": 2,
        "turns": 2,
        "tool_calls": 5,
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                  "cache_read_tokens": 0, "cache_write_tokens": 0},
        "text": "working",
        "limits": {"max_steps": 8, "max_tool_calls": 16, "max_tokens": 100000, "timeout_ms": 60000},
        "started_ms": 1,
        "calls": [
            {"call": call("c1", "write"), "approval_id": approval::own_id(run, "c1"),
             "state": {"state": "pending"}},
            {"call": call("c2", "read"), "approval_id": approval::own_id(run, "c2"),
             "state": {"state": "decided", "verdict": "allow_once", "reason": "ok"}},
            {"call": call("c3", "write"), "approval_id": approval::own_id(run, "c3"),
             "state": {"state": "in_flight", "since_ms": 5}},
            {"call": call("c4", "read"), "approval_id": approval::own_id(run, "c4"),
             "state": {"state": "done", "result": {"call_id": "c4", "name": "read",
                                                    "content": "x", "is_error": false}}},
            {"call": call("c5", "spawn_agent"), "approval_id": approval::own_id(run, "c5"),
             "state": {"state": "nested", "run_id": child_run, "session_id": SessionId::new(),
                       "pending": [{"id": "apr_9", "tool": "write", "arguments": {},
                                    "call_id": "k1", "path": ["writer"]}],
                       "decisions": []}},
        ],
        "sticky": [{"tool": "read", "path": [], "allow": true}],
        "caps": {"max_pending": 32, "max_sticky": 64},
    })
}

/// Replaces the `n`th leaf or removes the `n`th key (depth first, modulo the count).
fn damage(v: &mut Value, n: usize, with: Option<Value>) {
    let mut count = 0usize;
    fn walk(v: &mut Value, n: usize, count: &mut usize, with: &Option<Value>) -> bool {
        match v {
            Value::Array(a) => a.iter_mut().any(|x| walk(x, n, count, with)),
            Value::Object(o) => {
                let keys: Vec<String> = o.keys().cloned().collect();
                for k in keys {
                    if with.is_none() && *count == n {
                        o.remove(&k);
                        return true;
                    }
                    *count += 1;
                    if walk(&mut o[k.as_str()], n, count, with) {
                        return true;
                    }
                }
                false
            }
            leaf => {
                if let Some(w) = with
                    && *count == n
                {
                    *leaf = w.clone();
                    return true;
                }
                *count += 1;
                false
            }
        }
    }
    walk(v, n, &mut count, &with);
}

fn hostile() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        proptest::sample::select(vec![
            json!(u64::MAX),
            json!(u32::MAX),
            json!(0),
            json!(-1),
            json!(1e300),
            json!(""),
            json!("apr_"),
            json!([]),
            json!({}),
            Value::Null,
        ])
        .prop_map(Some),
        any_json().prop_map(Some),
    ]
}

async fn exercise_checkpoint(value: Value, pick: usize) {
    let store = MemoryStore::new();
    let run = value["run_id"]
        .as_str()
        .and_then(|s| s.parse::<RunId>().ok())
        .unwrap_or_default();
    store
        .put_checkpoint(RUN_NAMESPACE, &run.to_string(), &value, 0)
        .await
        .unwrap();
    let Ok(Some((version, mut checkpoint))) = approval::load(&store, run).await else {
        return;
    };
    let pending = checkpoint.pending();
    let _ = checkpoint.settled();
    let _ = checkpoint.claimed(u64::MAX);
    let _ = checkpoint.clone().apply_sticky();
    let _ = approval::suspension(&store, run).await;
    let _ = approval::suspensions(&store, checkpoint.session_id).await;
    let verdicts = [
        Verdict::AllowOnce,
        Verdict::AllowForRun,
        Verdict::RejectOnce,
        Verdict::RejectForRun,
    ];
    let decisions: Vec<ApprovalDecision> = pending
        .iter()
        .map(|p| ApprovalDecision::new(p.id.clone(), verdicts[pick % 4]))
        .collect();
    let _ = checkpoint.clone().decide(&decisions);
    let _ = approval::decide(&store, run, version, &decisions).await;
    if checkpoint.apply_sticky() {
        let _ = approval::save(&store, &checkpoint, version).await;
    }
}

#[test]
fn the_seed_checkpoint_loads_and_decides() {
    runtime().block_on(async {
        let value = checkpoint_json();
        let run: RunId = value["run_id"].as_str().unwrap().parse().unwrap();
        let store = MemoryStore::new();
        store
            .put_checkpoint(RUN_NAMESPACE, &run.to_string(), &value, 0)
            .await
            .unwrap();
        let s = approval::suspension(&store, run).await.unwrap();
        assert_eq!(s.pending.len(), 2);
        let decisions: Vec<_> = s
            .pending
            .iter()
            .map(|p| ApprovalDecision::new(p.id.clone(), Verdict::AllowForRun))
            .collect();
        let left = approval::decide(&store, run, s.version, &decisions)
            .await
            .unwrap();
        assert!(left.pending.is_empty());
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn spawn_arguments_never_panic(arguments in spawn_arguments()) {
        let r = runtime().block_on(spawn_call(arguments.clone()));
        prop_assert!(
            matches!(r, Ok(_) | Err(ToolError::ToModel(_))),
            "{arguments} gave {r:?}"
        );
    }

    #[test]
    fn damaged_checkpoints_never_panic(
        edits in proptest::collection::vec((0usize..120, hostile()), 1..5),
        pick in 0usize..4,
    ) {
        let mut value = checkpoint_json();
        for (n, with) in edits {
            damage(&mut value, n, with);
        }
        runtime().block_on(exercise_checkpoint(value, pick));
    }

    #[test]
    fn arbitrary_json_checkpoints_never_panic(value in any_json(), pick in 0usize..4) {
        runtime().block_on(exercise_checkpoint(value, pick));
    }
}
