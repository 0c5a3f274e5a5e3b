//! Whether a pool holds a connection left inside a transaction: what a dropped `BEGIN` can do
//! (see [`ClosingTransaction`](crate::extend::ClosingTransaction)).

use sqlx::{Connection, PgConnection, PgPool};

/// A table of probes in a test's schema, which every connection of a pool writes to in turn.
#[derive(Debug)]
pub struct PoolProbe {
    pool: PgPool,
    connections: u32,
    table: String,
}

impl PoolProbe {
    /// Creates the probes' table in `schema` for `pool`, which opens at most `connections`.
    pub async fn create(pool: &PgPool, connections: u32, schema: &str) -> PoolProbe {
        let table = format!("\"{schema}\".probes");
        sqlx::raw_sql(&format!("CREATE TABLE {table} (n int)"))
            .execute(pool)
            .await
            .expect("the probes' table");
        PoolProbe {
            pool: pool.clone(),
            connections,
            table,
        }
    }

    /// Every connection the pool may open, taken at once, writes a row tagged `tag`, and a
    /// connection of the probe's own then counts them.
    ///
    /// # Panics
    ///
    /// When a row is missing or a write fails: the connection that wrote it was inside a
    /// transaction that nothing will commit (or a read-only one), left so by whoever used it
    /// before.
    pub async fn assert_all_commit(&self, tag: i32) {
        let mut taken = Vec::new();
        for _ in 0..self.connections {
            taken.push(self.pool.acquire().await.expect("a connection of the pool"));
        }
        for conn in &mut taken {
            sqlx::query(&format!("INSERT INTO {} VALUES ($1)", self.table))
                .bind(tag)
                .execute(&mut **conn)
                .await
                .expect("the probe's write");
        }
        drop(taken);
        let mut outside = PgConnection::connect(&super::database_url())
            .await
            .expect("a connection of the probe's own");
        let seen: i64 =
            sqlx::query_scalar(&format!("SELECT count(*) FROM {} WHERE n = $1", self.table))
                .bind(tag)
                .fetch_one(&mut outside)
                .await
                .expect("the probes' count");
        assert_eq!(
            seen,
            i64::from(self.connections),
            "after {tag}, a pooled connection's write never committed: it was handed out \
             inside a transaction left open"
        );
    }
}
