//! How long a failed job waits before its next attempt.

use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, Instant};

/// Exponential backoff with jitter: after failed attempt `n` the job waits a random time
/// between half and all of `base * 2^(n-1)`, capped at `max`.
///
/// Half of each delay is fixed and half random ("equal jitter"), so delays grow with every
/// attempt (attempt `n + 1` never waits less than attempt `n` could) while workers that failed
/// together do not retry together.
///
/// ```
/// use idem_queue::Backoff;
/// use std::time::Duration;
///
/// let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(3600));
/// let third = backoff.delay(3);
/// assert!(third >= Duration::from_secs(2) && third <= Duration::from_secs(4));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

impl Default for Backoff {
    /// 1 s doubling, capped at one hour.
    fn default() -> Self {
        Backoff::new(Duration::from_secs(1), Duration::from_secs(3600))
    }
}

impl Backoff {
    /// Backoff starting at `base` and never longer than `max`.
    pub fn new(base: Duration, max: Duration) -> Backoff {
        Backoff {
            base,
            max: max.max(base),
        }
    }

    /// The wait after failed attempt `attempt` (from 1).
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        let half = ceiling / 2;
        let span = u64::try_from((ceiling - half).as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(random() % span.saturating_add(1))
    }

    /// The longest wait after failed attempt `attempt`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(40);
        self.base
            .checked_mul(1u32 << doublings.min(31))
            .and_then(|d| d.checked_mul(1u32 << doublings.saturating_sub(31)))
            .unwrap_or(self.max)
            .min(self.max)
    }
}

/// A random number from the standard library's per-process random hasher keys.
pub(crate) fn random() -> u64 {
    RandomState::new().hash_one(Instant::now())
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use std::time::Duration;

    #[test]
    fn delays_grow_within_their_bounds_and_stop_at_the_cap() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        for attempt in 1..=12 {
            let ceiling = b.ceiling(attempt);
            for _ in 0..50 {
                let d = b.delay(attempt);
                assert!(
                    d >= ceiling / 2 && d <= ceiling,
                    "{attempt}: {d:?} vs {ceiling:?}"
                );
            }
            assert!(b.ceiling(attempt + 1) >= ceiling);
        }
        assert_eq!(b.ceiling(1), Duration::from_millis(100));
        assert_eq!(b.ceiling(4), Duration::from_millis(800));
        assert_eq!(b.ceiling(12), Duration::from_secs(10));
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(10));
    }

    #[test]
    fn delays_are_jittered() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let distinct: std::collections::HashSet<_> = (0..20).map(|_| b.delay(3)).collect();
        assert!(distinct.len() > 10, "{distinct:?}");
    }
}
