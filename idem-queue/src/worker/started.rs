//! When prefetched jobs start. A prefetched job's claim leaves its start unnoted: should its
//! worker die before starting it, the claim that takes it over counts no attempt (migration 9).
//! So each start is noted, in batches, a short while after the job starts
//! ([`MARK_DELAY`]), unless the job's outcome is written first: the outcome notes the start
//! itself, and a busy queue of short jobs writes no marks at all.
//!
//! A job that a crash cut within that delay is counted as never started, and runs again as
//! the first run of its attempt. So that a job that kills its worker at once cannot run
//! forever uncounted, a job taken over from a lapsed lease notes its start before it runs
//! ([`mark_now`]): from its second crash on, each counts.

use std::sync::Arc;
use std::time::Duration;

use crate::worker::held::Holder;
use idem_postgres_core::extend::Resend;

/// How long after a job starts its start is written, unless its outcome is written first.
pub(crate) const MARK_DELAY: Duration = Duration::from_millis(50);

/// Writes the holder's noted starts, a batch every [`MARK_DELAY`] while there are any, until
/// it is dropped. A batch cut short, or refused, leaves those jobs counted as never started
/// should their worker die (see the module's documentation).
pub(crate) async fn write_starts(holder: Arc<Holder>) {
    loop {
        holder.starts.noted().await;
        tokio::time::sleep(MARK_DELAY).await;
        let batch = holder.starts.take();
        if batch.is_empty() {
            continue;
        }
        let (keys, attempts): (Vec<String>, Vec<i32>) = batch.into_iter().unzip();
        if let Err(e) = mark(&holder, &keys, &attempts).await {
            tracing::warn!(error = %e, jobs = keys.len(), "noting when jobs started failed; should their worker die, they count as never started");
        }
    }
}

/// Writes that `key`'s claim of `attempt` starts, before it does. `Ok(false)`: the claim is no
/// longer this attempt's.
pub(crate) async fn mark_now(
    holder: &Holder,
    key: &str,
    attempt: i32,
) -> Result<bool, sqlx::Error> {
    let marked = mark(holder, &[key.to_owned()], &[attempt]).await?;
    Ok(marked == 1)
}

/// Writes the starts of the holder's claims of `keys` at `attempts`; returns how many of
/// those claims are still the holder's.
async fn mark(holder: &Holder, keys: &[String], attempts: &[i32]) -> Result<u64, sqlx::Error> {
    let sql = &holder.sql.claim;
    idem_postgres_core::on_connection!(holder.store, Resend::OnLostConnection, conn => sql.mark_started(&mut *conn, keys, attempts, &holder.worker))
}
