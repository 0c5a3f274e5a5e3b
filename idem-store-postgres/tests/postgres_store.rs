//! The shared conformance suite, run against `PgStore` on a real PostgreSQL server, each test
//! in its own schema: with the default connections (the store's own, claims and completions
//! batched), an explicit number of them, and through the pool.

mod support;

use async_trait::async_trait;
use idem_conformance::{Harness, InspectHarness, TransactionalHarness};
use idem_core::Purge;
use idem_store_postgres::PgStore;
use std::sync::Arc;
use std::time::Duration;
use support::TestStore;

struct PgHarness {
    test: TestStore,
}

#[async_trait]
impl Harness for PgHarness {
    fn store(&self) -> Arc<dyn Purge> {
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

impl InspectHarness for PgHarness {
    fn inspector(&self) -> Arc<dyn idem_core::Inspect> {
        Arc::new(self.test.store.clone())
    }
}

idem_conformance::inspect_conformance!(pg_harness);

impl TransactionalHarness for PgHarness {
    type Store = PgStore;

    fn store(&self) -> PgStore {
        self.test.store.clone()
    }
}

async fn pg_tx_harness() -> PgHarness {
    PgHarness {
        test: TestStore::new("txconf", 8).await,
    }
}

idem_conformance::transactional_conformance!(pg_tx_harness);

/// The transactional rules with a fresh key claimed in the round trip of its BEGIN.
mod claim_with_begin {
    use super::*;

    /// A harness whose store, on a pool of `connections` in a new schema named from `prefix`,
    /// claims with the BEGIN; `through_pool`: it holds no connections of its own.
    async fn harness(prefix: &str, connections: u32, through_pool: bool) -> PgHarness {
        let mut test = TestStore::new(prefix, connections).await;
        let builder = PgStore::builder(test.store.pool().clone()).schema(test.schema.clone());
        let builder = if through_pool {
            builder.through_pool()
        } else {
            builder
        };
        test.store = builder.claim_with_begin(true).build().unwrap();
        PgHarness { test }
    }

    async fn pg_tx_begin_harness() -> PgHarness {
        harness("txbegin", 8, false).await
    }

    idem_conformance::transactional_conformance!(pg_tx_begin_harness);

    /// On the pool's connections: a store with none of its own.
    mod on_the_pool {
        use super::*;

        async fn pg_tx_begin_pooled_harness() -> PgHarness {
            harness("txbeginpool", 8, true).await
        }

        idem_conformance::transactional_conformance!(pg_tx_begin_pooled_harness);
    }

    /// On the pool's connections beside the store's own: a pool of four, of which the store
    /// holds two and lends none (it keeps three for its batches and other operations), so
    /// every transaction runs on a pooled connection while lease-mode statements use the
    /// store's.
    mod none_to_lend {
        use super::*;

        async fn pg_tx_begin_unlent_harness() -> PgHarness {
            harness("txbeginunlent", 4, false).await
        }

        idem_conformance::transactional_conformance!(pg_tx_begin_unlent_harness);
    }
}

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

/// The same rules with a pooled connection checked out for every statement (no batching).
mod through_pool {
    use super::*;

    async fn pg_pooled_harness() -> PgHarness {
        PgHarness {
            test: TestStore::through_pool("pconf", 8).await,
        }
    }

    idem_conformance::store_conformance!(pg_pooled_harness);
}
