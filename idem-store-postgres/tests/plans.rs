//! The plans the store's connections keep (`testing` names what reads a table whole): each
//! statement finds its rows by key in the generic plan a connection keeps, on a fresh store, an
//! analyzed-empty one, and one that grew fast since its migration.

mod support;

use idem_store_postgres::sqlx;
use idem_store_postgres::testing::{
    arrays_scanned_per_row, custom_plan, fresh_claim, generic_plan, generic_plan_json,
    page_statements, statements, whole_reads,
};
use support::TestStore;

/// On a fresh store (its tables new and never analyzed, as a new deployment's), every
/// statement's generic plan finds its rows by key; and again once the empty tables are
/// analyzed (an `ANALYZE` of the database right after the first `migrate`).
#[tokio::test]
async fn every_statement_finds_its_rows_by_key_in_a_fresh_stores_generic_plan() {
    let test = TestStore::new("plans", 4).await;
    let (pool, store) = (test.store.pool(), &test.store);
    let mut conn = pool.acquire().await.unwrap();
    let mut failures = Vec::new();
    let (schema_name, table) = (&test.schema, idem_store_postgres::DEFAULT_TABLE);
    let analyze =
        format!("ANALYZE \"{schema_name}\".\"{table}\", \"{schema_name}\".\"{table}_effects\"");
    for (state, before) in [("never analyzed", None), ("analyzed empty", Some(analyze))] {
        if let Some(sql) = before {
            sqlx::raw_sql(&sql).execute(&mut *conn).await.unwrap();
        }
        for (name, statement) in statements(store) {
            let plan = generic_plan(&mut conn, &statement, false).await;
            let reads = whole_reads(&plan);
            if !reads.is_empty() {
                failures.push(format!(
                    "{name} ({state}) reads a whole table or index: {reads:?}\n{plan}"
                ));
            }
        }
    }
    drop(conn);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// On a store that grew fast since it was created (50,000 records, never
/// analyzed: autovacuum had not come yet), no statement's generic plan reads a table whole or
/// scans a batch's array of keys once per row. Without statistics the planner guesses that
/// `key = ANY($1)` matches 5% of a table, and it made the batched completion a nested loop that scanned the batch's whole array again for
/// each of its keys: at about 128 keys, 8-21 ms against about 1.5 ms with one scan.
#[tokio::test]
async fn no_statement_scans_a_batch_per_row_on_a_store_grown_since_its_migration() {
    let test = TestStore::new("grown", 4).await;
    let (pool, store) = (test.store.pool(), &test.store);
    sqlx::raw_sql(&format!(
        "INSERT INTO {table} (key, scope, fence, expires_at, purge_at)
             SELECT 'k' || i, '', i, now() + interval '1 day', now() + interval '1 day'
             FROM generate_series(1, 50000) i",
        table = store.table(),
    ))
    .execute(pool)
    .await
    .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let mut failures = Vec::new();
    for (name, statement) in statements(store) {
        let reads = whole_reads(&generic_plan(&mut conn, &statement, false).await);
        let plan = generic_plan_json(&mut conn, &statement).await;
        let per_row = arrays_scanned_per_row(&plan);
        if !reads.is_empty() || !per_row.is_empty() {
            failures.push(format!("{name}: {reads:?} {per_row:?}\n{plan:#}"));
        }
    }
    drop(conn);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The shape of the plan the batched completion had on a table of 50,000 records never
/// analyzed (`EXPLAIN (FORMAT JSON)`, trimmed): its array of keys is scanned on the loop's
/// inner side, in the heap scan's recheck and the index scan's condition. An array scanned on
/// the outer side, once, is not reported.
#[test]
fn an_array_parameter_on_a_nested_loops_inner_side_is_scanned_per_row() {
    let plan = |outer: &str, inner: &str| {
        serde_json::json!([{"Plan": {
            "Node Type": "ModifyTable",
            "Plans": [{
                "Node Type": "Nested Loop", "Parent Relationship": "Outer",
                "Plans": [
                    {"Node Type": "Bitmap Heap Scan", "Parent Relationship": "Outer",
                     "Recheck Cond": outer},
                    {"Node Type": "Bitmap Heap Scan", "Parent Relationship": "Inner",
                     "Recheck Cond": inner,
                     "Plans": [{"Node Type": "Bitmap Index Scan",
                                "Parent Relationship": "Outer", "Index Cond": inner}]}
                ]
            }]
        }}])
    };
    let per_row = "((key = c.key) AND (key = ANY ($1)))";
    assert_eq!(arrays_scanned_per_row(&plan("(x = 1)", per_row)).len(), 2);
    assert!(arrays_scanned_per_row(&plan("(key = ANY ($1))", "(key = c.key)")).is_empty());
}

#[test]
fn a_primary_key_read_without_its_key_is_a_whole_read() {
    let keyed = "Index Scan using idem_records_pkey on idem_records t\n  Index Cond: ((key = $1) AND (scope = ''::text))";
    assert!(whole_reads(keyed).is_empty());
    let scoped = "Bitmap Index Scan on idem_records_pkey  (cost=0.00..10.92 rows=2 width=0)\n  Index Cond: (scope = ''::text)";
    assert_eq!(whole_reads(scoped).len(), 1);
    let unconditioned = "Index Only Scan using idem_records_effects_pkey on idem_records_effects\n  Filter: (effect = 'mail'::text)";
    assert_eq!(whole_reads(unconditioned).len(), 1);
    assert_eq!(whole_reads("Seq Scan on idem_records_effects e").len(), 1);
}

/// Any of idem's indexes read with no condition is every entry in the index's order; read with
/// one, as the purge reads `purge_at`, it is not.
#[test]
fn an_index_read_without_a_condition_is_a_whole_read() {
    let every_record =
        "->  Index Scan using idem_records_purge_at on idem_records t\n      Filter: (key = $1)";
    assert_eq!(whole_reads(every_record).len(), 1);
    let due = "->  Index Scan using idem_records_purge_at on idem_records t\n      Index Cond: (purge_at < now())";
    assert!(whole_reads(due).is_empty());
}

/// The claim a transactional call sends with its BEGIN (`fresh_claim.rs`) is a statement the
/// connection prepared, run with the server's settings (sequential scans allowed, the plan
/// custom or generic as the server chooses): each plan looks the key up, on a fresh table and
/// on one of 20,000 records. (Sent as text with its values, planned anew each time, the claim
/// cost more server time than the round trip it saves; and with its values wrapped in
/// `convert_from(decode(..))`, a stable function the planner does not fold, its check for a
/// record from before scopes read the whole table: 3.7 ms a claim among 20,000 records.)
#[tokio::test]
async fn the_claim_sent_with_a_begin_looks_its_key_up() {
    let test = TestStore::new("fresh_plan", 4).await;
    let (pool, store) = (test.store.pool(), &test.store);
    let table = store.table();
    let (prepare, execute) = fresh_claim(store, "k1'x");
    let (_, body) = prepare
        .split_once(" AS")
        .expect("PREPARE name(types) AS statement");
    let mut conn = pool.acquire().await.unwrap();
    let mut plans = vec![generic_plan(&mut conn, body, true).await];
    sqlx::raw_sql(&format!(
        "INSERT INTO {table} (key, scope, fence, completed_at, expires_at, purge_at)
         SELECT 'k' || i, 'default', i, now(), now() + interval '1 day', now() + interval '1 day'
         FROM generate_series(1, 20000) i;
         ANALYZE {table};
         {prepare}"
    ))
    .execute(&mut *conn)
    .await
    .unwrap();
    plans.push(generic_plan(&mut conn, body, true).await);
    let execute = execute
        .strip_prefix("BEGIN; ")
        .expect("sent with its BEGIN");
    // The plan the server makes with the values (its first five executions on a connection).
    sqlx::raw_sql("SET plan_cache_mode = force_custom_plan")
        .execute(&mut *conn)
        .await
        .unwrap();
    let rows: Vec<(String,)> = sqlx::query_as(&format!("EXPLAIN {execute}"))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    plans.push(
        rows.into_iter()
            .map(|(line,)| line)
            .collect::<Vec<_>>()
            .join("\n"),
    );
    drop(conn);
    for plan in plans {
        assert!(whole_reads(&plan).is_empty(), "{plan}");
        assert!(
            plan.contains("Index Only Scan using idem_records_pkey"),
            "{plan}"
        );
    }
}

/// A purge batch deletes (or files again) the rows it locked by their `ctid`: no plan of it
/// joins the batch back to the table, and the store's connections (sequential scans off) fetch
/// them by TID. It used to match them by key and scope, and the generic plan a store's
/// connection made (the batch's size unknown to it) compared every row with the whole batch:
/// a batch of 10,000 took 16 s. A connection that allows sequential scans reads a table the
/// planner thinks tiny (new, never analyzed: here the journal) whole, and fetches by TID once
/// it is analyzed.
#[tokio::test]
async fn a_purge_batch_finds_its_rows_without_a_join() {
    let test = TestStore::new("purge_plan", 4).await;
    let (pool, store) = (test.store.pool(), &test.store);
    let table = store.table();
    let purge = statements(store)
        .into_iter()
        .find_map(|(name, sql)| (name == "records purge").then_some(sql))
        .expect("the purge is among the statements");
    let purge = purge.as_str();
    let mut conn = pool.acquire().await.unwrap();
    // (plan, the TID scans of the records and of the journal it must have)
    let mut plans = Vec::new();
    for seqscan in [false, true] {
        let by_tid = if seqscan { (0, 0) } else { (2, 1) };
        plans.push((generic_plan(&mut conn, purge, seqscan).await, by_tid));
    }
    sqlx::raw_sql(&format!(
        "INSERT INTO {table} (key, fence, expires_at, purge_at)
         SELECT 'old:' || i, i, now() - interval '1 hour', now() - interval '1 hour'
         FROM generate_series(1, 10000) i;
         ANALYZE {table};"
    ))
    .execute(&mut *conn)
    .await
    .unwrap();
    for seqscan in [false, true] {
        let by_tid = if seqscan { (2, 0) } else { (2, 1) };
        plans.push((generic_plan(&mut conn, purge, seqscan).await, by_tid));
    }
    drop(conn);
    for (plan, (records, journal)) in plans {
        assert!(
            !plan.contains("Join") && !plan.contains("Nested Loop"),
            "{plan}"
        );
        let tid_scans = |table: &str| plan.matches(&format!("Tid Scan on {table} ")).count();
        assert!(tid_scans("idem_records") >= records, "{plan}");
        assert!(tid_scans("idem_records_effects") >= journal, "{plan}");
    }
}

/// A page of records (the dashboard's lists: `Inspect::page`) is a range of the primary key:
/// on a table of 200,000 records the plan walks the index from the page's start and stops when
/// the page is full, with no sort and no read of the table whole, in the plan the server makes
/// with the values (the first page, and one deep in the table) and in the generic one. A list
/// ordered by anything the index does not hold would sort every record for each page.
#[tokio::test]
async fn a_page_of_records_is_a_range_of_the_primary_key() {
    let test = TestStore::new("pages", 2).await;
    let (pool, store) = (test.store.pool(), &test.store);
    sqlx::raw_sql(&format!(
        "INSERT INTO {table} (key, scope, fence, completed_at, expires_at, purge_at)
             SELECT 'k' || i, 's' || (i % 3), i, CASE WHEN i % 10 > 0 THEN now() END,
                    now() + interval '1 day', now() + interval '1 day'
             FROM generate_series(1, 200000) i;
         ANALYZE {table}",
        table = store.table(),
    ))
    .execute(pool)
    .await
    .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let mut failures = Vec::new();
    for (name, statement) in page_statements(store) {
        let plans = [
            ("generic", generic_plan(&mut conn, &statement, true).await),
            (
                "first page",
                custom_plan(&mut conn, &statement, "NULL, NULL, NULL, 50, '', '', 10000").await,
            ),
            (
                "deep page, filtered",
                custom_plan(
                    &mut conn,
                    &statement,
                    "'completed', 's1', 'k1', 50, 'k150000', 's0', 10000",
                )
                .await,
            ),
        ];
        for (which, plan) in plans {
            let range = plan
                .lines()
                .skip_while(|line| !line.contains("Index Scan using idem_records_pkey"))
                .nth(1)
                .is_some_and(|cond| {
                    cond.contains("Index Cond:") && cond.contains("ROW(key, scope) >")
                });
            if !range || plan.contains("Sort") || plan.contains("Seq Scan") {
                failures.push(format!("{name} ({which}):\n{plan}"));
            }
        }
    }
    drop(conn);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
