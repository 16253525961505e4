//! What a command started by `run_command` can reach of the host that started it, and how
//! its process group is stopped.
//!
//! The command runs as the host's user with the host as its parent. Its environment is
//! cleared (see [`crate::tools`]), but on Linux a process of the same user could still read
//! the host's whole environment, provider keys included, from `/proc/<ppid>/environ`, its
//! memory from `/proc/<ppid>/mem`, and follow its open files through `/proc/<ppid>/fd`. So,
//! unless a host opts out ([`crate::ToolOptions::protect_host`]), before the first command
//! is started:
//!
//! - the host process is made non-dumpable ([`protect_host`], `PR_SET_DUMPABLE` = 0): its
//!   `/proc/<pid>/` files then belong to root and the kernel refuses the ptrace-mode access
//!   they need to anyone without `CAP_SYS_PTRACE`;
//! - every descriptor the host has open beyond stdin, stdout and stderr is marked
//!   close-on-exec before each command starts (Rust opens its own that way, but foreign
//!   code and descriptors the host inherited may not be), so a command inherits the three
//!   standard streams only;
//! - each command is started from a short-lived thread that first drops, from its
//!   capability bounding, inheritable and ambient sets, the capabilities that would get
//!   past that ([`SHED`]: `CAP_SYS_PTRACE`, `CAP_SYS_ADMIN`, `CAP_PERFMON`, and the ones that
//!   read memory another way: `CAP_BPF`, `CAP_SYS_RAWIO`, `CAP_SYS_MODULE`). This only
//!   matters for a host that runs as root: a command of a non-root host has none of them.
//!
//! The trade-off: a non-dumpable host writes no core dump and cannot be attached to by a
//! debugger or `strace` of the same user (root still can). On other platforms nothing is
//! changed. What is not covered: `/proc/<pid>/cmdline` stays world-readable (keep secrets
//! out of the host's arguments), and a root command keeps root's file access (it can read
//! the host's configuration files): run the host as an unprivileged user.

use std::sync::OnceLock;

use tokio::process::{Child, Command};

/// The capabilities a command is started without (Linux): each lets a process read
/// another's memory despite it being non-dumpable.
#[cfg(target_os = "linux")]
pub const SHED: [rustix::thread::CapabilitySet; 6] = {
    use rustix::thread::CapabilitySet as C;
    [
        C::SYS_PTRACE,
        C::SYS_ADMIN,
        C::PERFMON,
        C::BPF,
        C::SYS_RAWIO,
        C::SYS_MODULE,
    ]
};

static PROTECTED: OnceLock<Result<(), String>> = OnceLock::new();

/// Makes this process unreadable by the processes it starts (Linux: `PR_SET_DUMPABLE` = 0;
/// elsewhere it does nothing). Done once per process, and not undone; `run_command` calls
/// it before its first command unless the host opted out. A host may call it itself at
/// start-up. The error says why the kernel refused.
pub fn protect_host() -> Result<(), String> {
    PROTECTED.get_or_init(make_undumpable).clone()
}

#[cfg(target_os = "linux")]
fn make_undumpable() -> Result<(), String> {
    use rustix::process::{DumpableBehavior, set_dumpable_behavior};
    match set_dumpable_behavior(DumpableBehavior::NotDumpable) {
        Ok(()) => {
            tracing::debug!("host process made non-dumpable");
            Ok(())
        }
        Err(e) => Err(format!("cannot make the host process non-dumpable: {e}")),
    }
}

#[cfg(not(target_os = "linux"))]
fn make_undumpable() -> Result<(), String> {
    tracing::debug!("host protection is only available on Linux");
    Ok(())
}

/// Starts `command`. With `shed` (Linux), from a fresh thread that first drops [`SHED`] and
/// marks the host's descriptors close-on-exec, so the command starts without those
/// capabilities and with stdio only; the thread ends right after. Must run inside a tokio
/// runtime.
pub(crate) async fn spawn(mut command: Command, shed: bool) -> std::io::Result<Child> {
    #[cfg(target_os = "linux")]
    if shed {
        let handle = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("arbor-run-command".into())
            .spawn(move || {
                shed_capabilities();
                // What the host opened without close-on-exec (foreign code, or descriptors
                // it inherited itself) is not passed on: only stdin, stdout and stderr.
                close_fds::set_fds_cloexec_threadsafe(3, &[]);
                let _runtime = handle.enter();
                // Nobody waits any more (the call was dropped): the command goes at once.
                if let Err(Ok(child)) = tx.send(command.spawn()) {
                    kill_group(child.id());
                }
            })?;
        return rx
            .await
            .map_err(|_| std::io::Error::other("the thread starting the command stopped"))?;
    }
    let _ = shed;
    command.spawn()
}

/// Drops [`SHED`] from the calling thread's bounding, inheritable and ambient sets; what the
/// thread is not allowed to drop (it lacks `CAP_SETPCAP`, the kernel predates a capability)
/// it did not have to give away in the first place.
#[cfg(target_os = "linux")]
fn shed_capabilities() {
    use rustix::thread as t;
    for cap in SHED {
        if t::capability_is_in_bounding_set(cap).unwrap_or(false)
            && let Err(e) = t::remove_capability_from_bounding_set(cap)
        {
            tracing::debug!(?cap, error = %e, "capability kept in the bounding set");
        }
        let _ = t::configure_capability_in_ambient_set(cap, false);
    }
    if let Ok(mut sets) = t::capabilities(None) {
        let all = SHED
            .iter()
            .fold(t::CapabilitySet::empty(), |acc, c| acc | *c);
        if sets.inheritable.intersects(all) {
            sets.inheritable.remove(all);
            if let Err(e) = t::set_capabilities(None, sets) {
                tracing::debug!(error = %e, "inheritable capabilities kept");
            }
        }
    }
}

/// Kills the whole process group led by `pid` (the command and whatever it started) with
/// SIGKILL. A group that is gone already is fine.
pub(crate) fn kill_group(pid: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    #[cfg(not(unix))]
    let _ = pid;
}

/// Kills a command's process group when dropped: whether the call finished, timed out, was
/// cancelled, or its future was dropped half-way (a run cancelled or timed out above it),
/// nothing the command started outlives it. Also stops the tasks reading its output.
#[derive(Debug)]
pub(crate) struct GroupGuard {
    pid: Option<u32>,
    readers: Option<tokio::task::AbortHandle>,
}

impl GroupGuard {
    /// Guards the group led by `pid`.
    pub(crate) fn new(pid: Option<u32>) -> Self {
        Self { pid, readers: None }
    }

    /// Also aborts `readers` on drop.
    pub(crate) fn readers(&mut self, readers: tokio::task::AbortHandle) {
        self.readers = Some(readers);
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.pid);
        if let Some(r) = self.readers.take() {
            r.abort();
        }
    }
}
