//! The purge loops, written once: [`drain`] deletes in bounded batches until nothing is left
//! ([`drain_reporting`] also says how each batch went),
//! and [`spawn_every`] runs a purge periodically. [`Purge`](crate::Purge) uses both for expired
//! records, and the PostgreSQL work queue for finished jobs.

use std::future::Future;
use std::time::Duration;

use crate::error::StoreError;

/// Calls `step(batch)` until it deletes fewer than `batch` rows, and returns how many it
/// deleted in all. Each step is one short statement or critical section, so no long lock.
pub async fn drain<F, Fut>(batch: usize, step: F) -> Result<u64, StoreError>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<u64, StoreError>>,
{
    drain_reporting(batch, step, |_| {}).await
}

/// [`drain`], calling `on_batch` with the count of each step that deleted something, as it
/// goes (an operator's command prints them).
pub async fn drain_reporting<F, Fut>(
    batch: usize,
    mut step: F,
    mut on_batch: impl FnMut(u64),
) -> Result<u64, StoreError>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<u64, StoreError>>,
{
    let batch = batch.max(1);
    let mut total = 0;
    loop {
        let deleted = step(batch).await?;
        if deleted > 0 {
            on_batch(deleted);
        }
        total += deleted;
        if deleted < batch as u64 {
            return Ok(total);
        }
    }
}

/// Runs `step` every `every` on the current Tokio runtime until the returned handle is aborted.
/// `step` deletes what it can (in bounded batches) and says how many rows went; failures are
/// logged and retried at the next tick. `what` names the rows in the logs.
///
/// # Panics
///
/// Outside a Tokio runtime.
pub fn spawn_every<F, Fut>(
    every: Duration,
    what: &'static str,
    mut step: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Result<u64, StoreError>> + Send,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match step().await {
                Ok(0) => {}
                Ok(purged) => tracing::debug!(purged, "purged {what}"),
                Err(e) => {
                    tracing::warn!(error = %e, "purging {what} failed; retrying at the next tick")
                }
            }
        }
    })
}
