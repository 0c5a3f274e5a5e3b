//! For the crate's own tests against PostgreSQL: a store in a schema of its own, with the
//! queue's tables, and the schema's removal at the test's end.

use idem_store_postgres::testing::{database_url, unique_schema};
use idem_store_postgres::PgStore;
use sqlx::postgres::PgPoolOptions;

use crate::queue::Queue;

/// A pool of 4 to `DATABASE_URL`, a new schema named from `prefix`, and a store in it, migrated
/// with its queue.
pub(crate) async fn store_in_new_schema(prefix: &str) -> (sqlx::PgPool, String, PgStore) {
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&database_url())
        .await
        .expect("DATABASE_URL names a reachable PostgreSQL (scripts/test starts one)");
    let schema = unique_schema(prefix);
    sqlx::raw_sql(&format!("CREATE SCHEMA {schema}"))
        .execute(&pool)
        .await
        .unwrap();
    let store = PgStore::builder(pool.clone())
        .schema(schema.clone())
        .build()
        .unwrap();
    Queue::new(&store).migrate().await.unwrap();
    (pool, schema, store)
}

/// Drops `schema` (made by [`store_in_new_schema`]) and everything in it.
pub(crate) async fn drop_schema(pool: &sqlx::PgPool, schema: &str) {
    sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(pool)
        .await
        .unwrap();
}
