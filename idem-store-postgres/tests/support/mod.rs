//! Test support for PostgreSQL tests: a real server from `DATABASE_URL`, and a fresh schema per
//! test so tests run in parallel without seeing each other's keys.

#![allow(dead_code)]

pub mod wire;

use idem_store_postgres::sqlx::postgres::PgPoolOptions;
use idem_store_postgres::sqlx::PgPool;
use idem_store_postgres::PgStore;
use std::sync::atomic::{AtomicU32, Ordering};

/// The server under test (there is no fallback: without one, tests fail).
pub use idem_testdb::database_url;

pub async fn pool(max_connections: u32) -> PgPool {
    let url = database_url();
    PgPoolOptions::new()
        .max_connections(max_connections)
        .connect(&url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to DATABASE_URL={url}: {e}"))
}

/// A schema name no other test (or test process) uses.
pub fn unique_schema(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "idem_t_{prefix}_{}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        nanos % 100_000
    )
}

/// A migrated store in its own schema, dropped (with the schema) at the end of the test.
pub struct TestStore {
    pub store: PgStore,
    pub schema: String,
}

impl TestStore {
    pub async fn new(prefix: &str, max_connections: u32) -> TestStore {
        TestStore::with(prefix, max_connections, None).await
    }

    /// A store running its statements on `dedicated` connections of its own.
    pub async fn dedicated(prefix: &str, max_connections: u32, dedicated: usize) -> TestStore {
        TestStore::with(prefix, max_connections, Some(dedicated)).await
    }

    async fn with(prefix: &str, max_connections: u32, dedicated: Option<usize>) -> TestStore {
        let schema = unique_schema(prefix);
        let mut builder = PgStore::builder(pool(max_connections).await).schema(schema.clone());
        if let Some(n) = dedicated {
            builder = builder.dedicated_connections(n);
        }
        let store = builder.build().expect("valid names");
        store.migrate().await.expect("migrate");
        TestStore { store, schema }
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        // Dropping the schema needs a connection and an async runtime; the test's runtime may be
        // shutting down, so use a thread of our own.
        let schema = self.schema.clone();
        let url = database_url();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                if let Ok(pool) = PgPoolOptions::new().max_connections(1).connect(&url).await {
                    // Bounded: a test that left a transaction open must not hang the run.
                    let sql = format!(
                        "SET lock_timeout = '5s'; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                    );
                    let _ = idem_store_postgres::sqlx::raw_sql(&sql)
                        .execute(&pool)
                        .await;
                    pool.close().await;
                }
            })
        })
        .join();
    }
}
