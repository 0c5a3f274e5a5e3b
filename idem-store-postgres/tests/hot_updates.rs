//! A completion rewrites its record in place (a HOT update): it changes no column an index
//! covers, so PostgreSQL writes no new index entries for it. This is what keeps the second of
//! a call's two writes cheap (0007_purge_at.sql).

mod support;

use idem_store_postgres::sqlx::{self, Row};
use idem_store_postgres::testing::statements;
use support::TestStore;

/// The statement of `store` named `name` (see [`statements`]).
fn statement(store: &idem_store_postgres::PgStore, name: &str) -> String {
    statements(store)
        .into_iter()
        .find_map(|(n, sql)| (n == name).then_some(sql))
        .unwrap_or_else(|| panic!("no statement {name}"))
}

/// The columns a completion writes.
const COMPLETION_WRITES: [&str; 3] = ["completed_at", "expires_at", "output"];

/// No index of the records table covers a column a completion writes (`purge_at` changes
/// only when `keep` ends before the lease would have).
#[tokio::test]
async fn no_index_covers_a_column_a_completion_writes() {
    let test = TestStore::new("hot_cols", 4).await;
    let (pool, schema) = (test.store.pool(), &test.schema);
    let covered: Vec<String> = sqlx::query(
        "SELECT DISTINCT a.attname::text FROM pg_index i
         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
         WHERE i.indrelid = ($1 || '.idem_records')::regclass",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| row.get(0))
    .collect();
    let expressions: i64 = sqlx::query(
        "SELECT count(*) FROM pg_index WHERE indrelid = ($1 || '.idem_records')::regclass
           AND (indexprs IS NOT NULL OR indpred IS NOT NULL)",
    )
    .bind(schema)
    .fetch_one(pool)
    .await
    .unwrap()
    .get(0);
    assert!(covered.contains(&"purge_at".to_owned()), "{covered:?}");
    for column in COMPLETION_WRITES {
        assert!(
            !covered.iter().any(|c| c == column),
            "an index covers {column}, which a completion writes: {covered:?}"
        );
    }
    assert_eq!(
        expressions, 0,
        "an expression or partial index may cover any column"
    );
}

/// Claimed and completed with the store's own statements, one record and a batch of three:
/// every completion is a HOT update, counted by PostgreSQL in the statements' transaction.
#[tokio::test]
async fn completions_are_hot_updates() {
    let test = TestStore::new("hot_upd", 4).await;
    let (pool, schema, store) = (test.store.pool(), &test.schema, &test.store);
    let mut tx = pool.begin().await.unwrap();
    let mut fences = Vec::new();
    for key in ["hot:1", "hot:2", "hot:3", "hot:4"] {
        let row = sqlx::query(&statement(store, "records claim"))
            .bind(key)
            .bind(None::<String>)
            .bind(30_000_000_i64)
            .bind(None::<i64>)
            .bind("default")
            .bind("test")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        assert!(row.get::<bool, _>(0), "{key} is a fresh claim");
        fences.push(row.get::<i64, _>(1));
    }
    let done = sqlx::query(&statement(store, "records complete"))
        .bind("hot:1")
        .bind(fences[0])
        .bind(None::<Vec<u8>>)
        .bind(86_400_000_000_i64)
        .execute(&mut *tx)
        .await
        .unwrap();
    assert_eq!(done.rows_affected(), 1);
    let batch = sqlx::query(&statement(store, "records complete_many"))
        .bind(vec!["hot:2", "hot:3", "hot:4"])
        .bind(&fences[1..])
        .bind(vec![None::<Vec<u8>>, Some(b"out".to_vec()), None])
        .bind(vec![86_400_000_000_i64; 3])
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    assert_eq!(batch.len(), 3);
    let counts = sqlx::query(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
         WHERE relid = ($1 || '.idem_records')::regclass",
    )
    .bind(schema)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    let (updated, hot): (i64, i64) = (counts.get(0), counts.get(1));
    tx.rollback().await.unwrap();
    assert_eq!((updated, hot), (4, 4), "four completions, all HOT");
}
