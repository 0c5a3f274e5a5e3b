//! Examples and end-to-end tests for idem live in `examples/` and `tests/`. This library holds
//! only what the test worker processes in `src/bin/` share.

use std::sync::atomic::{AtomicU64, Ordering};

/// A seeded xorshift, so worker processes vary their timing without a dependency.
#[derive(Debug)]
pub struct Random(AtomicU64);

impl Random {
    /// A generator seeded with `seed` mixed with this process's id, so processes differ.
    pub fn for_process(seed: u64) -> Random {
        Random(AtomicU64::new(seed ^ u64::from(std::process::id())))
    }

    /// A number in `0..below` (0 when `below` is 0).
    pub fn below(&self, below: u64) -> u64 {
        let mut x = self.0.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % below.max(1)
    }
}

/// `--name value` pairs as a map from `name` to `value`.
pub fn flags(args: &[String]) -> std::collections::HashMap<String, String> {
    args.chunks(2)
        .map(|pair| {
            let value = pair.get(1).cloned().unwrap_or_default();
            (pair[0].trim_start_matches("--").to_owned(), value)
        })
        .collect()
}

/// A store in `schema` on a pool of `connections` to `DATABASE_URL`, as the test workers use.
///
/// # Panics
///
/// Without `DATABASE_URL`, or when the server cannot be reached.
pub async fn worker_store(schema: &str, connections: u32) -> idem_store_postgres::PgStore {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let pool = idem_store_postgres::sqlx::postgres::PgPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(std::time::Duration::from_secs(30))
        .connect(&url)
        .await
        .expect("connect");
    idem_store_postgres::PgStore::builder(pool)
        .schema(schema.to_owned())
        .build()
        .expect("store")
}
