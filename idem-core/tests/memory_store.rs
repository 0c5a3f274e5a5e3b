//! The shared conformance suite, run against `MemoryStore` on a manual clock.

use async_trait::async_trait;
use idem_conformance::Harness;
use idem_core::clock::ManualClock;
use idem_core::{MemoryStore, Purge};
use std::sync::Arc;
use std::time::Duration;

struct MemoryHarness {
    clock: ManualClock,
    store: Arc<MemoryStore>,
}

#[async_trait]
impl Harness for MemoryHarness {
    fn store(&self) -> Arc<dyn Purge> {
        self.store.clone()
    }

    fn short_lease(&self) -> Duration {
        Duration::from_secs(30)
    }

    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }
}

async fn memory_harness() -> MemoryHarness {
    let clock = ManualClock::new();
    MemoryHarness {
        store: Arc::new(MemoryStore::with_clock(clock.clone())),
        clock,
    }
}

idem_conformance::store_conformance!(memory_harness);
