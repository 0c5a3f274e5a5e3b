//! The plans the store's connections keep: one generic plan per statement, made on its first
//! execution, with sequential scans off (`connections/setup.rs`). A generic plan made while a table is new
//! and never analyzed (a fresh deployment's) is kept for the connection's life, so each
//! statement must find its rows by key in any such plan: a read of a whole index costs more
//! with every row the table gains.

use crate::queue::sql::QueueSql;

/// The generic plan of `statement` on `conn`, as a connection of the store's (or, with
/// `seqscan`, one with sequential scans allowed) would keep it. The plan does not depend on
/// the arguments, so every parameter is NULL.
pub(crate) async fn generic_plan(
    conn: &mut sqlx::PgConnection,
    statement: &str,
    seqscan: bool,
) -> String {
    explain_generic(conn, statement, seqscan, "").await
}

/// [`generic_plan`] as `EXPLAIN (FORMAT JSON)` gives it: each node with its children and their
/// relationship to it (a nested loop's `Inner` side runs again for every outer row).
pub(crate) async fn generic_plan_json(
    conn: &mut sqlx::PgConnection,
    statement: &str,
) -> serde_json::Value {
    let text = explain_generic(conn, statement, false, "(FORMAT JSON) ").await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `EXPLAIN {options}` of `statement`'s generic plan, its rows joined by newlines.
async fn explain_generic(
    conn: &mut sqlx::PgConnection,
    statement: &str,
    seqscan: bool,
    options: &str,
) -> String {
    use sqlx::Row;
    let seqscan = if seqscan { "on" } else { "off" };
    sqlx::raw_sql(&format!(
        "SET enable_seqscan = {seqscan}; SET plan_cache_mode = force_generic_plan;
         PREPARE planned AS {statement}"
    ))
    .execute(&mut *conn)
    .await
    .unwrap_or_else(|e| panic!("{e}: {statement}"));
    let nulls = vec!["NULL"; parameters(statement)].join(", ");
    let rows = sqlx::query(&format!("EXPLAIN {options}EXECUTE planned({nulls})"))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    sqlx::raw_sql("DEALLOCATE planned; RESET enable_seqscan; RESET plan_cache_mode")
        .execute(&mut *conn)
        .await
        .unwrap();
    rows.iter()
        // A JSON plan comes as one value of type `json`, whose wire form is its text.
        .map(|row| row.try_get_unchecked::<String, _>(0).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The index conditions in `plan` (as [`generic_plan_json`] gives it) that take an array
/// parameter (`= ANY ($n)`) on the inner side of a nested loop, where they run again for every
/// outer row. Each run sorts the whole array again (comparing keys in the column's collation)
/// and descends the index once per element, so a batch of n keys costs n sorts and n² descents:
/// at about 128 keys, 8-21 ms for a completion that takes about 1.5 ms (BENCHMARKS.md).
pub(crate) fn arrays_scanned_per_row(plan: &serde_json::Value) -> Vec<String> {
    fn walk(node: &serde_json::Value, per_row: bool, found: &mut Vec<String>) {
        let kind = node["Node Type"].as_str().unwrap_or_default();
        if per_row {
            for condition in ["Index Cond", "Recheck Cond"] {
                if let Some(text) = node[condition].as_str() {
                    if text.contains("ANY ($") {
                        found.push(format!("{kind}: {condition}: {text}"));
                    }
                }
            }
        }
        for child in node["Plans"].as_array().into_iter().flatten() {
            let inner = kind == "Nested Loop" && child["Parent Relationship"] == "Inner";
            walk(child, per_row || inner, found);
        }
    }
    let mut found = Vec::new();
    for statement in plan.as_array().into_iter().flatten() {
        walk(&statement["Plan"], false, &mut found);
    }
    found
}

/// The highest `$n` in `statement`.
fn parameters(statement: &str) -> usize {
    statement
        .split('$')
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .max()
        .unwrap_or(0)
}

/// What in `plan` reads one of idem's tables whole: a sequential scan; a use of any of their
/// indexes with no condition at all (every entry, in the index's order); a use of a primary
/// key (the records' `(key, scope)`, the queue's `key`) whose condition does not name the key
/// (a condition on the scope alone reads every entry); or a use of one of the queue's partial
/// indexes whose condition does not bound its column: `q_avail` without `available_at` reads
/// every queued and running job (a backlog), `q_finished` without `finished_at` every done or
/// dead one (a table's bulk, until purged).
pub(crate) fn whole_reads(plan: &str) -> Vec<String> {
    let lines: Vec<&str> = plan.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.contains("Seq Scan on idem_records") {
            found.push(line.trim().to_owned());
            continue;
        }
        let uses = |index: &str| {
            line.contains(&format!("using {index} ")) || line.contains(&format!("on {index} "))
        };
        if !(line.contains("Index Scan using idem_records")
            || line.contains("Index Only Scan using idem_records")
            || line.contains("Bitmap Index Scan on idem_records"))
        {
            continue;
        }
        // The scan's condition, where it has one, is the line after it.
        let next = lines.get(i + 1).copied().unwrap_or("");
        let condition = if next.contains("Index Cond: ") {
            next
        } else {
            ""
        };
        let pkey = [
            "idem_records_pkey",
            "idem_records_queue_pkey",
            "idem_records_effects_pkey",
        ]
        .iter()
        .any(|index| uses(index));
        let unbounded_partial = [
            ("idem_records_q_avail", "available_at"),
            ("idem_records_q_finished", "finished_at"),
        ]
        .iter()
        .any(|(index, column)| uses(index) && !condition.contains(column));
        if condition.is_empty() || (pkey && !condition.contains("key =")) || unbounded_partial {
            found.push(format!("{} / {}", line.trim(), next.trim()));
        }
    }
    found
}

/// Every statement the store and its queue run on the hot path, by name.
fn statements(store: &crate::PgStore) -> Vec<(&'static str, String)> {
    let r = store.records();
    let q = QueueSql::new(store);
    vec![
        ("records claim", r.claim.clone()),
        ("records claim_completed", r.claim_completed.clone()),
        ("records claim_many", r.claim_many.clone()),
        ("records takeover", r.takeover.clone()),
        ("records complete", r.complete.clone()),
        ("records complete_many", r.complete_many.clone()),
        ("records release", r.release.clone()),
        ("records renew", r.renew.clone()),
        ("records get", r.get.clone()),
        ("records look_up", r.look_up.clone()),
        ("records effect", r.effect.clone()),
        ("records record_effect", r.record_effect.clone()),
        ("records purge", r.purge.clone()),
        ("queue enqueue", q.enqueue),
        ("queue same_payload", q.same_payload),
        ("queue claim", q.claim),
        ("queue renew", q.renew),
        ("queue done", q.done),
        ("queue complete_and_done_many", q.complete_and_done_many),
        ("queue complete_and_claim_many", q.complete_and_claim_many),
        ("queue complete_and_done_one", q.complete_and_done_one),
        ("queue complete_and_claim_one", q.complete_and_claim_one),
        ("queue retry", q.retry),
        ("queue dead", q.dead),
        ("queue release", q.release),
        ("queue status", q.status),
        ("queue retry_dead", q.retry_dead),
        ("queue discard", q.discard),
        ("queue purge_done", q.purge_done),
    ]
}

/// On a fresh store (its tables new and never analyzed, as a new deployment's), every
/// statement's generic plan finds its rows by key; and again once the empty tables are
/// analyzed (an `ANALYZE` of the database right after the first `migrate`). The queue's claims
/// failed the first before their check for a pre-scope record became a lookup per key: their
/// plan read every entry of the records' primary key with `scope = ''`, once per claim. The
/// queue's `done` and `release` failed the second while they found their jobs by a join to the
/// batch alone: the planner, told the queue was empty, read its whole primary key and joined.
#[tokio::test]
async fn every_statement_finds_its_rows_by_key_in_a_fresh_stores_generic_plan() {
    let (pool, schema, store) = crate::test_store::store_in_new_schema("plans").await;
    let mut conn = pool.acquire().await.unwrap();
    let mut failures = Vec::new();
    let (schema_name, table) = store.names();
    let analyze = format!(
        "ANALYZE \"{schema_name}\".\"{table}\", \"{schema_name}\".\"{table}_effects\",
                 \"{schema_name}\".\"{table}_queue\""
    );
    for (state, before) in [("never analyzed", None), ("analyzed empty", Some(analyze))] {
        if let Some(sql) = before {
            sqlx::raw_sql(&sql).execute(&mut *conn).await.unwrap();
        }
        for (name, statement) in statements(&store) {
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
    crate::test_store::drop_schema(&pool, &schema).await;
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// On a store that grew fast since it was created (50,000 records and as many jobs, never
/// analyzed: autovacuum had not come yet), no statement's generic plan reads a table whole or
/// scans a batch's array of keys once per row. Without statistics the planner guesses that
/// `key = ANY($1)` matches 5% of a table, and it made the batched completion (and the queue's
/// completions, which embed it) a nested loop that scanned the batch's whole array again for
/// each of its keys: at about 128 keys, 8-21 ms against about 1.5 ms with one scan.
#[tokio::test]
async fn no_statement_scans_a_batch_per_row_on_a_store_grown_since_its_migration() {
    let (pool, schema, store) = crate::test_store::store_in_new_schema("grown").await;
    sqlx::raw_sql(&format!(
        "INSERT INTO {table} (key, scope, fence, expires_at, purge_at)
             SELECT 'k' || i, '', i, now() + interval '1 day', now() + interval '1 day'
             FROM generate_series(1, 50000) i;
         INSERT INTO {schema}.idem_records_queue (key, payload, max_attempts)
             SELECT 'job:' || i, to_jsonb(i), 25 FROM generate_series(1, 50000) i",
        table = store.table(),
    ))
    .execute(&pool)
    .await
    .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let mut failures = Vec::new();
    for (name, statement) in statements(&store) {
        let reads = whole_reads(&generic_plan(&mut conn, &statement, false).await);
        let plan = generic_plan_json(&mut conn, &statement).await;
        let per_row = arrays_scanned_per_row(&plan);
        if !reads.is_empty() || !per_row.is_empty() {
            failures.push(format!("{name}: {reads:?} {per_row:?}\n{plan:#}"));
        }
    }
    drop(conn);
    crate::test_store::drop_schema(&pool, &schema).await;
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
fn parameters_are_counted_by_their_highest_number() {
    assert_eq!(parameters("SELECT 1"), 0);
    assert_eq!(parameters("SELECT $1, $12::int, $3"), 12);
}

#[test]
fn a_primary_key_read_without_its_key_is_a_whole_read() {
    let keyed = "Index Scan using idem_records_pkey on idem_records t\n  Index Cond: ((key = $1) AND (scope = ''::text))";
    assert!(whole_reads(keyed).is_empty());
    let scoped = "Bitmap Index Scan on idem_records_pkey  (cost=0.00..10.92 rows=2 width=0)\n  Index Cond: (scope = ''::text)";
    assert_eq!(whole_reads(scoped).len(), 1);
    let unconditioned = "Index Only Scan using idem_records_queue_pkey on idem_records_queue\n  Filter: (state = 'done'::text)";
    assert_eq!(whole_reads(unconditioned).len(), 1);
    assert_eq!(whole_reads("Seq Scan on idem_records_queue q").len(), 1);
}

/// The queue's partial indexes read without a bound on their column are every job of their
/// states, as the queue's batched completions read them before they found the batch's jobs by
/// key alone: every unfinished job to mark the batch's done, and (hashed) every done job to
/// check whether a completion sent again found its job done. Read with a bound, as a claim
/// reads `q_avail` and `purge_done` reads `q_finished`, they are not.
#[test]
fn the_queues_partial_indexes_read_without_a_bound_are_whole_reads() {
    let every_done = "->  Bitmap Index Scan on idem_records_q_finished  (cost=0.00..4.13 rows=114 width=0)\n      Index Cond: (state = 'done'::text)";
    assert_eq!(whole_reads(every_done).len(), 1);
    let expired = "->  Index Scan using idem_records_q_finished on idem_records_queue\n      Index Cond: ((state = 'done'::text) AND (finished_at < $1))";
    assert!(whole_reads(expired).is_empty());
    let every_unfinished = "->  Bitmap Index Scan on idem_records_q_avail  (cost=0.00..4.13 rows=4 width=0)\n->  Function Scan on d";
    assert_eq!(whole_reads(every_unfinished).len(), 1);
    let available = "->  Index Scan using idem_records_q_avail on idem_records_queue\n      Index Cond: (available_at <= now())";
    assert!(whole_reads(available).is_empty());
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
    let (pool, schema, store) = crate::test_store::store_in_new_schema("fresh_plan").await;
    let table = store.table();
    let prepare = &store.records().claim_fresh_prepare;
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
    let args = crate::fresh_claim::FreshArgs::example("k1'x").sql();
    let execute = store.records().claim_fresh(&args);
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
    crate::test_store::drop_schema(&pool, &schema).await;
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
    let (pool, schema, store) = crate::test_store::store_in_new_schema("purge_plan").await;
    let (table, purge) = (store.table(), &store.records().purge);
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
    crate::test_store::drop_schema(&pool, &schema).await;
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
