//! How often transactional claims find their key already settled: the store's estimate, from
//! which it decides whether to look a key up before opening a transaction for it.
//!
//! In transactional mode a duplicate costs three round trips (BEGIN, the claim, ROLLBACK) where
//! a read of the record outside any transaction costs one; a fresh key pays one more for that
//! read (four instead of BEGIN, the claim and COMMIT). Reading first pays when more than a
//! third of the calls are duplicates (two saved on each duplicate against one lost on each
//! fresh key), so the store reads first exactly while its recent claims say so.

use std::sync::atomic::{AtomicU32, Ordering};

/// One in `1 << WEIGHT_SHIFT` of the estimate is each new claim's (an exponentially weighted
/// average over about the last 16 claims).
const WEIGHT_SHIFT: u32 = 4;

/// The estimate's scale: `ONE` is "every claim finds its key settled".
const ONE: u32 = 1 << 16;

/// The fraction of recent transactional claims that found their key settled (completed, or
/// stored with another payload), as a fixed-point number of `ONE`.
#[derive(Debug, Default)]
pub(crate) struct DuplicateRate(AtomicU32);

impl DuplicateRate {
    /// Counts one claim's answer. Concurrent updates may lose one another's step: it is an
    /// estimate, and either way a call's answer is the same.
    pub fn observe(&self, settled: bool) {
        let old = self.0.load(Ordering::Relaxed);
        let step = if settled { ONE >> WEIGHT_SHIFT } else { 0 };
        self.0
            .store(old - (old >> WEIGHT_SHIFT) + step, Ordering::Relaxed);
    }

    /// Whether reading the record first is expected to save round trips.
    pub fn read_first(&self) -> bool {
        self.0.load(Ordering::Relaxed) > ONE / 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_recent_mix() {
        let rate = DuplicateRate::default();
        assert!(!rate.read_first(), "a new store assumes fresh keys");
        for _ in 0..16 {
            rate.observe(true);
        }
        assert!(rate.read_first(), "after a run of duplicates");
        for _ in 0..16 {
            rate.observe(false);
        }
        assert!(!rate.read_first(), "after a run of fresh keys");
        // Half and half: above a third.
        for i in 0..64 {
            rate.observe(i % 2 == 0);
        }
        assert!(rate.read_first());
        // One in five: below.
        for i in 0..64 {
            rate.observe(i % 5 == 0);
        }
        assert!(!rate.read_first());
    }

    #[test]
    fn stays_within_its_scale() {
        let rate = DuplicateRate::default();
        for _ in 0..10_000 {
            rate.observe(true);
        }
        assert!(rate.0.load(Ordering::Relaxed) <= ONE);
    }
}
