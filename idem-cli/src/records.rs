//! The records commands: show, list, release, forget, effects, purge.

use idem_core::Purge;
use idem_store_postgres::sqlx::{self, postgres::PgRow, Row};
use serde_json::{json, Map, Value};

use crate::args::State;
use crate::output::{Out, NOT_FOUND, OK, REFUSED, USAGE};
use crate::Ctx;

/// A timestamp column as RFC 3339 text (UTC).
fn ts(column: &str) -> String {
    format!("to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
}

/// The state of a record, in SQL: `claimed` (live lease), `stale` (lapsed lease), `completed`,
/// `expired` (completed, past its keep).
const STATE: &str = "CASE WHEN completed_at IS NOT NULL THEN
        (CASE WHEN expires_at > now() THEN 'completed' ELSE 'expired' END)
    WHEN expires_at > now() THEN 'claimed' ELSE 'stale' END";

fn columns() -> String {
    format!(
        "key, scope, fence, fingerprint, holder, {STATE} AS state,
         {completed} AS completed_at, {expires} AS expires_at,
         extract(epoch FROM expires_at - now())::float8 AS left_s,
         octet_length(output)::bigint AS output_bytes",
        completed = ts("completed_at"),
        expires = ts("expires_at"),
    )
}

/// A record row as a JSON object (the fields of `show` and `list`).
fn record(row: &PgRow) -> Map<String, Value> {
    let state: String = row.get("state");
    let left: f64 = row.get("left_s");
    let mut object = Map::new();
    object.insert("key".into(), json!(row.get::<String, _>("key")));
    object.insert("scope".into(), json!(row.get::<String, _>("scope")));
    object.insert("state".into(), json!(state));
    object.insert("fence".into(), json!(row.get::<i64, _>("fence")));
    object.insert(
        "holder".into(),
        json!(row.get::<Option<String>, _>("holder")),
    );
    let claimed = state == "claimed" || state == "stale";
    object.insert(
        "lease_expires_at".into(),
        json!(claimed.then(|| row.get::<String, _>("expires_at"))),
    );
    object.insert(
        "lease_left_s".into(),
        json!(claimed.then(|| (left.max(0.0) * 10.0).round() / 10.0)),
    );
    object.insert(
        "completed_at".into(),
        json!(row.get::<Option<String>, _>("completed_at")),
    );
    object.insert(
        "keep_until".into(),
        json!((!claimed).then(|| row.get::<String, _>("expires_at"))),
    );
    object.insert(
        "fingerprint".into(),
        json!(row.get::<Option<String>, _>("fingerprint")),
    );
    object.insert(
        "output_bytes".into(),
        json!(row.get::<Option<i64>, _>("output_bytes")),
    );
    object
}

const LIST_COLUMNS: [&str; 6] = ["key", "scope", "state", "fence", "holder", "lease_left_s"];

async fn find(ctx: &Ctx, key: &str, scope: Option<&str>) -> Result<Vec<PgRow>, sqlx::Error> {
    sqlx::query(&format!(
        "SELECT {} FROM {} WHERE key = $1 AND ($2::text IS NULL OR scope = $2) ORDER BY scope",
        columns(),
        ctx.records()
    ))
    .bind(key)
    .bind(scope)
    .fetch_all(&ctx.pool)
    .await
}

/// The one record `key` names, or the exit status and message when there is none or several.
async fn one(
    ctx: &Ctx,
    out: &mut Out<'_>,
    key: &str,
    scope: Option<&str>,
) -> Result<Result<PgRow, i32>, sqlx::Error> {
    let mut rows = find(ctx, key, scope).await?;
    Ok(match rows.len() {
        0 => {
            not_found(out, key, scope);
            Err(NOT_FOUND)
        }
        1 => Ok(rows.remove(0)),
        _ => {
            let scopes: Vec<String> = rows.iter().map(|r| r.get("scope")).collect();
            out.message(
                &format!(
                    "{key:?} has records in several scopes ({}); name one with --scope",
                    scopes.join(", ")
                ),
                Map::from_iter([("scopes".into(), json!(scopes))]),
            );
            Err(USAGE)
        }
    })
}

fn not_found(out: &mut Out<'_>, key: &str, scope: Option<&str>) {
    let scope = scope
        .map(|s| format!(" in scope {s:?}"))
        .unwrap_or_default();
    out.message(
        &format!("no record for {key:?}{scope}: never claimed, released, forgotten or purged"),
        Map::from_iter([("found".into(), json!(false))]),
    );
}

async fn journal(
    ctx: &Ctx,
    key: &str,
    scope: Option<&str>,
) -> Result<Vec<Map<String, Value>>, sqlx::Error> {
    let rows = sqlx::query(&format!(
        "SELECT scope, effect, CASE state WHEN 1 THEN 'done' ELSE 'started' END AS state, fence,
                {recorded} AS recorded_at, {expires} AS expires_at,
                octet_length(output)::bigint AS output_bytes
         FROM {effects} WHERE key = $1 AND ($2::text IS NULL OR scope = $2)
         ORDER BY recorded_at, effect",
        recorded = ts("recorded_at"),
        expires = ts("expires_at"),
        effects = ctx.effects(),
    ))
    .bind(key)
    .bind(scope)
    .fetch_all(&ctx.pool)
    .await?;
    Ok(rows
        .iter()
        .map(|row| {
            Map::from_iter([
                ("scope".into(), json!(row.get::<String, _>("scope"))),
                ("effect".into(), json!(row.get::<String, _>("effect"))),
                ("state".into(), json!(row.get::<String, _>("state"))),
                ("fence".into(), json!(row.get::<i64, _>("fence"))),
                (
                    "recorded_at".into(),
                    json!(row.get::<String, _>("recorded_at")),
                ),
                (
                    "expires_at".into(),
                    json!(row.get::<String, _>("expires_at")),
                ),
                (
                    "output_bytes".into(),
                    json!(row.get::<Option<i64>, _>("output_bytes")),
                ),
            ])
        })
        .collect())
}

pub async fn show(
    ctx: &Ctx,
    out: &mut Out<'_>,
    key: &str,
    scope: Option<&str>,
) -> Result<i32, sqlx::Error> {
    let rows = find(ctx, key, scope).await?;
    if rows.is_empty() {
        not_found(out, key, scope);
        return Ok(NOT_FOUND);
    }
    let mut records = Vec::new();
    for row in &rows {
        let mut object = record(row);
        let scope: String = row.get("scope");
        object.insert(
            "journal".into(),
            json!(journal(ctx, key, Some(&scope)).await?),
        );
        records.push(object);
    }
    if out.json {
        out.object(&Map::from_iter([("records".into(), json!(records))]));
    } else {
        for (i, object) in records.iter().enumerate() {
            if i > 0 {
                let _ = writeln!(out.w);
            }
            out.object(object);
        }
    }
    Ok(OK)
}

pub async fn list(
    ctx: &Ctx,
    out: &mut Out<'_>,
    state: Option<State>,
    scope: Option<&str>,
    prefix: Option<&str>,
    limit: i64,
) -> Result<i32, sqlx::Error> {
    let state = state.map(|s| match s {
        State::Claimed => "claimed",
        State::Stale => "stale",
        State::Completed => "completed",
    });
    let rows = sqlx::query(&format!(
        "SELECT {} FROM {} WHERE ($1::text IS NULL OR {STATE} = $1)
           AND ($2::text IS NULL OR scope = $2) AND ($3::text IS NULL OR starts_with(key, $3))
         ORDER BY coalesce(completed_at, expires_at) DESC LIMIT $4",
        columns(),
        ctx.records()
    ))
    .bind(state)
    .bind(scope)
    .bind(prefix)
    .bind(limit)
    .fetch_all(&ctx.pool)
    .await?;
    let records: Vec<_> = rows.iter().map(record).collect();
    out.rows("records", &LIST_COLUMNS, &records);
    Ok(OK)
}

pub async fn release(
    ctx: &Ctx,
    out: &mut Out<'_>,
    key: &str,
    scope: Option<&str>,
    force: bool,
) -> Result<i32, sqlx::Error> {
    let row = match one(ctx, out, key, scope).await? {
        Ok(row) => row,
        Err(status) => return Ok(status),
    };
    let object = record(&row);
    let state: String = row.get("state");
    let (scope, fence): (String, i64) = (row.get("scope"), row.get("fence"));
    let holder = row
        .get::<Option<String>, _>("holder")
        .unwrap_or_else(|| "an unknown holder".into());
    match state.as_str() {
        "completed" | "expired" => {
            out.message(
                &format!("{key:?} is completed, not claimed: nothing to release (to run it again, `idem forget`)"),
                object,
            );
            return Ok(REFUSED);
        }
        "claimed" if !force => {
            let left = row.get::<f64, _>("left_s");
            out.message(
                &format!(
                    "refused: {key:?} is held by {holder} with {left:.1} s of lease left, so its run \
                     may still be going. Releasing it lets the next delivery run beside it (a \
                     double run). Wait for the lease to lapse, or pass --force if that run is \
                     known dead"
                ),
                object,
            );
            return Ok(REFUSED);
        }
        _ => {}
    }
    let deleted = sqlx::query(&format!(
        "DELETE FROM {} WHERE key = $1 AND scope = $2 AND fence = $3 AND completed_at IS NULL",
        ctx.records()
    ))
    .bind(key)
    .bind(&scope)
    .bind(fence)
    .execute(&ctx.pool)
    .await?
    .rows_affected();
    if deleted == 0 {
        out.message(
            &format!("{key:?} changed meanwhile (completed or taken over); nothing released"),
            object,
        );
        return Ok(REFUSED);
    }
    out.message(
        &format!("released {key:?} (scope {scope}, fence {fence}, held by {holder}): the next delivery runs it"),
        Map::from_iter([("released".into(), json!(object))]),
    );
    Ok(OK)
}

pub async fn forget(
    ctx: &Ctx,
    out: &mut Out<'_>,
    key: &str,
    scope: Option<&str>,
    yes: bool,
) -> Result<i32, sqlx::Error> {
    let row = match one(ctx, out, key, scope).await? {
        Ok(row) => row,
        Err(status) => return Ok(status),
    };
    let object = record(&row);
    let state: String = row.get("state");
    let scope: String = row.get("scope");
    if state == "claimed" || state == "stale" {
        out.message(
            &format!("{key:?} is claimed, not completed: use `idem release` to free it"),
            object,
        );
        return Ok(REFUSED);
    }
    if !yes {
        out.message(
            &format!(
                "would forget the completed record {key:?} (scope {scope}): its work then runs \
                 again on the next delivery. Pass --yes to do it"
            ),
            object,
        );
        return Ok(REFUSED);
    }
    let deleted = sqlx::query(&format!(
        "DELETE FROM {} WHERE key = $1 AND scope = $2 AND completed_at IS NOT NULL",
        ctx.records()
    ))
    .bind(key)
    .bind(&scope)
    .execute(&ctx.pool)
    .await?
    .rows_affected();
    if deleted == 0 {
        not_found(out, key, Some(&scope));
        return Ok(NOT_FOUND);
    }
    out.message(
        &format!("forgot {key:?} (scope {scope}): the next delivery runs it again"),
        Map::from_iter([("forgotten".into(), json!(object))]),
    );
    Ok(OK)
}

pub async fn effects(
    ctx: &Ctx,
    out: &mut Out<'_>,
    key: &str,
    scope: Option<&str>,
) -> Result<i32, sqlx::Error> {
    let entries = journal(ctx, key, scope).await?;
    if entries.is_empty() && find(ctx, key, scope).await?.is_empty() {
        not_found(out, key, scope);
        return Ok(NOT_FOUND);
    }
    out.rows(
        "effects",
        &[
            "effect",
            "scope",
            "state",
            "fence",
            "recorded_at",
            "expires_at",
        ],
        &entries,
    );
    Ok(OK)
}

pub async fn purge(
    ctx: &Ctx,
    out: &mut Out<'_>,
    dry_run: bool,
    batch: usize,
) -> Result<i32, sqlx::Error> {
    if dry_run {
        let count = |table: String| async move {
            sqlx::query(&format!(
                "SELECT count(*) FROM {table} WHERE expires_at <= now()"
            ))
            .fetch_one(&ctx.pool)
            .await
            .map(|row| row.get::<i64, _>(0))
        };
        let (records, effects) = (count(ctx.records()).await?, count(ctx.effects()).await?);
        out.message(
            &format!("would purge {records} expired records and {effects} expired journal entries (dry run: nothing deleted)"),
            Map::from_iter([
                ("dry_run".into(), json!(true)),
                ("records".into(), json!(records)),
                ("effects".into(), json!(effects)),
            ]),
        );
        return Ok(OK);
    }
    let mut batches = Vec::new();
    loop {
        let purged = ctx
            .store
            .purge_expired(batch)
            .await
            .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
        if purged == 0 {
            break;
        }
        if !out.json {
            let _ = writeln!(out.w, "purged {purged} rows");
        }
        batches.push(purged);
    }
    let total: u64 = batches.iter().sum();
    out.message(
        &format!(
            "purged {total} expired rows (records and journal entries) in {} batches",
            batches.len()
        ),
        Map::from_iter([
            ("purged".into(), json!(total)),
            ("batches".into(), json!(batches)),
        ]),
    );
    Ok(OK)
}
