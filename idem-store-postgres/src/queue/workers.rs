//! Running workers: the handle [`WorkerBuilder::start`](super::WorkerBuilder::start) returns,
//! and graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use super::builder::Shared;
use super::producer::{produce, ProducerConfig};

/// Running workers; from [`WorkerBuilder::start`]. Call [`shutdown`](Workers::shutdown) to
/// stop them. Dropping them stops them too, with no time for running jobs: those are given back
/// to the queue (or, if the runtime is gone, return when their lease lapses).
#[derive(Debug)]
#[must_use = "dropping Workers stops them at once; keep them, and call `shutdown` to stop"]
pub struct Workers {
    stop: watch::Sender<Option<Instant>>,
    producer: Option<JoinHandle<ShutdownReport>>,
}

/// What [`Workers::shutdown`] did with the jobs that were running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// Jobs that finished (and were settled) within the deadline.
    pub finished: usize,
    /// Jobs stopped at the deadline and given back to the queue, their attempt not counted.
    /// Their handlers were cut off mid-run, so they run again from the start.
    pub released: usize,
}

impl Workers {
    pub(crate) fn start(shared: Arc<Shared>, config: ProducerConfig) -> Workers {
        let (stop, stopping) = watch::channel(None);
        let span = tracing::info_span!("idem::queue::workers", queue = %shared.queue.sql.name);
        let producer = tokio::spawn(produce(shared, config, stopping).instrument(span));
        Workers {
            stop,
            producer: Some(producer),
        }
    }

    /// Stops claiming, lets running jobs finish for up to `deadline`, then stops the rest and
    /// gives them back to the queue, to run again elsewhere at once.
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
