//! The work queue's commands: stats, list, show, retry, discard, cancel.

use crate::error::Failure;
use idem_queue::{Cancel, JobFilter, JobInfo, JobResult, Queue};
use serde_json::{json, Map, Value};

use crate::args::Jobs;
use crate::backend::json_time as time;
use crate::connect::Ctx;
use crate::output::{Out, NOT_FOUND, OK, REFUSED, USAGE};

/// A job's attempts, oldest first: number, start, end, outcome, error.
fn attempt_log(log: &[idem_queue::Attempt]) -> Value {
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

/// A job as the commands print it.
fn job(info: &JobInfo) -> Map<String, Value> {
    Map::from_iter([
        ("id".into(), json!(info.key)),
        ("state".into(), json!(info.state.as_str())),
        ("queue".into(), json!(info.queue)),
        ("priority".into(), json!(info.priority)),
        ("serial_key".into(), json!(info.serial_key)),
        (
            "outcome".into(),
            json!(info.attempt_log.last().map(|a| a.outcome.as_str())),
        ),
        ("attempts".into(), json!(info.attempts)),
        ("max_attempts".into(), json!(info.max_attempts)),
        ("worker".into(), json!(info.worker)),
        ("last_error".into(), json!(info.last_error)),
        ("created_at".into(), time(Some(info.created_at))),
        ("available_at".into(), time(Some(info.available_at))),
        ("finished_at".into(), time(info.finished_at)),
        ("cancel_requested_at".into(), time(info.cancel_requested_at)),
        ("payload".into(), info.payload.clone()),
    ])
}

/// The state of the queue's job `key` (`stale` for a lapsed claim), if the queue has one: a
/// job's row is its idempotency record until it is purged, so `idem show` points at it where
/// the records table has nothing. A schema from before the queue has no job.
pub async fn state_of(ctx: &Ctx, key: &str) -> Result<Option<String>, Failure> {
    let Some((_, store, _)) = ctx.backend.postgres() else {
        return Ok(None);
    };
    match Queue::new(store).job(key).await {
        Ok(job) => Ok(job.map(|job| job.state.as_str().to_owned())),
        // No queue table: a schema from before the queue, or never migrated for it.
        Err(e) if crate::error::undefined_table(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn not_found(out: &mut Out<'_>, id: &str) -> i32 {
    out.message(
        &format!("no job {id:?}: never enqueued, discarded or purged"),
        Map::from_iter([("found".into(), json!(false))]),
    );
    NOT_FOUND
}

pub async fn run(ctx: &Ctx, out: &mut Out<'_>, command: &Jobs) -> Result<i32, Failure> {
    let Some((_, store, _)) = ctx.backend.postgres() else {
        out.message(
            "the work queue is PostgreSQL's: `idem jobs` needs a postgres:// --database-url",
            Map::new(),
        );
        return Ok(USAGE);
    };
    let queue = Queue::new(store);
    match command {
        Jobs::Stats => {
            let stats = queue.stats().await?;
            out.object(&Map::from_iter([
                ("queued".into(), json!(stats.queued)),
                ("running".into(), json!(stats.running)),
                ("stale".into(), json!(stats.stale)),
                ("done".into(), json!(stats.done)),
                ("dead".into(), json!(stats.dead)),
                ("cancelled".into(), json!(stats.cancelled)),
            ]));
            Ok(OK)
        }
        Jobs::List { state, limit } => {
            let filter = state.map(JobFilter::from);
            let limit = usize::try_from(*limit).unwrap_or(0);
            let found = queue.jobs(filter, limit).await?;
            let jobs: Vec<_> = found.iter().map(job).collect();
            out.rows(
                "jobs",
                &[
                    "id",
                    "state",
                    "queue",
                    "priority",
                    "outcome",
                    "attempts",
                    "max_attempts",
                    "worker",
                    "last_error",
                ],
                &jobs,
            );
            Ok(OK)
        }
        Jobs::Show { id } => match queue.job(id).await? {
            Some(info) => {
                let mut shown = job(&info);
                shown.insert("attempt_log".into(), attempt_log(&info.attempt_log));
                let result = match queue.result(id).await? {
                    Some(JobResult::Done(Some(value))) => value,
                    _ => Value::Null,
                };
                shown.insert("result".into(), result);
                out.object(&shown);
                Ok(OK)
            }
            None => Ok(not_found(out, id)),
        },
        Jobs::Retry { id: Some(id), .. } => {
            if queue.retry_dead(id).await? {
                out.message(
                    &format!("retried {id:?}: back in the queue, its attempts counted from 0"),
                    Map::from_iter([("retried".into(), json!([id]))]),
                );
                return Ok(OK);
            }
            match queue.job(id).await? {
                None => Ok(not_found(out, id)),
                Some(info) => {
                    let state = info.state.as_str();
                    out.message(
                        &format!("{id:?} is {state}, not dead: nothing retried"),
                        job(&info),
                    );
                    Ok(REFUSED)
                }
            }
        }
        Jobs::Retry { id: None, .. } => {
            let retried = queue.retry_all_dead().await?;
            out.message(
                &format!("retried {} dead jobs", retried.len()),
                Map::from_iter([("retried".into(), json!(retried))]),
            );
            Ok(OK)
        }
        Jobs::Discard { id } => {
            if queue.discard(id).await? {
                out.message(
                    &format!("discarded the job {id:?}"),
                    Map::from_iter([("discarded".into(), json!(id))]),
                );
                return Ok(OK);
            }
            match queue.job(id).await? {
                None => Ok(not_found(out, id)),
                Some(info) => {
                    let state = info.state.as_str();
                    out.message(
                        &format!("{id:?} is {state}: only dead or cancelled jobs are discarded"),
                        job(&info),
                    );
                    Ok(REFUSED)
                }
            }
        }
        Jobs::Cancel { id, reason } => match queue.cancel(id, reason).await? {
            Cancel::Cancelled => {
                out.message(
                    &format!("cancelled {id:?}: it will not run"),
                    Map::from_iter([("cancelled".into(), json!(id))]),
                );
                Ok(OK)
            }
            Cancel::Requested => {
                out.message(
                    &format!(
                        "{id:?} is running: its worker is told at its next lease renewal, and it \
                         ends cancelled unless it finishes first"
                    ),
                    Map::from_iter([("requested".into(), json!(id))]),
                );
                Ok(OK)
            }
            Cancel::Finished(state) => {
                let state = state.as_str();
                out.message(
                    &format!("{id:?} is {state} already: nothing cancelled"),
                    Map::from_iter([("state".into(), json!(state))]),
                );
                Ok(REFUSED)
            }
            Cancel::NotFound => Ok(not_found(out, id)),
        },
    }
}
