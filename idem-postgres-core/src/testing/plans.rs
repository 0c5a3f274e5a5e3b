//! The plans the store's connections keep: one generic plan per statement, made on its first
//! execution, with sequential scans off (`connections/setup.rs`). A generic plan made while a
//! table is new and never analyzed (a fresh deployment's) is kept for the connection's life, so
//! each statement must find its rows by key in any such plan: a read of a whole index costs more
//! with every row the table gains. These read a statement's generic plan and what in it reads a
//! table whole, for the tests that hold the store to that.

/// The generic plan of `statement` on `conn`, as a connection of the store's (or, with
/// `seqscan`, one with sequential scans allowed) would keep it. The plan does not depend on
/// the arguments, so every parameter is NULL.
pub async fn generic_plan(conn: &mut sqlx::PgConnection, statement: &str, seqscan: bool) -> String {
    explain_generic(conn, statement, seqscan, "").await
}

/// [`generic_plan`] as `EXPLAIN (FORMAT JSON)` gives it: each node with its children and their
/// relationship to it (a nested loop's `Inner` side runs again for every outer row).
pub async fn generic_plan_json(
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
/// at a full batch, many times the cost of the statement planned as it should be.
pub fn arrays_scanned_per_row(plan: &serde_json::Value) -> Vec<String> {
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

/// The store's indexes that a read must bound, each with what its condition must name: the
/// records' and the journal's primary keys by the key (a condition on the scope alone reads
/// every entry of the scope).
pub const RECORDS_INDEXES: &[(&str, &str)] = &[
    ("idem_records_pkey", "key ="),
    ("idem_records_effects_pkey", "key ="),
];

/// What in `plan` reads one of the store's tables whole: [`whole_reads_bounded`] by
/// [`RECORDS_INDEXES`].
pub fn whole_reads(plan: &str) -> Vec<String> {
    whole_reads_bounded(plan, RECORDS_INDEXES)
}

/// What in `plan` reads one of the tables named `idem_records*` whole (the store's, and those
/// a crate building on it keeps beside them): a sequential scan; a use of any of their indexes
/// with no condition at all (every entry, in the index's order); or a use of one of `bounded`'s
/// indexes whose condition does not name what it must (a primary key's key; a partial index's
/// bounding column).
pub fn whole_reads_bounded(plan: &str, bounded: &[(&str, &str)]) -> Vec<String> {
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
        let unbounded = bounded
            .iter()
            .any(|(index, named)| uses(index) && !condition.contains(named));
        if condition.is_empty() || unbounded {
            found.push(format!("{} / {}", line.trim(), next.trim()));
        }
    }
    found
}

/// Every statement the store runs on the hot path, by name.
pub fn statements(store: &crate::PgStore) -> Vec<(&'static str, String)> {
    let r = store.records();
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
    ]
}

/// The operator's keyset pages of records ([`idem_core::Inspect::page`]), by name.
pub fn page_statements(store: &crate::PgStore) -> Vec<(&'static str, String)> {
    let r = &store.records().inspect;
    vec![
        ("records page_from", r.page_from.clone()),
        ("records page_after", r.page_after.clone()),
    ]
}

/// The plan the server makes for `statement` with the values `args` (SQL literals), as it
/// does for a connection's first executions: `EXPLAIN EXECUTE` of it prepared.
pub async fn custom_plan(conn: &mut sqlx::PgConnection, statement: &str, args: &str) -> String {
    use sqlx::Row;
    sqlx::raw_sql(&format!(
        "SET plan_cache_mode = force_custom_plan; PREPARE custom_planned AS {statement}"
    ))
    .execute(&mut *conn)
    .await
    .unwrap_or_else(|e| panic!("{e}: {statement}"));
    let rows = sqlx::query(&format!("EXPLAIN EXECUTE custom_planned({args})"))
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{e}: {statement}"));
    let plan: Vec<String> = rows.iter().map(|row| row.get::<String, _>(0)).collect();
    sqlx::raw_sql("DEALLOCATE custom_planned; RESET plan_cache_mode")
        .execute(&mut *conn)
        .await
        .unwrap();
    plan.join("\n")
}

/// The claim sent with a BEGIN (`claim_with_begin`) for `key`: the statement that prepares it on
/// a connection, and what is sent to run it (its BEGIN included).
pub fn fresh_claim(store: &crate::PgStore, key: &str) -> (String, String) {
    let args = crate::fresh_claim::FreshArgs::example(key).sql();
    (
        store.records().claim_fresh_prepare.clone(),
        store.records().claim_fresh(&args),
    )
}

#[cfg(test)]
mod tests {
    use super::parameters;

    #[test]
    fn parameters_are_counted_by_their_highest_number() {
        assert_eq!(parameters("SELECT 1"), 0);
        assert_eq!(parameters("SELECT $1, $12::int, $3"), 12);
    }
}
