//! Active-child slots: a counter that never overshoots and a guard that frees its slot
//! exactly once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{CoreError, CoreResult, LimitInfo};

/// The live-children counter of a supervisor tree.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    active: AtomicU32,
}

impl Slots {
    /// Reserves one slot if fewer than `max` are taken. Lock-free; concurrent callers never
    /// take more than `max` in total.
    pub(crate) fn reserve(self: &Arc<Self>, max: u32) -> CoreResult<SlotGuard> {
        let mut current = self.active.load(Ordering::Acquire);
        loop {
            if current >= max {
                return Err(CoreError::limit_error(
                    "Active child limit exceeded",
                    Some(LimitInfo {
                        limit: "max_active_children",
                        maximum: u64::from(max),
                        observed: u64::from(current) + 1,
                    }),
                ));
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

/// One reserved slot; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct SlotGuard {
    slots: Option<Arc<Slots>>,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if let Some(slots) = self.slots.take() {
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
    fn the_error_names_the_limit() {
        let slots = Arc::new(Slots::default());
        let _a = slots.reserve(1).unwrap();
        let err = slots.reserve(1).unwrap_err();
        assert_eq!(err.to_string(), "Active child limit exceeded");
        assert_eq!(err.kind(), crate::CoreErrorKind::Limit);
        let info = err.limit().unwrap();
        assert_eq!(
            (info.limit, info.maximum, info.observed),
            ("max_active_children", 1, 2)
        );
    }
}
