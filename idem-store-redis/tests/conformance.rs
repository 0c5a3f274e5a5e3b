//! The shared conformance suite, run against `RedisStore` on a real Redis server (`REDIS_URL`,
//! which `scripts/test` sets, starting a throwaway server when it is unset), each test under a
//! key prefix of its own.

use async_trait::async_trait;
use idem_conformance::{Harness, InspectHarness};
use idem_core::Purge;
use idem_store_redis::RedisStore;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct RedisHarness {
    store: RedisStore,
}

#[async_trait]
impl Harness for RedisHarness {
    fn store(&self) -> Arc<dyn Purge> {
        Arc::new(self.store.clone())
    }

    /// The server keeps time, so lapses are real: sleep past a short lease.
    fn short_lease(&self) -> Duration {
        Duration::from_millis(1000)
    }

    async fn advance(&self, by: Duration) {
        tokio::time::sleep(by).await;
    }
}

fn unique_prefix() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "idem-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

async fn redis_harness() -> RedisHarness {
    let store = RedisStore::connect(&idem_testdb::redis_url())
        .await
        .expect("connect to REDIS_URL")
        .prefix(&unique_prefix());
    RedisHarness { store }
}

idem_conformance::store_conformance!(redis_harness);

impl InspectHarness for RedisHarness {
    fn inspector(&self) -> Arc<dyn idem_core::Inspect> {
        Arc::new(self.store.clone())
    }

    // Redis reads every record of the prefix for any page.
    fn pages_stop_at_their_scan(&self) -> bool {
        false
    }
}

idem_conformance::inspect_conformance!(redis_harness);
