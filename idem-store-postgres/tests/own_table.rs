//! Claim-then-process on a table of the user's own: overlapping claimers get
//! different rows, and a re-run picks up only what is left.

mod support;

use idem_store_postgres::own_table::ClaimBatch;
use idem_store_postgres::sqlx::{self, Row};
use std::collections::HashSet;
use support::TestStore;

const ROWS: i64 = 1_000;

async fn emails(test: &TestStore) -> String {
    let table = format!("\"{}\".emails", test.schema);
    sqlx::raw_sql(&format!(
        "CREATE TABLE {table} (
             id bigint PRIMARY KEY, recipient text NOT NULL,
             status text NOT NULL DEFAULT 'queued', claimed_at timestamptz);
         INSERT INTO {table} (id, recipient)
             SELECT i, 'user' || i || '@example.com' FROM generate_series(1, {ROWS}) i;"
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    table
}

fn claim(test: &TestStore) -> ClaimBatch {
    ClaimBatch::builder("emails")
        .schema(test.schema.clone())
        .status("status", "queued", "sending")
        .claimed_at("claimed_at")
        .returning(["id", "recipient"])
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_claimers_get_different_rows() {
    let test = TestStore::new("claimbatch", 12).await;
    let _ = emails(&test).await;
    let claim = claim(&test);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (claim, pool) = (claim.clone(), test.store.pool().clone());
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let rows = claim.claim(&pool, 25).await.unwrap();
                    if rows.is_empty() {
                        return mine;
                    }
                    mine.extend(rows.iter().map(|r| r.get::<i64, _>("id")));
                }
            })
        })
        .collect();
    let mut seen = HashSet::new();
    let mut total = 0;
    for task in tasks {
        for id in task.await.unwrap() {
            total += 1;
            assert!(seen.insert(id), "row {id} was claimed twice");
        }
    }
    assert_eq!(total, ROWS as usize, "every row claimed once");
}

#[tokio::test]
async fn a_re_run_picks_up_only_what_is_left() {
    let test = TestStore::new("claimbatch_rerun", 4).await;
    let table = emails(&test).await;
    let claim = claim(&test);
    let first = claim.claim(test.store.pool(), 300).await.unwrap();
    assert_eq!(first.len(), 300);
    assert!(first
        .iter()
        .all(|r| r.get::<String, _>("recipient").ends_with("@example.com")));
    let rest = claim.claim(test.store.pool(), 10_000).await.unwrap();
    assert_eq!(rest.len(), (ROWS - 300) as usize);
    let first_ids: HashSet<i64> = first.iter().map(|r| r.get("id")).collect();
    assert!(
        rest.iter()
            .all(|r| !first_ids.contains(&r.get::<i64, _>("id"))),
        "the re-run got none of the rows claimed before"
    );
    let stamped: i64 = sqlx::query(&format!(
        "SELECT count(*) FROM {table} WHERE status = 'sending' AND claimed_at IS NOT NULL"
    ))
    .fetch_one(test.store.pool())
    .await
    .unwrap()
    .get(0);
    assert_eq!(stamped, ROWS);
}

#[tokio::test]
async fn names_are_validated() {
    let err = ClaimBatch::builder("emails; DROP TABLE x")
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("invalid table name"), "{err}");
    let err = ClaimBatch::builder("emails")
        .returning(["id", "bad name"])
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("invalid column name"), "{err}");
}

/// In a generic plan (a server or connection with `plan_cache_mode = force_generic_plan`) the
/// claim still finds its rows by id: written with the usual `IN (SELECT .. LIMIT $3 ..)`,
/// it was planned as a hash join over a sequential scan of the whole table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_finds_its_rows_by_id_in_a_generic_plan() {
    let test = TestStore::new("claimbatch_plan", 2).await;
    let table = emails(&test).await;
    let mut conn = test.store.pool().acquire().await.unwrap();
    sqlx::raw_sql(&format!(
        "ANALYZE {table};
         SET plan_cache_mode = force_generic_plan;
         PREPARE planned AS {}",
        claim(&test).sql()
    ))
    .execute(&mut *conn)
    .await
    .unwrap();
    let plan: Vec<String> = sqlx::query_scalar("EXPLAIN EXECUTE planned('sending', 'queued', 25)")
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    let plan = plan.join("\n");
    assert!(
        !plan.contains("Seq Scan on emails"),
        "the claim scans the whole table:\n{plan}"
    );
    // The connection carries the setting and the prepared statement: it is not given back.
    conn.detach();
}

/// On a pool's connection, with the server's `plan_cache_mode = auto`, the claim is planned for
/// its first five executions and then keeps its generic plan: were the limit in sight of the
/// planner, a custom plan would always look cheaper and the server would plan every claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_is_planned_once_on_a_pools_connection() {
    let test = TestStore::new("claimbatch_auto", 2).await;
    let table = emails(&test).await;
    let mut conn = test.store.pool().acquire().await.unwrap();
    // A table big enough for a tenth of it (the generic plan's guess at `LIMIT $3`) to cost
    // more than the one row a custom plan would know it takes.
    sqlx::raw_sql(&format!(
        "INSERT INTO {table} (id, recipient)
             SELECT i, 'user' || i || '@example.com' FROM generate_series({ROWS} + 1, 20000) i;
         ANALYZE {table};
         SET plan_cache_mode = auto"
    ))
    .execute(&mut *conn)
    .await
    .unwrap();
    let claim = claim(&test);
    for _ in 0..10 {
        assert_eq!(claim.claim(&mut *conn, 1).await.unwrap().len(), 1);
    }
    let plans: (i64, i64) = sqlx::query_as(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
    )
    .bind(claim.sql())
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!(plans, (5, 5), "(generic, custom) plans in 10 claims");
    // The connection carries the setting: it is not given back.
    conn.detach();
}
