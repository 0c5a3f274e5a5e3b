//! The records commands: show, list, release, forget, effects, purge, on any store the
//! [`Backend`](crate::backend::Backend) reaches.

use crate::error::Failure;
use idem_core::Released;
use idem_queue::QUEUE_SCOPE;
use serde_json::{json, Map};

use crate::args::State;
use crate::backend::RecordRow;
use crate::connect::Ctx;
use crate::output::{Out, NOT_FOUND, OK, REFUSED, USAGE};

const LIST_COLUMNS: [&str; 6] = ["key", "scope", "state", "fence", "holder", "lease_left_s"];

/// The one record `key` names, or the exit status when there is none or several.
async fn one(
    ctx: &Ctx,
    out: &mut Out<'_>,
    key: &str,
    scope: Option<&str>,
) -> Result<Result<RecordRow, i32>, Failure> {
    let mut rows = ctx.backend.find(key, scope).await?;
    Ok(match rows.len() {
        0 => {
            not_found(ctx, out, key, scope).await?;
            Err(NOT_FOUND)
        }
        1 => Ok(rows.remove(0)),
        _ => {
            let scopes: Vec<String> = rows.iter().map(|r| r.scope.clone()).collect();
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

/// Says there is no record, or, for a key of the work queue's scope whose job is still in the
/// queue table, that the job's row stands in for it (a job that ran once writes no record until
/// it is purged).
async fn not_found(
    ctx: &Ctx,
    out: &mut Out<'_>,
    key: &str,
    scope: Option<&str>,
) -> Result<(), Failure> {
    let job = match scope {
        None | Some(QUEUE_SCOPE) => crate::jobs::state_of(ctx, key).await?,
        Some(_) => None,
    };
    no_record(out, key, scope, job.as_deref());
    Ok(())
}

/// Says there is no record for `key`, and where the queue's job `job` (its state) stands in.
fn no_record(out: &mut Out<'_>, key: &str, scope: Option<&str>, job: Option<&str>) {
    let shown = scope
        .map(|s| format!(" in scope {s:?}"))
        .unwrap_or_default();
    let mut fields = Map::from_iter([("found".into(), json!(false))]);
    let why = match job {
        Some(state) => {
            fields.insert("job_state".into(), json!(state));
            format!(
                "the work queue's job {key:?} is {state}, and its row is its record until it \
                 is purged (see `idem jobs show {key}`)"
            )
        }
        None => "never claimed, released, forgotten or purged".into(),
    };
    out.message(&format!("no record for {key:?}{shown}: {why}"), fields);
}

pub async fn show(
    ctx: &Ctx,
    out: &mut Out<'_>,
    key: &str,
    scope: Option<&str>,
) -> Result<i32, Failure> {
    let rows = ctx.backend.find(key, scope).await?;
    if rows.is_empty() {
        not_found(ctx, out, key, scope).await?;
        return Ok(NOT_FOUND);
    }
    let mut records = Vec::new();
    for row in &rows {
        let mut object = row.to_json();
        let journal = ctx.backend.journal(key, Some(&row.scope)).await?;
        object.insert("journal".into(), json!(journal));
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
) -> Result<i32, Failure> {
    let rows = ctx.backend.list(state, scope, prefix, limit).await?;
    let records: Vec<_> = rows.iter().map(RecordRow::to_json).collect();
    out.rows("records", &LIST_COLUMNS, &records);
    Ok(OK)
}

pub async fn release(
    ctx: &Ctx,
    out: &mut Out<'_>,
    key: &str,
    scope: Option<&str>,
    force: bool,
) -> Result<i32, Failure> {
    let row = match one(ctx, out, key, scope).await? {
        Ok(row) => row,
        Err(status) => return Ok(status),
    };
    let object = row.to_json();
    let (scope, fence) = (row.scope.clone(), row.fence);
    let holder = row
        .holder
        .clone()
        .unwrap_or_else(|| "an unknown holder".into());
    // The rules are the store's operator API's, shared with the dashboard: a completed record
    // is not a claim, a live lease needs --force, and the release is fenced to the claim seen.
    let scoped = idem_core::Key::new(key).and_then(|k| k.with_stored_scope(&scope))?;
    let released = idem_core::release_claim(
        ctx.backend.inspector(),
        &scoped,
        idem_core::Fence(fence.unsigned_abs()),
        force,
    )
    .await?;
    match released {
        Released::Released => {}
        Released::Completed => {
            out.message(
                &format!("{key:?} is completed, not claimed: nothing to release (to run it again, `idem forget`)"),
                object,
            );
            return Ok(REFUSED);
        }
        Released::Live { left, .. } => {
            let left = left.as_secs_f64();
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
        Released::Changed | Released::NotFound => {
            out.message(
                &format!("{key:?} changed meanwhile (completed, renewed or taken over); nothing released"),
                object,
            );
            return Ok(REFUSED);
        }
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
) -> Result<i32, Failure> {
    let row = match one(ctx, out, key, scope).await? {
        Ok(row) => row,
        Err(status) => return Ok(status),
    };
    let object = row.to_json();
    let scope = row.scope.clone();
    if row.claimed() {
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
    let deleted = ctx.backend.delete_completed(key, &scope).await?;
    if deleted == 0 {
        no_record(out, key, Some(&scope), None);
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
) -> Result<i32, Failure> {
    let entries = ctx.backend.journal(key, scope).await?;
    if entries.is_empty() && ctx.backend.find(key, scope).await?.is_empty() {
        not_found(ctx, out, key, scope).await?;
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
) -> Result<i32, Failure> {
    if dry_run {
        let (records, effects) = ctx.backend.count_expired().await?;
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
    // The store's own drain (on PostgreSQL each batch starts where the one before ended),
    // printing each batch as it goes.
    let mut batches = Vec::new();
    let total = {
        let (json, w) = (out.json, &mut *out.w);
        ctx.backend
            .purge_all(batch, &mut |purged| {
                if !json {
                    let _ = writeln!(w, "purged {purged} rows");
                }
                batches.push(purged);
            })
            .await?
    };
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
