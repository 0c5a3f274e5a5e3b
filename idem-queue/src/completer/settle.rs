//! The completer: records how each claim ended (done, retried, dead, or given back), fenced by
//! the job's attempt, and gives every held claim back at shutdown. (A job whose call completed
//! needs none of this: the call's completion marked it done in the same statement.)

use std::time::Duration;

use crate::completer::settlement::Settle;
use crate::worker::claimed::Claimed;
use crate::worker::held::Holder;
use idem_postgres_core::extend::Resend;

/// Records how `job`'s claim ended, fenced by its attempt: a claim taken over meanwhile (its
/// lease lapsed) is left to its new owner.
pub(crate) async fn settle(holder: &Holder, job: &Claimed, settle: Settle) {
    let sql = &holder.sql.settle;
    match idem_postgres_core::on_connection!(holder.store, Resend::OnLostConnection, conn => sql.settle(&mut *conn, &job.key, job.attempt, &settle))
    {
        Ok(0) => tracing::warn!(
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
    let sql = &holder.sql.settle;
    let result = idem_postgres_core::on_connection!(holder.store, Resend::OnLostConnection, conn => sql.release(&mut *conn, &keys, &attempts, Duration::ZERO, false));
    match result {
        Ok(released) => usize::try_from(released).unwrap_or(usize::MAX),
        Err(e) => {
            tracing::warn!(error = %e, held = keys.len(), "releasing jobs at shutdown failed; they return when their lease lapses");
            0
        }
    }
}
