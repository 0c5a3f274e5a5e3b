//! Transactional mode while duplicates dominate: the store answers a settled key from one read
//! outside any transaction, and every answer stays what the claim in a transaction gives (a
//! replayed value, a payload mismatch, an expired completion that runs again, a first run still
//! uncommitted that its duplicates wait for).

mod support;

use idem_core::{idempotent, Error, Outcome};
use idem_store_postgres::sqlx;
use idem_store_postgres::PgStore;
use std::sync::Arc;
use std::time::Duration;
use support::TestStore;

use support::{accounts, credits};

#[idempotent(key = "credit:{order}", store = store, transaction = tx, fingerprint(amount), replay, keep = "300ms")]
async fn credit(
    store: &PgStore,
    accounts: &str,
    order: u32,
    amount: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query(&format!(
        "UPDATE {accounts} SET credits = credits + $1 WHERE id = 42"
    ))
    .bind(amount)
    .execute(&mut **tx)
    .await?;
    tokio::time::sleep(Duration::from_millis(30)).await;
    Ok(amount)
}

/// Runs order 0 once, then its duplicates until the store reads first.
async fn warm(store: &PgStore, accounts: &str) {
    assert!(credit(store, accounts, 0, 1).await.unwrap().is_executed());
    for _ in 0..32 {
        let outcome = credit(store, accounts, 0, 1).await.unwrap();
        assert!(outcome.is_duplicate(), "{outcome:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_heavy_store_gives_the_same_answers() {
    let test = TestStore::new("txd_answers", 20).await;
    let table = accounts(&test).await;
    let store = &test.store;
    warm(store, &table).await;

    // A replayed value comes from the read.
    match credit(store, &table, 0, 1).await.unwrap() {
        Outcome::Duplicate { value, .. } => assert_eq!(value, Some(1)),
        other => panic!("{other:?}"),
    }
    // Another payload under the same key is refused, as in a transaction.
    let other = credit(store, &table, 0, 5).await;
    assert!(matches!(other, Err(Error::KeyReused { .. })), "{other:?}");
    assert_eq!(credits(store, &table).await, 1);

    // An expired completion is not settled: the key runs again (in a transaction).
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        credit(store, &table, 0, 1).await.unwrap(),
        Outcome::Executed(1)
    );
    assert_eq!(credits(store, &table).await, 2);
}

/// 16 concurrent deliveries of a new key on a store that reads first: the first run's row is
/// uncommitted, so the reads find nothing and the claims wait on it in their transactions;
/// the account is credited once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_of_a_new_key_credit_once() {
    let test = TestStore::new("txd_storm", 40).await;
    let table = Arc::new(accounts(&test).await);
    let store = Arc::new(test.store.clone());
    warm(&store, &table).await;
    for order in 1..=5 {
        let calls: Vec<_> = (0..16)
            .map(|_| {
                let (store, table) = (Arc::clone(&store), Arc::clone(&table));
                tokio::spawn(async move { credit(&store, &table, order, 100).await })
            })
            .collect();
        let mut executed = 0;
        for call in calls {
            match call.await.unwrap().unwrap() {
                Outcome::Executed(100) => executed += 1,
                Outcome::Duplicate { value, .. } => assert_eq!(value, Some(100)),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(executed, 1, "order {order} ran once");
    }
    assert_eq!(credits(&store, &table).await, 1 + 5 * 100);
}
