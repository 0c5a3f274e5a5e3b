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
