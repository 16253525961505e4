//! Active-child slots: a counter that never overshoots and a guard that frees its slot
//! exactly once; and the queue of delegations that asked to wait for one (`on_full =
//! "queue"`), served in the order they came.
//!
//! A freed slot goes to the first waiter that fits it before anyone else can take it: the
//! count does not drop, the slot changes hands (under the queue's lock, which a waiter also
//! holds while it joins, so a slot freed as one joins is never missed). A waiter that gave
//! up (cancelled, deleted) is skipped.
//!
//! A slot is reserved at admission and confirmed once the `before` hook has decided (at
//! once when there is no hook). A hook may lower `max_active_children` for its delegation
//! (a per-tenant quota): the slot is then confirmed only while fewer confirmed children than
//! the lowered cap are live, checked and counted in one atomic step, so concurrent hooks
//! never overshoot the lowered cap. Children still inside their hooks are not counted
//! against it: they may yet be refused.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::error::{CoreError, CoreResult, LimitInfo};

/// The live-children counter of a supervisor tree.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    active: AtomicU32,
    /// Slots whose delegation passed its `before` hook (a subset of `active`).
    confirmed: AtomicU32,
    /// Delegations waiting for a slot, first come first served.
    queue: Mutex<VecDeque<Waiter>>,
}

/// One delegation waiting for a slot: the cap it counts against, and where its slot goes.
#[derive(Debug)]
struct Waiter {
    max: u32,
    tx: oneshot::Sender<SlotGuard>,
}

/// A slot at once, or a place in the queue.
#[derive(Debug)]
pub(crate) enum Reserved {
    Now(SlotGuard),
    Queued(oneshot::Receiver<SlotGuard>),
}

fn queue_full(max: u32, active: u32, max_queued: u32, queued: usize) -> CoreError {
    CoreError::limit_error(
        format!(
            "Active child limit exceeded and the queue is full (max_active_children: maximum \
             {max}, observed {})",
            u64::from(active) + 1
        ),
        Some(LimitInfo {
            limit: arbor_protocol::LimitKind::MaxQueued,
            maximum: u64::from(max_queued),
            observed: u64::try_from(queued).unwrap_or(u64::MAX).saturating_add(1),
        }),
    )
}

fn limit_error(max: u32, current: u32) -> CoreError {
    CoreError::limit_error(
        "Active child limit exceeded",
        Some(LimitInfo {
            limit: arbor_protocol::LimitKind::MaxActiveChildren,
            maximum: u64::from(max),
            observed: u64::from(current) + 1,
        }),
    )
}

