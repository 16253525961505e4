//! Which trees this process runs now, and the hand-over from a run to hosting.
//!
//! A tree is claimed ([`Running`]) while a run, a resume, a hosted period or an offline
//! delete holds it, so no second one starts here. When a run ends, its claim either ends
//! (the tree is released) or, when a host's call reached the tree while the run went on,
//! turns into a hosted one held until the tree is idle: the host's children never see
//! the run's end, and a resume meanwhile hears "hosted", never "still going".

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbor_core::process::SupervisorProcess;
use arbor_core::supervisor::Supervisor;
use arbor_protocol::SessionId;
use tokio_util::sync::CancellationToken;

/// A tree claimed in this process.
#[derive(Debug, Clone, Default)]
pub(super) struct LiveTree {
    pub(super) token: Option<CancellationToken>,
    pub(super) supervisor: Option<Supervisor>,
    /// Hosted for a host's calls (no root run): released once idle.
    pub(super) hosted: bool,
    /// A host's call used the run's supervisor: the run's end hands over to hosting.
    host_wanted: bool,
    /// The run has ended and its tree is being released: a new claim waits for it.
    closing: bool,
    /// The root's run stopped on a call waiting for a decision while runs of its tree go
    /// on: a resume meanwhile is taken here, in place ([`Running::wake_quieting`]).
    quieting: bool,
    /// A resume was asked for while the tree quieted.
    resume_wanted: bool,
    /// Wakes the quieting run for it (a new one each time the tree quiets).
    wake: Arc<tokio::sync::Notify>,
    /// Told by the quieting run once a resume it took has begun (the run's last result
    /// dropped): the request that asked answers then.
    begun: Arc<tokio::sync::Notify>,
}

/// How a quieting tree's wait ended ([`Running::settle`]).
#[derive(Debug, Clone)]
pub(super) enum Settled {
    /// A resume was asked for: the root goes on here; the request that asked waits for
    /// this to be told it has begun.
    Resume(Arc<tokio::sync::Notify>),
    /// Nothing more runs: the run has ended, hosted (`true`) or being released, as
    /// [`Running::run_ended`] says.
    Ended(bool),
}

pub(super) type Trees = Arc<std::sync::Mutex<HashMap<SessionId, LiveTree>>>;

pub(super) fn trees(t: &Trees) -> std::sync::MutexGuard<'_, HashMap<SessionId, LiveTree>> {
    t.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long a new claim waits for a tree whose run ended to be released.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// Why a tree could not be claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Busy {
    /// Hosted for a host's calls until idle (or a run that a host's call reached: the
    /// tree is hosted once it ends).
    Hosted,
    /// A run (or a resume, or a delete) holds it.
    Running,
}

/// What a host's call gets on a tree this process holds already.
pub(super) enum Joined {
    /// The supervisor of the run or hosted period in progress.
    Live(Supervisor),
    /// The tree was claimed meanwhile for the host.
    Claimed(Running),
    /// Started or resumed, its supervisor not built yet.
    Starting,
}

/// Holds a root in the set of trees while its run (or hosted period) goes on.
#[derive(Debug)]
pub(super) struct Running {
    set: Trees,
    root: SessionId,
}

impl Running {
    /// Claims `root`, or `None` if this process holds it already.
    pub(super) fn claim(set: &Trees, root: SessionId) -> Option<Self> {
        let mut map = trees(set);
        if map.contains_key(&root) {
            return None;
        }
        map.insert(root, LiveTree::default());
        Some(Self {
            set: set.clone(),
            root,
        })
    }

