//! Running workers: the handle [`WorkerBuilder::start`](super::WorkerBuilder::start) returns,
//! and graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::producer::{produce, ProducerConfig, ShutdownReport};
use crate::shared::Shared;

/// Running workers; from [`WorkerBuilder::start`](super::WorkerBuilder::start). Call
/// [`shutdown`](Workers::shutdown) to stop them. Dropping them stops them too, with no time for
/// running jobs: those are given back to the queue (or, if the runtime is gone, return when their
/// lease lapses).
#[derive(Debug)]
#[must_use = "dropping Workers stops them at once; keep them, and call `shutdown` to stop"]
pub struct Workers {
    stop: watch::Sender<Option<Instant>>,
    idle: watch::Receiver<bool>,
    producer: Option<JoinHandle<ShutdownReport>>,
}

impl Workers {
    pub(crate) fn start(shared: Arc<Shared>, config: ProducerConfig) -> Workers {
        let (stop, stopping) = watch::channel(None);
        let (idle_tx, idle) = watch::channel(false);
        let span = tracing::info_span!("idem::queue::workers", queue = %shared.holder.sql.name);
        let producer = tokio::spawn(produce(shared, config, stopping, idle_tx).instrument(span));
        Workers {
            stop,
            idle,
            producer: Some(producer),
        }
    }

    /// Waits until these workers are idle: no job is running, and their last look for work
    /// found none at a time when they would be told of new work (with `LISTEN` on, they were
    /// listening). Work enqueued after this returns reaches them by a notification (or the next
    /// poll). Useful in tests and before maintenance; it waits for ever if work keeps coming.
    pub async fn wait_idle(&self) {
        let mut idle = self.idle.clone();
        let _ = idle.wait_for(|idle| *idle).await;
    }

    /// Stops claiming, lets running jobs finish for up to `deadline`, then stops the rest and
    /// gives them back to the queue, to run again elsewhere at once. The rest are stopped by
    /// cutting their handlers, never their calls: a job whose handler finished just before is
    /// recorded as done, not given back (its calls get a few seconds more to settle; one that
    /// cannot, its store unreachable, is dropped, and its job returns when its lease lapses).
    pub async fn shutdown(mut self, deadline: Duration) -> ShutdownReport {
        let _ = self.stop.send(Some(Instant::now() + deadline));
        match self.producer.take() {
            Some(producer) => producer.await.unwrap_or_else(|e| {
                tracing::error!(error = %e, "idem queue workers failed");
                ShutdownReport::default()
            }),
            None => ShutdownReport::default(),
        }
    }

    /// Whether the workers have stopped.
    pub fn is_finished(&self) -> bool {
        self.producer.as_ref().is_none_or(|p| p.is_finished())
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        if self.producer.is_some() {
            let _ = self.stop.send(Some(Instant::now()));
        }
    }
}
