//! Examples and end-to-end tests for idem live in `examples/` and `tests/`. This library holds
//! only what the test worker processes in `src/bin/` share.

use std::sync::atomic::{AtomicU64, Ordering};

/// A seeded xorshift, so worker processes vary their timing without a dependency.
#[derive(Debug)]
pub struct Random(AtomicU64);

impl Random {
    /// A generator seeded with `seed` mixed with this process's id, so processes differ.
    pub fn for_process(seed: u64) -> Random {
        Random(AtomicU64::new(seed ^ u64::from(std::process::id())))
    }

    /// A number in `0..below` (0 when `below` is 0).
    pub fn below(&self, below: u64) -> u64 {
        let mut x = self.0.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % below.max(1)
    }
}
