//! The shared conformance suite, run against `DynamoDbStore` on a real DynamoDB-compatible
//! server (`DYNAMODB_URL`, which `scripts/test` sets, starting moto's server when it is unset),
//! each test in a table of its own, on a manual clock (DynamoDB keeps no time: the store reads
//! the host's).

use async_trait::async_trait;
use idem_conformance::Harness;
use idem_core::clock::ManualClock;
use idem_core::Purge;
use idem_store_dynamodb::testing::{dynamodb_url, fresh_table, local_client};
use idem_store_dynamodb::{DynamoDbStore, TableLayout};
use std::sync::Arc;
use std::time::Duration;

struct DynamoHarness {
    store: DynamoDbStore,
    clock: ManualClock,
}

#[async_trait]
impl Harness for DynamoHarness {
    fn store(&self) -> Arc<dyn Purge> {
        Arc::new(self.store.clone())
    }

    fn short_lease(&self) -> Duration {
        Duration::from_secs(2)
    }

    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }
}

async fn harness_with(layout: TableLayout) -> DynamoHarness {
    let client = local_client(&dynamodb_url());
    let table = fresh_table(&client, "conformance", &layout).await;
    let clock = ManualClock::new();
    let store = DynamoDbStore::builder(client, table)
        .layout(layout)
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    DynamoHarness { store, clock }
}

async fn dynamo_harness() -> DynamoHarness {
    harness_with(TableLayout::default()).await
}

idem_conformance::store_conformance!(dynamo_harness);

/// The same suite on Powertools' sort-key layout: one partition value, the id in the sort key.
mod sort_key {
    use super::*;

    async fn sort_key_harness() -> DynamoHarness {
        harness_with(
            TableLayout::default()
                .partition_key("pk")
                .sort_key("sk", "idempotency#conformance")
                .unwrap(),
        )
        .await
    }

    idem_conformance::store_conformance!(sort_key_harness);
}
