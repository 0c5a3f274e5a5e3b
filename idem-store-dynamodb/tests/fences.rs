//! Fences grow across hosts whose clocks disagree: a claim never takes a fence smaller than the
//! one it finds, a released claim's tombstone keeps its fence, and a run holding a fence that
//! was outgrown cannot complete. One process's fences always grow, so the items here are
//! written directly, as a host with a clock far ahead would have left them.

use idem_core::clock::ManualClock;
use idem_core::{Claim, ClaimRequest, Completion, Fence, Fenced, Key, Purge, Store};
use idem_store_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use idem_store_dynamodb::testing::{dynamodb_url, fresh_table, local_client};
use idem_store_dynamodb::{DynamoDbStore, TableLayout};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A fence a clock a day ahead would take.
fn ahead() -> u64 {
    (SystemTime::now() + Duration::from_secs(86_400))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

async fn store() -> DynamoDbStore {
    let client = local_client(&dynamodb_url());
    let table = fresh_table(&client, "fences", &TableLayout::default()).await;
    DynamoDbStore::new(client, table)
}

async fn plant(store: &DynamoDbStore, id: &str, status: &str, fence: u64) {
    let past = now_ms() - 1_000;
    store
        .client()
        .put_item()
        .table_name(store.table())
        .item("id", AttributeValue::S(id.into()))
        .item("status", AttributeValue::S(status.into()))
        .item("idem_fence", AttributeValue::N(fence.to_string()))
        .item("idem_until", AttributeValue::N(past.to_string()))
        .item(
            "in_progress_expiration",
            AttributeValue::N(past.to_string()),
        )
        .item(
            "expiration",
            AttributeValue::N((past / 1000 + 600).to_string()),
        )
        .send()
        .await
        .unwrap();
}

async fn claim(store: &DynamoDbStore, key: &Key) -> Claim {
    store
        .claim(ClaimRequest {
            key,
            fingerprint: None,
            lease: Duration::from_secs(60),
            token: None,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_claim_outgrows_the_fence_of_a_tombstone_or_lapsed_claim_from_a_clock_ahead() {
    let store = store().await;
    for (id, status, taken_over) in [
        ("released", "RELEASED", false),
        ("lapsed", "INPROGRESS", true),
    ] {
        let planted = ahead();
        plant(&store, id, status, planted).await;
        let key = Key::new(id).unwrap();
        match claim(&store, &key).await {
            Claim::Acquired {
                fence,
                taken_over: taken,
                ..
            } => {
                assert!(
                    fence > Fence(planted),
                    "{id}: {fence} must exceed {planted}"
                );
                assert_eq!(taken, taken_over, "{id}");
            }
            other => panic!("{id}: expected to acquire, got {other:?}"),
        }
        let done = store
            .complete(
                &key,
                Fence(planted),
                Completion {
                    output: None,
                    keep: Duration::from_secs(60),
                },
            )
            .await
            .unwrap();
        assert_eq!(
            done,
            Fenced::Lost,
            "{id}: the outgrown fence cannot complete"
        );
    }
}

/// On Powertools' sort-key layout several functions share a table, each under its partition
/// value: one function's purge leaves the others' records, expired or not.
#[tokio::test]
async fn a_purge_keeps_to_its_own_partition() {
    let client = local_client(&dynamodb_url());
    let layout = |partition: &str| {
        TableLayout::default()
            .partition_key("pk")
            .sort_key("sk", partition)
            .unwrap()
    };
    let table = fresh_table(&client, "partitions", &layout("idempotency#a")).await;
    let clock = ManualClock::new();
    let a = DynamoDbStore::builder(client.clone(), &table)
        .layout(layout("idempotency#a"))
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    let b = DynamoDbStore::builder(client, &table)
        .layout(layout("idempotency#b"))
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    let key = Key::new("k").unwrap();
    for store in [&a, &b] {
        let request = ClaimRequest {
            key: &key,
            fingerprint: None,
            lease: Duration::from_secs(1),
            token: None,
        };
        assert!(matches!(
            store.claim(request).await.unwrap(),
            Claim::Acquired { .. }
        ));
    }
    clock.advance(Duration::from_secs(2)); // both leases lapse
    assert_eq!(a.purge_expired(100).await.unwrap(), 1);
    assert!(a.get(&key).await.unwrap().is_none());
    assert!(
        b.get(&key).await.unwrap().is_some(),
        "another function's record under the same id stays"
    );
}
