//! When to try a provider call again, and how long to wait: pure, so every case is a table
//! test.

use std::time::Duration;

/// Bounds on retries of one provider call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first (default 4).
    pub max_retries: u32,
    /// The first backoff (default 500 ms), doubled at each attempt.
    pub base_delay: Duration,
    /// The longest single backoff (default 30 s).
    pub max_delay: Duration,
    /// The most time spent waiting over all retries (default 120 s); a provider that asks
    /// to wait longer fails at once with its message.
    pub max_total: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_total: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// No retries.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// The wait before retry number `attempt` (from 0), or `None` to give up. `asked` is
    /// what the provider's `retry-after` said; `waited` what earlier retries waited; `jitter`
    /// a number in [0, 1).
    pub fn delay(
        &self,
        attempt: u32,
        asked: Option<Duration>,
        waited: Duration,
        jitter: f64,
    ) -> Option<Duration> {
        if attempt >= self.max_retries {
            return None;
        }
        let jitter = jitter.clamp(0.0, 1.0);
        let wait = match asked {
            // What the provider asked, plus up to 10 % (a wait past the budget gives up
            // before any arithmetic could overflow).
            Some(a) if a > self.max_total => return None,
            Some(a) => a.saturating_add(a.mul_f64(jitter * 0.1)),
            // Full jitter over an exponential ceiling.
            None => {
                let ceiling = self
                    .base_delay
                    .saturating_mul(1u32 << attempt.min(16))
                    .min(self.max_delay);
                ceiling.mul_f64(jitter)
            }
        };
        (waited.saturating_add(wait) <= self.max_total).then_some(wait)
    }
}

/// A number in [0, 1) that differs from call to call, without a random-number crate.
pub(crate) fn jitter() -> f64 {
    use std::collections::hash_map::RandomState;
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let h = RandomState::new().hash_one(n);
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A `retry-after-ms` or `retry-after` header value (seconds; an HTTP date is not read and
/// counts as absent).
pub(crate) fn retry_after(ms: Option<&str>, secs: Option<&str>) -> Option<Duration> {
    // Huge, infinite or negative values are no wait anyone can honour: absent.
    if let Some(ms) = ms.and_then(|v| v.trim().parse::<f64>().ok())
        && let Ok(d) = Duration::try_from_secs_f64(ms / 1000.0)
    {
        return Some(d);
    }
    secs.and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_honours_the_provider() {
        let p = RetryPolicy::default();
        let ms = Duration::from_millis;
        // Full jitter at 0.5 over 500 ms, 1 s, 2 s…
        assert_eq!(p.delay(0, None, ms(0), 0.5), Some(ms(250)));
        assert_eq!(p.delay(1, None, ms(0), 0.5), Some(ms(500)));
        assert_eq!(
            p.delay(3, None, ms(0), 0.999_999),
            Some(ms(4000).mul_f64(0.999_999))
        );
        // Capped at 30 s.
        let long = RetryPolicy {
            max_retries: 10,
            ..p
        };
        assert_eq!(
            long.delay(9, None, ms(0), 0.5),
            Some(Duration::from_secs(15))
        );
        // The provider's retry-after, plus at most 10 %.
        assert_eq!(p.delay(0, Some(ms(2000)), ms(0), 0.5), Some(ms(2100)));
        // Out of attempts, or past the total time allowed.
        assert_eq!(p.delay(4, None, ms(0), 0.5), None);
        assert_eq!(
            p.delay(0, Some(Duration::from_secs(3600)), ms(0), 0.0),
            None
        );
        assert_eq!(
            p.delay(
                1,
                Some(Duration::from_secs(10)),
                Duration::from_secs(115),
                0.0
            ),
            None
        );
        assert_eq!(RetryPolicy::none().delay(0, None, ms(0), 0.5), None);
    }

    #[test]
    fn retry_after_headers_are_read() {
        assert_eq!(
            retry_after(Some("20"), Some("5")),
            Some(Duration::from_millis(20))
        );
        assert_eq!(retry_after(None, Some("2")), Some(Duration::from_secs(2)));
        assert_eq!(
            retry_after(None, Some("Wed, 21 Oct 2015 07:28:00 GMT")),
            None
        );
        assert_eq!(retry_after(None, Some("-1")), None);
        assert_eq!(retry_after(Some("inf"), Some("1e300")), None);
        assert_eq!(retry_after(None, Some("1e20")), None);
        let p = RetryPolicy::default();
        assert_eq!(p.delay(0, Some(Duration::MAX), Duration::ZERO, 0.9), None);
        let j = jitter();
        assert!((0.0..1.0).contains(&j));
    }
}
