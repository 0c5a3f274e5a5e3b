//! Test support for PostgreSQL tests: a real server from `DATABASE_URL`, and a fresh schema per
//! test so tests run in parallel without seeing each other's keys (from the store's `testing`
//! feature, which builds every test store).

#![allow(dead_code, unused_imports)]

pub use idem_store_postgres::testing::{
    database_url, lock_row, pool, unique_schema, CountingProxy, TestStore,
};

/// An account table (`id 42` with no credits) in the test's schema, for handlers whose effect
/// is a write to the store's own database; returns its quoted name.
pub async fn accounts(test: &TestStore) -> String {
    let accounts = format!("\"{}\".accounts", test.schema);
    idem_store_postgres::sqlx::raw_sql(&format!(
        "CREATE TABLE {accounts} (id int PRIMARY KEY, credits bigint NOT NULL);
         INSERT INTO {accounts} VALUES (42, 0);"
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    accounts
}

/// Inserts `key`'s record (scope `default`) in a transaction of `test`'s pool left open: a
/// claim of `key` waits for it until the transaction ends.
pub async fn hold_insert(
    test: &TestStore,
    key: &str,
) -> idem_store_postgres::sqlx::Transaction<'static, idem_store_postgres::sqlx::Postgres> {
    let mut tx = test.store.pool().begin().await.unwrap();
    idem_store_postgres::sqlx::query(&format!(
        "INSERT INTO {} (key, scope, fence, expires_at) VALUES ($1, 'default', -1, now())",
        test.store.table()
    ))
    .bind(key)
    .execute(&mut *tx)
    .await
    .unwrap();
    tx
}

/// Account 42's credits.
pub async fn credits(store: &idem_store_postgres::PgStore, accounts: &str) -> i64 {
    idem_store_postgres::sqlx::query_scalar(&format!(
        "SELECT credits FROM {accounts} WHERE id = 42"
    ))
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// Runs `sql`, a query of one count with the schema of `test` as `$1`, on a connection of its
/// own (not one of the test's pool).
pub async fn count_for(test: &TestStore, sql: &str) -> i64 {
    let admin = pool(1).await;
    let n: i64 = idem_store_postgres::sqlx::query_scalar(sql)
        .bind(&test.schema)
        .fetch_one(&admin)
        .await
        .unwrap();
    admin.close().await;
    n
}

/// How many connections `test`'s store and pool have open (they carry its schema as
/// `application_name`).
pub async fn connections_named(test: &TestStore) -> i64 {
    count_for(
        test,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
    )
    .await
}
