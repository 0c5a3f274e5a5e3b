//! Transactions that hold SQLite's write lock from their start.

use sqlx::{Sqlite, SqlitePool, Transaction};

/// A write to `table` (quoted) that matches no row: SQLite takes its write lock for any write
/// statement, waiting for it with the busy timeout when it is a transaction's first.
pub(crate) fn lock(table: &str) -> String {
    format!("UPDATE {table} SET rowid = rowid WHERE 0")
}

/// A transaction on `pool` that holds SQLite's write lock from its start, as `BEGIN IMMEDIATE`
/// does: a plain `BEGIN`, then `lock` (a write that changes nothing) as its first statement,
/// which waits for the lock with the busy timeout. A deferred transaction that read first
/// could fail to upgrade its read to a write without waiting.
///
/// Not `begin_with("BEGIN IMMEDIATE")`: sqlx waits once more after a custom `BEGIN` has been
/// applied and before the transaction's guard exists, and a future dropped there (a caller's
/// timeout) returns the connection to the pool inside the transaction, holding the write lock
/// against every connection and process, and leaving uncommitted whatever runs on it next,
/// until the pool closes that connection. Wherever a plain `BEGIN` or the statements after it
/// are dropped, sqlx rolls it back.
pub(crate) async fn write_transaction(
    pool: &SqlitePool,
    lock: &str,
) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query(lock).execute(&mut *tx).await?;
    Ok(tx)
}
