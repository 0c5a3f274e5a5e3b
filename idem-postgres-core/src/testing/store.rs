//! Test stores: the one place that builds a `PgStore` for a test, a test worker process or a
//! multi-process test, on the server [`database_url`] names.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::PgStore;

/// The server that PostgreSQL tests use: `DATABASE_URL`, which `scripts/test` sets (starting a
/// throwaway cluster when it was unset). There is no fallback: a PostgreSQL test without a
/// server fails, loudly, with this message.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "DATABASE_URL is not set. PostgreSQL tests need a real server: run them with \
             `scripts/test`, which starts a throwaway PostgreSQL, or set DATABASE_URL to a \
             server you can create schemas on"
        )
    })
}

/// A pool of up to `max_connections` on `DATABASE_URL`.
///
/// # Panics
///
/// Without `DATABASE_URL`, or when the server cannot be reached: the message names the URL.
pub async fn pool(max_connections: u32) -> PgPool {
    named_pool(max_connections, "idem-test").await
}

/// [`pool`], its connections showing `application_name` in `pg_stat_activity` (so a test can
/// find, or terminate, exactly its own connections).
pub async fn named_pool(max_connections: u32, application_name: &str) -> PgPool {
    let url = database_url();
    let options: PgConnectOptions = url
        .parse()
        .unwrap_or_else(|e| panic!("DATABASE_URL={url} is not a PostgreSQL URL: {e}"));
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options.application_name(application_name))
        .await
        .unwrap_or_else(|e| panic!("cannot connect to DATABASE_URL={url}: {e}"))
}

/// A store in `schema` on a new pool of `connections`, with `dedicated` connections of its own
/// when given (else as many as the pool may open: the store's default). Every connection of the
/// store shows the schema as its `application_name`. Not migrated: see [`TestStore`] for a
/// migrated store in a schema of its own.
pub async fn pg_store(schema: &str, connections: u32, dedicated: Option<usize>) -> PgStore {
    let via = match dedicated {
        Some(n) => Via::Dedicated(n),
        None => Via::Default,
    };
    pg_store_via(schema, connections, via).await
}

/// Where a test store's statements run.
#[derive(Debug, Clone, Copy)]
enum Via {
    /// The store's default: connections of its own, as many as the pool, with batching.
    Default,
    /// `dedicated_connections(n)`.
    Dedicated(usize),
    /// `through_pool()`: a pooled connection per statement, no batching.
    ThroughPool,
}

async fn pg_store_via(schema: &str, connections: u32, via: Via) -> PgStore {
    let pool = named_pool(connections, schema).await;
    // Tests hold row locks on purpose while they line calls up behind them; on a loaded
    // machine that can take longer than a store's default lock timeout.
    let builder = PgStore::builder(pool)
        .schema(schema.to_owned())
        .lock_timeout(std::time::Duration::from_secs(60));
    let builder = match via {
        Via::Default => builder,
        Via::Dedicated(n) => builder.dedicated_connections(n),
        Via::ThroughPool => builder.through_pool(),
    };
    builder.build().expect("valid schema name")
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

/// A migrated store in a schema of its own, dropped (with the schema) when this is dropped, so
/// tests run in parallel without seeing each other's keys.
#[derive(Debug)]
pub struct TestStore {
    /// The store.
    pub store: PgStore,
    /// Its schema.
    pub schema: String,
}

impl TestStore {
    /// A store on a pool of `max_connections`, with the store's default connections (as many
    /// of its own as the pool, claims and completions batched).
    pub async fn new(prefix: &str, max_connections: u32) -> TestStore {
        TestStore::with(prefix, max_connections, Via::Default).await
    }

    /// A store running its statements on `dedicated` connections of its own.
    pub async fn dedicated(prefix: &str, max_connections: u32, dedicated: usize) -> TestStore {
        TestStore::with(prefix, max_connections, Via::Dedicated(dedicated)).await
    }

    /// A store that checks a pooled connection out for every statement (no batching).
    pub async fn through_pool(prefix: &str, max_connections: u32) -> TestStore {
        TestStore::with(prefix, max_connections, Via::ThroughPool).await
    }

    async fn with(prefix: &str, max_connections: u32, via: Via) -> TestStore {
        let schema = unique_schema(prefix);
        let store = pg_store_via(&schema, max_connections, via).await;
        store.migrate().await.expect("migrate");
        TestStore { store, schema }
    }
}

/// Locks the row of `table` whose key is `key` in a transaction of `test`'s pool, as a claim's
/// takeover holds the record it rewrites, until the returned transaction ends.
pub async fn lock_row(
    test: &TestStore,
    table: &str,
    key: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    lock_row_where(test, table, "key", key).await
}

/// Locks the row of `table` whose `column` is `value` in a transaction of `test`'s pool, until
/// the returned transaction ends: statements that write it wait behind it, a gate a test opens
/// by ending the transaction.
pub async fn lock_row_where(
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

/// Returns once at least `n` of `test`'s connections wait for a lock: statements are on the
/// wire, held behind a row a test locked.
pub async fn until_lock_waits(test: &TestStore, n: i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
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
            "{waiting} of {n} statements wait on a lock"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
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
                    let _ = sqlx::raw_sql(&sql).execute(&pool).await;
                    pool.close().await;
                }
            })
        })
        .join();
    }
}
