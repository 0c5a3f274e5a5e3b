//! Test support for the queue's tests: a store in a schema of its own on the server
//! `DATABASE_URL` names (from the store's `testing` feature), with the queue's tables.

#![allow(dead_code, unused_imports)]

pub use idem_store_postgres::testing::{lock_row, TestStore};

use idem_queue::Queue;
use idem_store_postgres::sqlx;

/// The queue of `test`'s store, its tables migrated.
pub async fn queue(test: &TestStore) -> Queue {
    let queue = Queue::new(&test.store);
    queue.migrate().await.expect("migrate the queue");
    queue
}

/// Locks the row of `table` whose `column` is `value` in a transaction of `test`'s pool, until
/// the returned transaction ends.
pub async fn lock_row_by(
    test: &TestStore,
    table: &str,
    column: &str,
    value: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut holder = test.store.pool().begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT 1 FROM {table} WHERE {column} = $1 FOR UPDATE"
    ))
    .bind(value)
    .execute(&mut *holder)
    .await
    .unwrap();
    holder
}

/// Returns once `n` of `test`'s connections wait for a lock (the gate a held row lock makes).
pub async fn wait_for_lock_waiters(test: &TestStore, n: i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = $1 AND wait_event_type = 'Lock'",
        )
        .bind(&test.schema)
        .fetch_one(test.store.pool())
        .await
        .unwrap();
        if waiting >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{waiting} of {n} waiters"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
