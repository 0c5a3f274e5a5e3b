//! What the worker processes of the multi-process tests share: their common flags and store,
//! and a seeded random source. Not part of idem's API.

use std::sync::atomic::{AtomicU64, Ordering};

pub mod faults;

use idem_store_postgres::PgStore;

/// A seeded xorshift, so worker processes vary their timing without a dependency.
#[derive(Debug)]
pub struct Random(AtomicU64);

impl Random {
    /// A generator seeded with `seed` mixed with this process's id, so processes differ.
    pub fn for_process(seed: u64) -> Random {
        Random(AtomicU64::new(seed ^ u64::from(std::process::id())))
    }

    /// A generator seeded with `seed` alone: the same numbers in every process.
    pub fn seeded(seed: u64) -> Random {
        Random(AtomicU64::new(seed))
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

/// The flags every worker binary takes.
#[derive(Debug, clap::Args)]
pub struct WorkerFlags {
    /// The schema the test created (migrated, with its `executions` table).
    #[arg(long)]
    pub schema: String,
    /// Seeds this process's random timing (mixed with its pid).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Handlers sleep up to this long (ms) after recording their execution.
    #[arg(long, default_value_t = 0)]
    pub work_ms: u64,
}

impl WorkerFlags {
    /// The test's store, on a pool of `connections` to `DATABASE_URL`.
    pub async fn store(&self, connections: u32) -> PgStore {
        idem_store_postgres::testing::pg_store(&self.schema, connections, None).await
    }
}
