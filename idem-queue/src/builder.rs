//! Configuring workers: [`WorkerBuilder`], and the settings every role of a running set of
//! workers shares.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::held::{Held, Holder};
use crate::job::Job;
use crate::outcome::Failure;
use crate::producer::ProducerConfig;
use crate::queue::Queue;
use crate::shared::{Handler, Shared};
use crate::workers::Workers;

/// How often idle workers look for work that no notification announces (retries coming due,
/// run-after times reached, crashed workers' leases lapsing), unless
/// [`WorkerBuilder::poll_interval`] says otherwise.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Configures [`Workers`]; from [`Queue::worker`].
pub struct WorkerBuilder {
    queue: Queue,
    handler: Handler,
    concurrency: usize,
    batch_size: Option<usize>,
    lease: Duration,
    poll_interval: Duration,
    backoff: Backoff,
    listen: bool,
    timeout: Option<Duration>,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("concurrency", &self.concurrency)
            .field("batch_size", &self.batch_size)
            .field("lease", &self.lease)
            .field("poll_interval", &self.poll_interval)
            .field("backoff", &self.backoff)
            .field("listen", &self.listen)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    pub(crate) fn new<H, F, E>(queue: Queue, handler: H) -> WorkerBuilder
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let handler: Handler = Arc::new(move |job| {
            let work = handler(job);
            Box::pin(async move { work.await.map_err(Failure::from_error) })
        });
        WorkerBuilder {
            queue,
            handler,
            concurrency: 4,
            batch_size: None,
            lease: idem_core::DEFAULT_LEASE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            backoff: Backoff::default(),
            listen: true,
            timeout: None,
        }
    }

    /// How many jobs run at once in this process (default 4).
    pub fn concurrency(mut self, jobs: usize) -> Self {
        self.concurrency = jobs.max(1);
        self
    }

    /// The most jobs claimed by one statement (default: the concurrency). Claims never take
    /// more jobs than there are free slots, so no claimed job waits behind another.
    pub fn batch_size(mut self, jobs: usize) -> Self {
        self.batch_size = Some(jobs.max(1));
        self
    }

    /// How long a claim holds without renewal (default `idem_core::DEFAULT_LEASE`, 30 s). It is
    /// the lease of each job's idempotent call, renewed on idem-core's policy
    /// ([`idem_core::lease`]) while the job runs, each renewal extending the job's claim too; a
    /// crashed worker's jobs return to the queue once it lapses.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(30));
        self
    }

    /// How often idle workers look for work nobody announced (default
    /// [`DEFAULT_POLL_INTERVAL`]).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every.max(Duration::from_millis(1));
        self
    }

    /// The wait between failed attempts (default [`Backoff::default`]).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Whether idle workers `LISTEN` for new work (default `true`; uses one connection). Without
    /// it they only poll.
    pub fn listen(mut self, listen: bool) -> Self {
        self.listen = listen;
        self
    }

    /// Stops a job's handler that runs longer than `limit` and counts it as a failed attempt
    /// (retried after a backoff, dead-lettered after the last), with the error `timed out after
    /// ..`. The limit cuts the handler only, never the recording of a job that finished: a job
    /// done just at its limit is done. Without it (the default) a job runs as long as it takes,
    /// its lease renewed meanwhile.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// Starts the workers on the current Tokio runtime.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub fn start(self) -> Workers {
        let worker = format!("{}:{:x}", std::process::id(), crate::backoff::random());
        let holder = Arc::new(Holder {
            store: self.queue.store().clone(),
            sql: self.queue.sql.clone(),
            lease: self.lease,
            worker,
            held: Held::default(),
            stopping: std::sync::atomic::AtomicBool::new(false),
        });
        let shared = Arc::new(Shared {
            handler: self.handler,
            backoff: self.backoff,
            timeout: self.timeout,
            holder,
            queue: self.queue,
            cut: tokio::sync::watch::Sender::new(false),
            cut_released: std::sync::atomic::AtomicUsize::new(0),
        });
        let config = ProducerConfig {
            concurrency: self.concurrency,
            batch_size: self.batch_size.unwrap_or(self.concurrency),
            poll_interval: self.poll_interval,
            listen: self.listen,
        };
        Workers::start(shared, config)
    }
}

impl Queue {
    /// Workers that run `handler` for each job; configure, then [`start`](WorkerBuilder::start).
    ///
    /// The handler's `Err` (any `Display` error) and its panics are failures: the job is
    /// retried after a [`Backoff`], and dead-lettered after its last attempt with the error's
    /// text.
    pub fn worker<H, F, E>(&self, handler: H) -> WorkerBuilder
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        WorkerBuilder::new(self.clone(), handler)
    }
}
