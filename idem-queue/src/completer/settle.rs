//! The completer: records how each claim ended (done, retried, dead, or given back), fenced by
//! the job's attempt, and gives every held claim back at shutdown. (A job whose call completed
//! needs none of this: the call's completion marked it done in the same statement.)

use crate::completer::settlement::Settle;
use crate::worker::claimed::Claimed;
use crate::worker::held::Holder;
use idem_store_postgres::extend::duration_micros;
use idem_store_postgres::extend::Resend;

/// Records how `job`'s claim ended, fenced by its attempt: a claim taken over meanwhile (its
/// lease lapsed) is left to its new owner.
pub(crate) async fn settle(holder: &Holder, job: &Claimed, settle: Settle) {
    let sql = &holder.sql;
    let query = || match &settle {
        Settle::Done { result } => sqlx::query(&sql.done)
            .bind(vec![job.key.clone()])
            .bind(vec![job.attempt])
            .bind(result.as_deref()),
        Settle::Retry { delay, error } => sqlx::query(&sql.retry)
            .bind(&job.key)
            .bind(job.attempt)
            .bind(duration_micros(*delay))
            .bind(error),
        Settle::Dead { error } => sqlx::query(&sql.dead)
            .bind(&job.key)
            .bind(job.attempt)
            .bind(error),
        Settle::Release { delay } => sqlx::query(&sql.release)
            .bind(vec![job.key.clone()])
            .bind(vec![job.attempt])
            .bind(duration_micros(*delay))
            .bind(true),
        Settle::Snooze { delay, message } => sqlx::query(&sql.snooze)
            .bind(&job.key)
            .bind(job.attempt)
            .bind(duration_micros(*delay))
            .bind(message),
        Settle::Cancelled { reason } => sqlx::query(&sql.cancelled)
            .bind(&job.key)
            .bind(job.attempt)
            .bind(reason),
    };
    match idem_store_postgres::on_connection!(holder.store, Resend::OnLostConnection, conn => query().execute(&mut *conn))
    {
        Ok(done) if done.rows_affected() == 0 => tracing::warn!(
            "the job's claim was taken over before it was settled (its lease lapsed)"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(
            error = %e,
            "settling the job failed; it returns to the queue when its lease lapses, and a \
             finished job is then recognised as done without running again"
        ),
    }
}

/// Gives every claim still held back to the queue, at once and without counting it. (A job
/// that never ran has no record to free: its claim reserved the record's fence and wrote
/// nothing.)
pub(crate) async fn release_held(holder: &Holder) -> usize {
    let held = holder.held.snapshot();
    release(
        holder,
        held.iter().map(|(key, attempt)| (key.as_str(), *attempt)),
    )
    .await
}

/// Gives `jobs`, claimed and never started, back to the queue at once without counting them,
/// and forgets them as held.
pub(crate) async fn release_jobs(holder: &Holder, jobs: &[Claimed]) -> usize {
    let released = release(
        holder,
        jobs.iter().map(|job| (job.key.as_str(), job.attempt)),
    )
    .await;
    for job in jobs {
        holder.held.forget(&job.key, job.attempt);
    }
    released
}

/// Gives the claims (key, attempt) back to the queue at once, without counting them.
async fn release<'a>(holder: &Holder, claims: impl Iterator<Item = (&'a str, i32)>) -> usize {
    let (keys, attempts): (Vec<&str>, Vec<i32>) = claims.unzip();
    if keys.is_empty() {
        return 0;
    }
    let result = idem_store_postgres::on_connection!(holder.store, Resend::OnLostConnection, conn => sqlx::query(&holder.sql.release)
        .bind(&keys)
        .bind(&attempts)
        .bind(0i64)
        .bind(false)
        .execute(&mut *conn));
    match result {
        Ok(done) => usize::try_from(done.rows_affected()).unwrap_or(usize::MAX),
        Err(e) => {
            tracing::warn!(error = %e, held = keys.len(), "releasing jobs at shutdown failed; they return when their lease lapses");
            0
        }
    }
}
