//! How often transactional claims find their key already settled: the store's estimate, from
//! which it decides whether to look a key up before opening a transaction for it.
//!
//! In transactional mode a duplicate costs three round trips (BEGIN, the claim, ROLLBACK) where
//! a read of the record outside any transaction costs one; a fresh key pays one more for that
//! read (four instead of BEGIN, the claim and COMMIT). Reading first pays when more than a
//! third of the calls are duplicates (two saved on each duplicate against one lost on each
//! fresh key), so the store reads first exactly while its recent claims say so. A store that
//! claims a fresh key with its BEGIN (`fresh_claim.rs`) spends two round trips on a fresh key
//! and four on a duplicate, so for it reading first pays above a quarter (three saved against
//! one lost).

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

    /// Whether reading the record first is expected to save round trips, for a store that
    /// claims a fresh key with its BEGIN (`with_begin`) or not.
    pub fn read_first(&self, with_begin: bool) -> bool {
        let above = if with_begin { ONE / 4 } else { ONE / 3 };
        self.0.load(Ordering::Relaxed) > above
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_recent_mix() {
        let rate = DuplicateRate::default();
        assert!(!rate.read_first(false), "a new store assumes fresh keys");
        for _ in 0..16 {
            rate.observe(true);
        }
        assert!(rate.read_first(false), "after a run of duplicates");
        for _ in 0..16 {
            rate.observe(false);
        }
        assert!(!rate.read_first(false), "after a run of fresh keys");
        // Half and half: above a third.
        for i in 0..64 {
            rate.observe(i % 2 == 0);
        }
        assert!(rate.read_first(false));
        // One in five: below.
        for i in 0..64 {
            rate.observe(i % 5 == 0);
        }
        assert!(!rate.read_first(false));
    }

    #[test]
    fn a_store_claiming_with_its_begin_reads_first_above_a_quarter() {
        let rate = DuplicateRate::default();
        rate.0.store(ONE * 3 / 10, Ordering::Relaxed);
        assert!(rate.read_first(true));
        assert!(!rate.read_first(false));
        rate.0.store(ONE / 5, Ordering::Relaxed);
        assert!(!rate.read_first(true));
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
