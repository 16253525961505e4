//! Run checkpoints from arbitrary JSON: the value is stored in a `MemoryStore` as a run's
//! checkpoint, then read back the way a resume or `arbor approvals` reads it
//! (`approval::load`, `suspension`, `suspensions`) and decided (`approval::decide` with a
//! verdict for every pending id). Each step returns an error or a value, never panics.
#![no_main]

use arbor_core::approval::{self, RUN_NAMESPACE};
use arbor_protocol::{ApprovalDecision, RunId, SessionId, Verdict};
use arbor_store::{MemoryStore, Store};
use libfuzzer_sys::fuzz_target;

const VERDICTS: [Verdict; 4] = [
    Verdict::AllowOnce,
    Verdict::AllowForRun,
    Verdict::RejectOnce,
    Verdict::RejectForRun,
];

async fn exercise(value: serde_json::Value, pick: u8) {
    let store = MemoryStore::new();
    // The key is the run id the value names when it names one, else a fresh one.
    let run = value["run_id"]
        .as_str()
        .and_then(|s| s.parse::<RunId>().ok())
        .unwrap_or_else(RunId::new);
    if store
        .put_checkpoint(RUN_NAMESPACE, &run.to_string(), &value, 0)
        .await
        .is_err()
    {
        return;
    }
    let Ok(Some((version, mut checkpoint))) = approval::load(&store, run).await else {
        return;
    };
    let pending = checkpoint.pending();
    let _ = checkpoint.settled();
    let _ = checkpoint.claimed(u64::from(pick) << 40);
    let _ = checkpoint.clone().apply_sticky();
    let _ = approval::suspension(&store, run).await;
    let session = value["session_id"]
        .as_str()
        .and_then(|s| s.parse::<SessionId>().ok())
        .unwrap_or_else(SessionId::new);
    let _ = approval::suspensions(&store, session).await;
    let verdict = VERDICTS[usize::from(pick) % VERDICTS.len()];
    let decisions: Vec<ApprovalDecision> = pending
        .iter()
        .map(|p| ApprovalDecision::new(p.id.clone(), verdict))
        .collect();
    let _ = checkpoint.clone().decide(&decisions);
    let _ = approval::decide(&store, run, version, &decisions).await;
    if checkpoint.apply_sticky() {
        let _ = approval::save(&store, &checkpoint, version).await;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, json)) = data.split_first() else {
        return;
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(json) else {
        return;
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    rt.block_on(exercise(value, pick));
});
