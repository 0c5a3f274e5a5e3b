//! Test support for the queue's tests: a store in a schema of its own on the server
//! `DATABASE_URL` names (from the store's `testing` feature), with the queue's tables.

#![allow(dead_code, unused_imports)]

pub use idem_store_postgres::testing::{lock_row, lock_row_where, until_lock_waits, TestStore};

use idem_queue::Queue;

/// The queue of `test`'s store, its tables migrated.
pub async fn queue(test: &TestStore) -> Queue {
    let queue = Queue::new(&test.store);
    queue.migrate().await.expect("migrate the queue");
    queue
}

/// A queue on the same tables as `test`'s, through a pool and store of its own: what another
/// process sees.
pub async fn another(test: &TestStore) -> Queue {
    let pool = idem_store_postgres::sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(&idem_store_postgres::testing::database_url())
        .await
        .unwrap();
    let store = idem_store_postgres::PgStore::builder(pool)
        .schema(test.schema.clone())
        .build()
        .unwrap();
    Queue::new(&store)
}
