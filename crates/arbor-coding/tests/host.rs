//! What `run_command`'s commands can reach of the host: not its environment nor its memory
//! (Linux), and nothing they start outlives a call whose future is dropped.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use arbor_coding::{ToolOptions, Workdir, coding_tool_with};
use arbor_core::{SessionRef, ToolContext, ToolError};
use arbor_protocol::RunId;
use serde_json::{Value, json};

fn ctx() -> ToolContext {
    let record = arbor_store::SessionRecord::new_root("s", "coder", "scripted");
    ToolContext::new("coder", SessionRef::from(&record), RunId::new(), "c1")
}

async fn run(dir: &Workdir, protect: bool, argv: &[&str]) -> Result<Value, ToolError> {
    let tool = coding_tool_with(
        dir,
        "run_command",
        &ToolOptions::new().protect_host(protect),
    )
    .unwrap();
    let out = tool.call_json(json!({ "argv": argv }), ctx()).await?;
    Ok(serde_json::from_str(&out).unwrap())
}

const SECRET_KEY: &str = "ARBOR_TEST_PROVIDER_KEY";
const SECRET: &str = "sk-test-0f9e8d7c6b5a";

/// `/proc/<pid>/environ` shows the environment a process started with: this test runs its
/// body in a fresh copy of the test binary started with the secret in its environment, as a
/// host started with its provider keys would be.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_command_cannot_read_the_hosts_environment_or_memory() {
    if std::env::var_os(SECRET_KEY).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_command_cannot_read_the_hosts_environment_or_memory",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(SECRET_KEY, SECRET)
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(stdout.contains("1 passed"), "{stdout}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = Workdir::new(tmp.path()).unwrap();
    let read_parent = [
        "sh",
        "-c",
        "echo \"parent=$PPID\"; cat /proc/$PPID/environ; echo \"environ=$?\"; \
         head -c 16 /proc/$PPID/mem >/dev/null; echo \"mem=$?\"",
    ];
    let parent = format!("parent={}\n", std::process::id());

    // Unprotected (a host that opted out), the secret is there to read: the check below
    // looks where a command would.
    let open = run(&dir, false, &read_parent).await.unwrap();
    let stdout = open["stdout"].as_str().unwrap();
    assert!(stdout.starts_with(&parent), "{stdout}");
    assert!(stdout.contains(&format!("{SECRET_KEY}={SECRET}")), "{open}");

    // Protected (the default): refused by the kernel.
    let shut = run(&dir, true, &read_parent).await.unwrap();
    let (stdout, stderr) = (
        shut["stdout"].as_str().unwrap(),
        shut["stderr"].as_str().unwrap(),
    );
    assert_eq!(stdout, format!("{parent}environ=1\nmem=1\n"), "{shut}");
    assert!(!stderr.contains(SECRET), "{stderr}");
    let pid = std::process::id();
    assert_eq!(
        stderr,
        format!(
            "cat: /proc/{pid}/environ: Permission denied\n\
             head: cannot open '/proc/{pid}/mem' for reading: Permission denied\n"
        )
    );
}

/// A command sees the three standard streams and nothing else of the host's open files.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_command_inherits_only_the_standard_streams() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = Workdir::new(tmp.path()).unwrap();
    // A descriptor the host holds without close-on-exec (opened by foreign code, or
    // inherited from whatever started it).
    let open = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
    rustix::io::fcntl_setfd(&open, rustix::io::FdFlags::empty()).unwrap();
    let out = run(&dir, true, &["sh", "-c", "ls /proc/$$/fd"])
        .await
        .unwrap();
    assert_eq!(out["stdout"], "0\n1\n2\n", "{out}");
}

/// Whether `pid` is still running (gone or a zombie: not).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit_once(") ").map(|(_, rest)| &rest[..1]);
            state != Some("Z")
        }
    }
}

/// Waits at most `bound` for `pid` to stop running.
async fn stops_within(pid: u32, bound: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < bound {
        if !running(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Waits for the command to have written its background process's pid.
async fn background_pid(path: &std::path::Path) -> u32 {
    for _ in 0..250 {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the command did not start its background process");
}

#[cfg(unix)]
#[tokio::test]
async fn a_dropped_call_kills_what_its_command_started() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = Workdir::new(tmp.path()).unwrap();
    let tool = coding_tool_with(&dir, "run_command", &ToolOptions::new()).unwrap();
    // A run cancelled (or timed out) above the tool drops the call's future half-way.
    let mut call = Box::pin(tool.call_json(
        json!({
            "argv": ["sh", "-c", "sleep 60 & echo $! > bg.pid; wait"],
            "timeout_ms": 60_000,
        }),
        ctx(),
    ));
    let pid_file = tmp.path().join("bg.pid");
    let pid = tokio::select! {
        r = &mut call => panic!("the command ended early: {r:?}"),
        pid = background_pid(&pid_file) => pid,
    };
    assert!(running(pid));
    drop(call);
    assert!(
        stops_within(pid, Duration::from_secs(2)).await,
        "the background process {pid} outlived the dropped call"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_call_dropped_by_a_timeout_kills_its_command() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = Workdir::new(tmp.path()).unwrap();
    let tool = coding_tool_with(&dir, "run_command", &ToolOptions::new()).unwrap();
    let call = tool.call_json(
        json!({ "argv": ["sh", "-c", "sleep 60 & echo $! > bg.pid; wait"] }),
        ctx(),
    );
    let r = tokio::time::timeout(Duration::from_millis(700), call).await;
    assert!(r.is_err(), "{r:?}");
    let pid = background_pid(&tmp.path().join("bg.pid")).await;
    assert!(
        stops_within(pid, Duration::from_secs(2)).await,
        "the background process {pid} outlived the dropped call"
    );
}