    /// Claims `root`, waiting (at most [`RELEASE_WAIT`]) for a tree whose run has ended to
    /// be released; a live run or a hosted period is refused at once.
    pub(super) async fn claim_when_released(set: &Trees, root: SessionId) -> Result<Self, Busy> {
        let deadline = Instant::now() + RELEASE_WAIT;
        loop {
            if let Some(claim) = Self::claim(set, root) {
                return Ok(claim);
            }
            match trees(set).get(&root) {
                None => continue,
                // Held for the host until idle once the run ends, whatever a run does now.
                Some(t) if t.hosted || t.host_wanted => return Err(Busy::Hosted),
                Some(t) if !t.closing => return Err(Busy::Running),
                Some(_) => {}
            }
            if Instant::now() >= deadline {
                return Err(Busy::Running);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// For a host's call: the supervisor of what holds `root` now (a run's is kept past
    /// its end for the host), or a claim once a finished run has released the tree.
    pub(super) async fn join_for_host(set: &Trees, root: SessionId) -> Joined {
        let deadline = Instant::now() + RELEASE_WAIT;
        loop {
            if let Some(claim) = Self::claim(set, root) {
                return Joined::Claimed(claim);
            }
            {
                let mut map = trees(set);
                match map.get_mut(&root) {
                    None => continue,
                    Some(t) if !t.closing => {
                        let Some(sup) = t.supervisor.clone() else {
                            return Joined::Starting;
                        };
                        t.host_wanted = true;
                        return Joined::Live(sup);
                    }
                    Some(_) => {}
                }
            }
            if Instant::now() >= deadline {
                return Joined::Starting;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The supervisor of `root`'s run going on now (not closing), the tree then held past
    /// the run's end until idle, as for a host's call: what a child resumed in it needs.
    pub(super) fn live_held(set: &Trees, root: SessionId) -> Option<Supervisor> {
        let mut map = trees(set);
        let t = map.get_mut(&root).filter(|t| !t.closing)?;
        let sup = t.supervisor.clone()?;
        t.host_wanted = true;
        Some(sup)
    }

    /// Records what a cancel needs.
    pub(super) fn live(&self, token: &CancellationToken, built: &crate::tree::Built) {
        if let Some(t) = trees(&self.set).get_mut(&self.root) {
            t.token = Some(token.clone());
            t.supervisor = built.supervisor.clone();
        }
    }

    /// Marks the tree hosted (no root run: a cancel of the root cancels nothing).
    pub(super) fn hosted(&self) {
        if let Some(t) = trees(&self.set).get_mut(&self.root) {
            t.hosted = true;
        }
    }

    /// The run has ended: `true` when a host's call reached the tree meanwhile (it is
    /// hosted from now on, until idle), `false` when it is being released.
    pub(super) fn run_ended(&self) -> bool {
        let mut map = trees(&self.set);
        map.get_mut(&self.root).is_some_and(ended)
    }

    /// The root's run stopped on a call waiting for a decision while runs of its tree go
    /// on: until [`settle`](Self::settle), a resume of the tree wakes what this returns
    /// instead of waiting for the tree's release.
    pub(super) fn quiet_down(&self) -> Arc<tokio::sync::Notify> {
        let mut map = trees(&self.set);
        let Some(t) = map.get_mut(&self.root) else {
            return Arc::default();
        };
        t.quieting = true;
        t.resume_wanted = false;
        t.wake = Arc::default();
        t.begun = Arc::default();
        t.wake.clone()
    }

    /// Ends the tree's quieting: [`Settled::Resume`] when a resume was asked for meanwhile
    /// (it goes on here), else the run has ended ([`run_ended`](Self::run_ended)), in the
    /// same step, so a resume asked for now waits for the release instead of being lost.
    pub(super) fn settle(&self) -> Settled {
        let mut map = trees(&self.set);
        let Some(t) = map.get_mut(&self.root) else {
            return Settled::Ended(false);
        };
        t.quieting = false;
        if std::mem::take(&mut t.resume_wanted) {
            return Settled::Resume(t.begun.clone());
        }
        Settled::Ended(ended(t))
    }

    /// Whether `root`'s tree quiets now (its root's run suspended, runs of it still going).
    pub(super) fn quieting(set: &Trees, root: SessionId) -> bool {
        trees(set).get(&root).is_some_and(|t| t.quieting)
    }

    /// Asks `root`'s quieting tree to resume its root in place: what tells when the resume
    /// has begun, or `None` when it no longer quiets (its run has ended meanwhile: a claim
    /// waits for its release).
    pub(super) fn wake_quieting(set: &Trees, root: SessionId) -> Option<Arc<tokio::sync::Notify>> {
        let mut map = trees(set);
        let t = map.get_mut(&root).filter(|t| t.quieting)?;
        t.resume_wanted = true;
        t.wake.notify_one();
        Some(t.begun.clone())
    }
}

/// Marks `t`'s run ended: hosted when a host's call reached it, else being released.
fn ended(t: &mut LiveTree) -> bool {
    if t.host_wanted {
        t.hosted = true;
    } else {
        t.closing = true;
    }
    t.host_wanted
}

impl Drop for Running {
    fn drop(&mut self) {
        trees(&self.set).remove(&self.root);
    }
}

/// How long a hosted tree stays after its last child ended: `ARBOR_HOST_IDLE_MS`, else 30 s.
pub(super) fn host_idle() -> Duration {
    let ms = std::env::var("ARBOR_HOST_IDLE_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(30_000);
    Duration::from_millis(ms.max(100))
}

/// Waits until `sup` has had no child and no handle running for [`host_idle`], or `token`
/// is cancelled.
pub(super) async fn hold_until_idle(sup: &Supervisor, token: &CancellationToken) {
    let idle = host_idle();
    let mut quiet_since = Instant::now();
    loop {
        tokio::select! {
            () = token.cancelled() => break,
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        if sup.active_children() > 0 || sup.running_handles() > 0 {
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= idle {
            break;
        }
    }
}
