//! Active-child slots: a counter that never overshoots and a guard that frees its slot
//! exactly once.
//!
//! A slot is reserved at admission and confirmed once the `before` hook has decided (at
//! once when there is no hook). A hook may lower `max_active_children` for its delegation
//! (a per-tenant quota): the slot is then confirmed only while fewer confirmed children than
//! the lowered cap are live, checked and counted in one atomic step, so concurrent hooks
//! never overshoot the lowered cap. Children still inside their hooks are not counted
//! against it: they may yet be refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::error::{CoreError, CoreResult, LimitInfo};

/// The live-children counter of a supervisor tree.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    active: AtomicU32,
    /// Slots whose delegation passed its `before` hook (a subset of `active`).
    confirmed: AtomicU32,
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
            slots.active.fetch_sub(1, Ordering::AcqRel);
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
}
