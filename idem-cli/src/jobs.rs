//! The work queue's commands: stats, list, show, retry, discard.

use idem_queue::Queue;
use idem_store_postgres::sqlx::{self, postgres::PgRow, Row};
use serde_json::{json, Map, Value};

use crate::args::{JobState, Jobs};
use crate::output::{Out, NOT_FOUND, OK, REFUSED, USAGE};
use crate::Ctx;

fn ts(column: &str) -> String {
    format!("to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
}

/// A running job whose lease lapsed ([`LAPSED_SQL`](idem_queue::LAPSED_SQL)):
/// the commands show its state as `stale`; `list --state` filters on this condition and the
/// table's own state, so that the table's state index still serves the other states.
const LAPSED: &str = idem_queue::LAPSED_SQL;

fn columns() -> String {
    format!(
        "key, CASE WHEN {LAPSED} THEN 'stale' ELSE state END AS state, attempts, max_attempts,
         worker, last_error, payload::text AS payload,
         {created} AS created_at, {available} AS available_at, {finished} AS finished_at",
        created = ts("created_at"),
        available = ts("available_at"),
        finished = ts("finished_at"),
    )
}

/// A job's attempts, oldest first: number, start, end, outcome, error.
fn attempt_log(log: &[idem_queue::Attempt]) -> Value {
    let time = |at: Option<std::time::SystemTime>| {
        at.map_or(Value::Null, |at| {
            json!(crate::backend::rfc3339(crate::backend::micros_of(at)))
        })
    };
    Value::Array(
        log.iter()
            .map(|a| {
                json!({
                    "attempt": a.attempt,
                    "started_at": time(a.started_at),
                    "ended_at": time(a.ended_at),
                    "outcome": a.outcome,
                    "error": a.error,
                })
            })
            .collect(),
    )
}

fn job(row: &PgRow) -> Map<String, Value> {
    let payload: String = row.get("payload");
    Map::from_iter([
        ("id".into(), json!(row.get::<String, _>("key"))),
        ("state".into(), json!(row.get::<String, _>("state"))),
        ("attempts".into(), json!(row.get::<i32, _>("attempts"))),
        (
            "max_attempts".into(),
            json!(row.get::<i32, _>("max_attempts")),
        ),
        (
            "worker".into(),
            json!(row.get::<Option<String>, _>("worker")),
        ),
        (
            "last_error".into(),
            json!(row.get::<Option<String>, _>("last_error")),
        ),
        (
            "created_at".into(),
            json!(row.get::<String, _>("created_at")),
        ),
        (
            "available_at".into(),
            json!(row.get::<String, _>("available_at")),
        ),
        (
            "finished_at".into(),
            json!(row.get::<Option<String>, _>("finished_at")),
        ),
        (
            "payload".into(),
            serde_json::from_str(&payload).unwrap_or(Value::String(payload)),
        ),
    ])
}

async fn find(pool: &sqlx::PgPool, table: &str, id: &str) -> Result<Option<PgRow>, sqlx::Error> {
    sqlx::query(&format!("SELECT {} FROM {table} WHERE key = $1", columns()))
        .bind(id)
        .fetch_optional(pool)
        .await
}

/// The state of the queue's job `key` (`stale` for a lapsed claim), if the queue has one: a
/// job's row is its idempotency record until it is purged, so `idem show` points at it where
/// the records table has nothing. A schema from before the queue has no job.
pub async fn state_of(ctx: &Ctx, key: &str) -> Result<Option<String>, sqlx::Error> {
    let Some((pool, _, table)) = ctx.backend.postgres() else {
        return Ok(None);
    };
    let found = sqlx::query_scalar(&format!(
        "SELECT CASE WHEN {LAPSED} THEN 'stale' ELSE state END FROM {table} WHERE key = $1"
    ))
    .bind(key)
    .fetch_optional(pool)
    .await;
    match found {
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => Ok(None),
        found => found,
    }
}

fn not_found(out: &mut Out<'_>, id: &str) -> i32 {
    out.message(
        &format!("no job {id:?}: never enqueued, discarded or purged"),
        Map::from_iter([("found".into(), json!(false))]),
    );
    NOT_FOUND
}

fn store_failed(e: idem_core::StoreError) -> sqlx::Error {
    sqlx::Error::Protocol(e.to_string())
}

pub async fn run(ctx: &Ctx, out: &mut Out<'_>, command: &Jobs) -> Result<i32, sqlx::Error> {
    let Some((pool, store, table)) = ctx.backend.postgres() else {
        out.message(
            "the work queue is PostgreSQL's: `idem jobs` needs a postgres:// --database-url",
            Map::new(),
        );
        return Ok(USAGE);
    };
    let queue = Queue::new(store);
    match command {
        Jobs::Stats => {
            let stats = queue.stats().await.map_err(store_failed)?;
            out.object(&Map::from_iter([
                ("queued".into(), json!(stats.queued)),
                ("running".into(), json!(stats.running)),
                ("stale".into(), json!(stats.stale)),
                ("done".into(), json!(stats.done)),
                ("dead".into(), json!(stats.dead)),
            ]));
            Ok(OK)
        }
        Jobs::List { state, limit } => {
            let rows = sqlx::query(&format!(
                "SELECT {} FROM {} WHERE $1::text IS NULL
                     OR (state = $1 AND NOT ({LAPSED}))
                     OR ($1 = 'stale' AND {LAPSED})
                 ORDER BY created_at DESC LIMIT $2",
                columns(),
                table
            ))
            .bind(state.map(JobState::as_str))
            .bind(limit)
            .fetch_all(pool)
            .await?;
            let jobs: Vec<_> = rows.iter().map(job).collect();
            out.rows(
                "jobs",
                &[
                    "id",
                    "state",
                    "attempts",
                    "max_attempts",
                    "worker",
                    "last_error",
                ],
                &jobs,
            );
            Ok(OK)
        }
        Jobs::Show { id } => match find(pool, &table, id).await? {
            Some(row) => {
                let mut shown = job(&row);
                let attempts = queue.status(id).await.map_err(store_failed)?;
                let log = attempts
                    .map(|status| status.attempt_log)
                    .unwrap_or_default();
                shown.insert("attempt_log".into(), attempt_log(&log));
                out.object(&shown);
                Ok(OK)
            }
            None => Ok(not_found(out, id)),
        },
        Jobs::Retry { id: Some(id), .. } => {
            if queue.retry_dead(id).await.map_err(store_failed)? {
                out.message(
                    &format!("retried {id:?}: back in the queue, its attempts counted from 0"),
                    Map::from_iter([("retried".into(), json!([id]))]),
                );
                return Ok(OK);
            }
            match find(pool, &table, id).await? {
                None => Ok(not_found(out, id)),
                Some(row) => {
                    let state: String = row.get("state");
                    out.message(
                        &format!("{id:?} is {state}, not dead: nothing retried"),
                        job(&row),
                    );
                    Ok(REFUSED)
                }
            }
        }
        Jobs::Retry { id: None, .. } => {
            let dead = queue.dead(usize::MAX >> 1).await.map_err(store_failed)?;
            let mut retried = Vec::new();
            for job in dead {
                if queue.retry_dead(&job.key).await.map_err(store_failed)? {
                    retried.push(job.key);
                }
            }
            out.message(
                &format!("retried {} dead jobs", retried.len()),
                Map::from_iter([("retried".into(), json!(retried))]),
            );
            Ok(OK)
        }
        Jobs::Discard { id } => {
            if queue.discard(id).await.map_err(store_failed)? {
                out.message(
                    &format!("discarded the dead job {id:?}"),
                    Map::from_iter([("discarded".into(), json!(id))]),
                );
                return Ok(OK);
            }
            match find(pool, &table, id).await? {
                None => Ok(not_found(out, id)),
                Some(row) => {
                    let state: String = row.get("state");
                    out.message(
                        &format!("{id:?} is {state}, not dead: only dead jobs are discarded"),
                        job(&row),
                    );
                    Ok(REFUSED)
                }
            }
        }
    }
}
