//! The shared conformance suite, run against `PgStore` on a real PostgreSQL server, each test
//! in its own schema.

mod support;

use async_trait::async_trait;
use idem_conformance::Harness;
use idem_core::Store;
use std::sync::Arc;
use std::time::Duration;
use support::TestStore;

struct PgHarness {
    test: TestStore,
}

#[async_trait]
impl Harness for PgHarness {
    fn store(&self) -> Arc<dyn Store> {
        Arc::new(self.test.store.clone())
    }

    /// The database keeps time, so lapses are real: sleep past a short lease.
    fn short_lease(&self) -> Duration {
        Duration::from_millis(1500)
    }

    async fn advance(&self, by: Duration) {
        tokio::time::sleep(by).await;
    }
}

async fn pg_harness() -> PgHarness {
    PgHarness {
        test: TestStore::new("conf", 20).await,
    }
}

idem_conformance::store_conformance!(pg_harness);

/// The same rules with the store's statements on dedicated connections.
mod dedicated_connections {
    use super::*;

    async fn pg_dedicated_harness() -> PgHarness {
        PgHarness {
            test: TestStore::dedicated("dconf", 4, 16).await,
        }
    }

    idem_conformance::store_conformance!(pg_dedicated_harness);
}