impl Slots {
    /// Reserves one slot if fewer than `max` are taken. Lock-free; concurrent callers never
    /// take more than `max` in total.
    pub(crate) fn reserve(self: &Arc<Self>, max: u32) -> CoreResult<SlotGuard> {
        let mut current = self.active.load(Ordering::Acquire);
        loop {
            if current >= max {
                return Err(limit_error(max, current));
            }
            match self.active.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(SlotGuard {
                        slots: Some(self.clone()),
                        confirmed: AtomicBool::new(false),
                    });
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Slots taken now.
    pub(crate) fn active(&self) -> u32 {
        self.active.load(Ordering::Acquire)
    }

    /// Delegations waiting for a slot now (not counting any that gave up).
    pub(crate) fn queued(&self) -> usize {
        self.lock_queue()
            .iter()
            .filter(|w| !w.tx.is_closed())
            .count()
    }

    fn lock_queue(&self) -> MutexGuard<'_, VecDeque<Waiter>> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A slot if fewer than `max` are taken; else a place in the queue, unless
    /// `max_queued` wait already (the refusal names both limits).
    pub(crate) fn reserve_or_wait(
        self: &Arc<Self>,
        max: u32,
        max_queued: u32,
    ) -> CoreResult<Reserved> {
        if let Ok(guard) = self.reserve(max) {
            return Ok(Reserved::Now(guard));
        }
        let mut queue = self.lock_queue();
        // Again under the queue's lock: a slot freed since is taken now, and one freed from
        // here on sees this waiter.
        if let Ok(guard) = self.reserve(max) {
            return Ok(Reserved::Now(guard));
        }
        queue.retain(|w| !w.tx.is_closed());
        if u32::try_from(queue.len()).unwrap_or(u32::MAX) >= max_queued {
            return Err(queue_full(max, self.active(), max_queued, queue.len()));
        }
        let (tx, rx) = oneshot::channel();
        queue.push_back(Waiter { max, tx });
        Ok(Reserved::Queued(rx))
    }

    /// Frees one slot: handed to the first waiter it fits (the count unchanged), else
    /// counted free.
    fn release(self: &Arc<Self>) {
        let mut queue = self.lock_queue();
        // Read again for each waiter: a plain reservation may have taken a slot meanwhile.
        while let Some(at) = queue
            .iter()
            .position(|w| self.active.load(Ordering::Acquire) <= w.max && !w.tx.is_closed())
        {
            let Some(waiter) = queue.remove(at) else {
                break;
            };
            let handed = SlotGuard {
                slots: Some(self.clone()),
                confirmed: AtomicBool::new(false),
            };
            match waiter.tx.send(handed) {
                Ok(()) => return,
                // It gave up meanwhile: its guard never held the slot.
                Err(mut unused) => unused.slots = None,
            }
        }
        queue.retain(|w| !w.tx.is_closed());
        self.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A delegation's slot: held, or awaited in the queue.
#[derive(Debug)]
pub(crate) struct SlotCell {
    guard: OnceLock<SlotGuard>,
    waiting: Mutex<Option<oneshot::Receiver<SlotGuard>>>,
}

impl SlotCell {
    /// A slot held.
    pub(crate) fn held(guard: SlotGuard) -> Self {
        let cell = Self {
            guard: OnceLock::new(),
            waiting: Mutex::new(None),
        };
        let _ = cell.guard.set(guard);
        cell
    }

    /// What [`Slots::reserve_or_wait`] gave.
    pub(crate) fn of(reserved: Reserved) -> Self {
        match reserved {
            Reserved::Now(guard) => Self::held(guard),
            Reserved::Queued(rx) => Self {
                guard: OnceLock::new(),
                waiting: Mutex::new(Some(rx)),
            },
        }
    }

    /// It waits in the queue (no slot yet).
    pub(crate) fn is_queued(&self) -> bool {
        self.guard.get().is_none()
    }

    /// The slot, waited for in the queue when it is not held yet: `Some(true)` once it came
    /// after a wait, `Some(false)` when it was held already, `None` when `cancel` fired (or
    /// the queue went away) first; its place is then given up.
    pub(crate) async fn acquire(&self, cancel: &CancellationToken) -> Option<bool> {
        if self.guard.get().is_some() {
            return Some(false);
        }
        let rx = self
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()?;
        tokio::select! {
            got = rx => {
                let guard = got.ok()?;
                let _ = self.guard.set(guard);
                Some(true)
            }
            () = cancel.cancelled() => None,
        }
    }

    /// [`SlotGuard::confirm`] of the held slot (nothing to confirm while it waits).
    pub(crate) fn confirm(&self, lowered: Option<u32>) -> CoreResult<()> {
        match self.guard.get() {
            Some(guard) => guard.confirm(lowered),
            None => Ok(()),
        }
    }
}

/// One reserved slot; dropping it frees the slot (and its confirmation) exactly once.
#[derive(Debug)]
pub(crate) struct SlotGuard {
    slots: Option<Arc<Slots>>,
    confirmed: AtomicBool,
}

impl SlotGuard {
    /// Confirms the slot once its delegation's `before` hook has decided. With `lowered`
    /// (the hook lowered `max_active_children`), it is confirmed only if fewer than
    /// `lowered` confirmed children are live, else the limit error naming the lowered
    /// maximum; the check and the count are one atomic step. Confirming twice is a no-op.
    pub(crate) fn confirm(&self, lowered: Option<u32>) -> CoreResult<()> {
        let Some(slots) = &self.slots else {
            return Ok(());
        };
        if self.confirmed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut current = slots.confirmed.load(Ordering::Acquire);
        loop {
            if let Some(max) = lowered
                && current >= max
            {
                return Err(limit_error(max, current));
            }
            match slots.confirmed.compare_exchange_weak(
                current,
                current + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.confirmed.store(true, Ordering::Release);
                    return Ok(());
                }
                Err(seen) => current = seen,
            }
        }
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if let Some(slots) = self.slots.take() {
            if *self.confirmed.get_mut() {
                slots.confirmed.fetch_sub(1, Ordering::AcqRel);
            }
            slots.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_overshoots_under_contention_and_frees_once() {
        let slots = Arc::new(Slots::default());
        let peak = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (slots, peak) = (slots.clone(), peak.clone());
                std::thread::spawn(move || {
                    let mut refused = 0;
                    for _ in 0..2_000 {
                        match slots.reserve(3) {
                            Ok(guard) => {
                                peak.fetch_max(slots.active(), Ordering::SeqCst);
                                drop(guard);
                            }
                            Err(e) => {
                                assert_eq!(e.limit().unwrap().maximum, 3);
                                refused += 1;
                            }
                        }
                    }
                    refused
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= 3);
        assert_eq!(slots.active(), 0);
    }

    #[test]
    fn a_lowered_cap_confirms_atomically_and_frees_once() {
        let slots = Arc::new(Slots::default());
        let peak = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (slots, peak) = (slots.clone(), peak.clone());
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        let Ok(guard) = slots.reserve(8) else {
                            continue;
                        };
                        match guard.confirm(Some(2)) {
                            Ok(()) => {
                                peak.fetch_max(
                                    slots.confirmed.load(Ordering::SeqCst),
                                    Ordering::SeqCst,
                                );
                                guard.confirm(Some(2)).unwrap();
                            }
                            Err(e) => assert_eq!(e.limit().unwrap().maximum, 2),
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= 2);
        assert_eq!(slots.active(), 0);
        assert_eq!(slots.confirmed.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_error_names_the_limit() {
        let slots = Arc::new(Slots::default());
        let _a = slots.reserve(1).unwrap();
        let err = slots.reserve(1).unwrap_err();
        assert_eq!(err.to_string(), "Active child limit exceeded");
        assert_eq!(err.kind(), crate::CoreErrorKind::Limit);
        let info = err.limit().unwrap();
        assert_eq!(
            (info.limit, info.maximum, info.observed),
            (arbor_protocol::LimitKind::MaxActiveChildren, 1, 2)
        );
    }

    fn queued(r: Reserved) -> oneshot::Receiver<SlotGuard> {
        match r {
            Reserved::Queued(rx) => rx,
            Reserved::Now(_) => panic!("expected a place in the queue"),
        }
    }

    #[test]
    fn a_freed_slot_goes_to_the_first_waiter_and_the_count_never_drops_between() {
        let slots = Arc::new(Slots::default());
        let first = slots.reserve(1).unwrap();
        let mut a = queued(slots.reserve_or_wait(1, 4).unwrap());
        let mut b = queued(slots.reserve_or_wait(1, 4).unwrap());
        assert_eq!(slots.queued(), 2);
        drop(first);
        // Handed over: still one taken, and a newcomer refusing to wait is refused.
        assert_eq!(slots.active(), 1);
        assert!(slots.reserve(1).is_err());
        let got_a = a.try_recv().expect("the first waiter got it");
        assert!(b.try_recv().is_err(), "the second still waits");
        drop(got_a);
        let got_b = b.try_recv().expect("then the second");
        assert_eq!(slots.active(), 1);
        drop(got_b);
        assert_eq!((slots.active(), slots.queued()), (0, 0));
    }

    #[test]
    fn a_waiter_that_gave_up_is_skipped_and_a_full_queue_names_both_limits() {
        let slots = Arc::new(Slots::default());
        let held = slots.reserve(1).unwrap();
        let gave_up = queued(slots.reserve_or_wait(1, 2).unwrap());
        let mut stays = queued(slots.reserve_or_wait(1, 2).unwrap());
        let e = slots.reserve_or_wait(1, 2).unwrap_err();
        assert_eq!(e.kind(), crate::CoreErrorKind::Limit);
        assert!(
            e.to_string()
                .contains("max_active_children: maximum 1, observed 2"),
            "{e}"
        );
        let info = e.limit().unwrap();
        assert_eq!(
            (info.limit, info.maximum, info.observed),
            (arbor_protocol::LimitKind::MaxQueued, 2, 3)
        );
        drop(gave_up);
        drop(held);
        assert!(stays.try_recv().is_ok(), "the one that stayed got the slot");
        assert_eq!((slots.active(), slots.queued()), (0, 0));
    }

    /// Joins and frees raced on many threads: the count never passes the cap, every waiter
    /// is served (a lost hand-over would leave a thread waiting for ever), and all is free
    /// at the end.
    #[test]
    fn joining_and_freeing_at_once_never_loses_a_waiter_or_overshoots() {
        let slots = Arc::new(Slots::default());
        let peak = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (slots, peak) = (slots.clone(), peak.clone());
                std::thread::spawn(move || {
                    for _ in 0..500 {
                        let guard = match slots.reserve_or_wait(2, 1_000).unwrap() {
                            Reserved::Now(g) => g,
                            Reserved::Queued(rx) => rx.blocking_recv().unwrap(),
                        };
                        peak.fetch_max(slots.active(), Ordering::SeqCst);
                        std::thread::yield_now();
                        drop(guard);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= 2);
        assert_eq!((slots.active(), slots.queued()), (0, 0));
    }
}
