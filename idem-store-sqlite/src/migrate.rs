//! Versioned migrations, recorded in `<table>_migrations` and applied in one transaction that
//! holds the write lock from its start, so processes migrating at once take turns and the later
//! ones find nothing to do.

use sqlx::SqlitePool;

use crate::sql::Sql;
use crate::write_transaction::{lock, write_transaction};

pub(crate) async fn migrate(pool: &SqlitePool, table: &str, sql: &Sql) -> Result<(), sqlx::Error> {
    let history = format!("\"{table}_migrations\"");
    // Made before the transaction, so that the transaction's first statement can be a write
    // to it (`write_transaction`): creating it when it exists takes no lock.
    sqlx::raw_sql(&format!(
        "CREATE TABLE IF NOT EXISTS {history} (version INTEGER PRIMARY KEY, applied_us INTEGER NOT NULL)"
    ))
    .execute(pool)
    .await?;
    let mut tx = write_transaction(pool, &lock(&history)).await?;
    let applied: Option<i64> = sqlx::query_scalar(&format!("SELECT max(version) FROM {history}"))
        .fetch_one(&mut *tx)
        .await?;
    // Version 1: records, the fence counter, the effect journal. Version 2: the holder.
    let migrations: [&str; 2] = [&sql.create, &sql.add_holder];
    for (i, migration) in migrations.iter().enumerate() {
        let version = i as i64 + 1;
        if applied.is_some_and(|v| v >= version) {
            continue;
        }
        sqlx::raw_sql(migration).execute(&mut *tx).await?;
        sqlx::query(&format!(
            "INSERT INTO {history} (version, applied_us) VALUES ($1, CAST(unixepoch('subsec') * 1000000 AS INTEGER))"
        ))
        .bind(version)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}
