//! Which process holds something: a run's resume claim records its process, so a later
//! process can tell a claim whose holder died (a crash, SIGKILL) from one still at work, and
//! take it over at once instead of waiting for it to expire.
//!
//! A process is named by its host, its id and its start time (Linux: clock ticks since boot,
//! from `/proc/<pid>/stat`), so an id reused by a later process is not mistaken for the
//! holder. Liveness is only judged on the same host: a holder on another host counts as alive
//! until its claim expires.

use serde::{Deserialize, Serialize};

/// A process, as a claim records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its start time in clock ticks since boot, where the platform tells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u64>,
}

impl ProcessId {
    /// This process.
    pub fn current() -> Self {
        let pid = std::process::id();
        Self {
            host: host_name(),
            pid,
            start: start_time(pid),
        }
    }

    /// Whether it is known to have ended: same host, and no process with its id and start
    /// time exists. Unknown (another host, no `/proc`) is not dead.
    pub fn is_dead(&self) -> bool {
        if self.host != host_name() || !std::path::Path::new("/proc/self/stat").exists() {
            return false;
        }
        if self.pid == std::process::id() {
            return false;
        }
        match (start_time(self.pid), self.start) {
            (None, _) => true,
            (Some(now), Some(then)) => now != then,
            (Some(_), None) => false,
        }
    }
}

/// The start time of process `pid` in clock ticks since boot (Linux).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22, counted after the command name (which may hold spaces) closes.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// This host's name: `ARBOR_HOST` when set (for machines or containers that share a
/// hostname and a store, whose process ids must not be compared), else
/// `/proc/sys/kernel/hostname`, else `/etc/hostname`, else `localhost`.
fn host_name() -> String {
    if let Ok(name) = std::env::var("ARBOR_HOST")
        && !name.trim().is_empty()
    {
        return name.trim().to_owned();
    }
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_gone_one_is_dead() {
        let me = ProcessId::current();
        assert!(!me.is_dead());
        let gone = ProcessId {
            pid: 0x3fff_fff0,
            ..me.clone()
        };
        assert!(gone.is_dead());
        let reused = ProcessId {
            start: me.start.map(|s| s + 1),
            ..me.clone()
        };
        if cfg!(target_os = "linux") {
            // Our own pid is never judged dead, whatever the start time says.
            assert!(!reused.is_dead());
        }
        let elsewhere = ProcessId {
            host: format!("{}-other", me.host),
            ..gone
        };
        assert!(!elsewhere.is_dead(), "another host's process is not judged");
    }
}
