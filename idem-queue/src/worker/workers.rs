//! Running workers: the handle [`WorkerBuilder::start`](crate::WorkerBuilder::start) returns,
//! and graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::worker::producer::{produce, ProducerConfig, ShutdownReport};
use crate::worker::shared::Shared;

/// Running workers; from [`WorkerBuilder::start`](crate::WorkerBuilder::start). Call
/// [`shutdown`](Workers::shutdown) to stop them. Dropping them stops them too, with no time for
/// running jobs: those are given back to the queue (or, if the runtime is gone, return when their
/// lease lapses).
#[derive(Debug)]
#[must_use = "dropping Workers stops them at once; keep them, and call `shutdown` to stop"]
pub struct Workers {
    stop: watch::Sender<Option<Instant>>,
    /// Each producer's idleness.
    idle: Vec<watch::Receiver<bool>>,
    /// A producer per named queue.
    producers: Vec<JoinHandle<ShutdownReport>>,
}

impl Workers {
    pub(crate) fn start(producers: Vec<(Arc<Shared>, ProducerConfig)>) -> Workers {
        let (stop, stopping) = watch::channel(None);
        let mut idle = Vec::new();
        let producers = producers
            .into_iter()
            .map(|(shared, config)| {
                let (idle_tx, idle_rx) = watch::channel(false);
                idle.push(idle_rx);
                let span = tracing::info_span!(
                    "idem::queue::workers",
                    table = %shared.holder.sql.name,
                    queue = %shared.holder.queue
                );
                tokio::spawn(produce(shared, config, stopping.clone(), idle_tx).instrument(span))
            })
            .collect();
        Workers {
            stop,
            idle,
            producers,
        }
    }

    /// Waits until these workers are idle: no job is running, and their last look for work
    /// found none at a time when they would be told of new work (with `LISTEN` on, they were
    /// listening). Work enqueued after this returns reaches them by a notification (or the next
    /// poll). Useful in tests and before maintenance; it waits for ever if work keeps coming.
    pub async fn wait_idle(&self) {
        // Every producer idle at once: one may have taken work while another was awaited.
        loop {
            for idle in &self.idle {
                let _ = idle.clone().wait_for(|idle| *idle).await;
            }
            if self.idle.iter().all(|idle| *idle.borrow()) {
                return;
            }
        }
    }

    /// Stops claiming, lets running jobs finish for up to `deadline`, then stops the rest and
    /// gives them back to the queue, to run again elsewhere at once. The rest are stopped by
    /// cutting their handlers, never their calls: a job whose handler finished just before is
    /// recorded as done, not given back (its calls get a few seconds more to settle; one that
    /// cannot, its store unreachable, is dropped, and its job returns when its lease lapses).
    ///
    /// Last, it drains the process's background work ([`idem_core::pending::drain`]): a
    /// completion a handler's own call left to record after its caller went away is written
    /// before this returns, within the same few seconds.
    pub async fn shutdown(mut self, deadline: Duration) -> ShutdownReport {
        let cut = Instant::now() + deadline;
        let _ = self.stop.send(Some(cut));
        let mut report = ShutdownReport::default();
        for producer in std::mem::take(&mut self.producers) {
            let one = producer.await.unwrap_or_else(|e| {
                tracing::error!(error = %e, "idem queue workers failed");
                ShutdownReport::default()
            });
            report.finished += one.finished;
            report.released += one.released;
        }
        let settle_by = cut.max(Instant::now()) + crate::worker::producer::SETTLE_AFTER_CUT;
        if let Err(unfinished) =
            idem_core::pending::drain(settle_by.saturating_duration_since(Instant::now())).await
        {
            tracing::warn!(left = unfinished.left, "{unfinished}");
            report.unsettled = unfinished.left;
        }
        report
    }

    /// Whether the workers have stopped.
    pub fn is_finished(&self) -> bool {
        self.producers.iter().all(JoinHandle::is_finished)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        if !self.producers.is_empty() {
            let _ = self.stop.send(Some(Instant::now()));
        }
    }
}
