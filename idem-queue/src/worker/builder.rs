//! Configuring workers: [`WorkerBuilder`], and the settings every role of a running set of
//! workers shares.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::backoff::Backoff;
use crate::completer::rescue::Rescue;
use crate::job::{check_name, Job, DEFAULT_QUEUE};
use crate::outcome::Failure;
use crate::queue::Queue;
use crate::worker::held::{Held, Holder};
use crate::worker::producer::ProducerConfig;
use crate::worker::shared::{Handler, Shared};
use crate::worker::workers::Workers;

/// How often idle workers look for work that no notification announces (retries coming due,
/// run-after times reached, crashed workers' leases lapsing), unless
/// [`WorkerBuilder::poll_interval`] says otherwise.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The most jobs workers claim past their free slots unless [`WorkerBuilder::prefetch`] says
/// otherwise; by default they prefetch only under a backlog
/// ([`WorkerBuilder::adaptive_prefetch`]).
pub const DEFAULT_PREFETCH: usize = 500;

/// Configures [`Workers`]; from [`Queue::worker`].
pub struct WorkerBuilder {
    queue: Queue,
    handler: Handler,
    concurrency: usize,
    batch_size: Option<usize>,
    prefetch: usize,
    adaptive: bool,
    lease: Duration,
    poll_interval: Duration,
    backoff: Backoff,
    listen: bool,
    timeout: Option<Duration>,
    /// The named queues served, with their concurrency; none: [`DEFAULT_QUEUE`] at
    /// `concurrency`.
    queues: Vec<(String, usize)>,
    /// Global limits by queue name.
    global_limits: Vec<(String, usize)>,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("concurrency", &self.concurrency)
            .field("batch_size", &self.batch_size)
            .field("prefetch", &self.prefetch)
            .field("adaptive", &self.adaptive)
            .field("lease", &self.lease)
            .field("poll_interval", &self.poll_interval)
            .field("backoff", &self.backoff)
            .field("listen", &self.listen)
            .field("timeout", &self.timeout)
            .field("queues", &self.queues)
            .field("global_limits", &self.global_limits)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    pub(crate) fn new<H, F, T, E>(queue: Queue, handler: H) -> WorkerBuilder
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future<Output = Result<T, E>> + Send + 'static,
        T: Serialize + Send + 'static,
        E: Display + Send + 'static,
    {
        let handler: Handler = Arc::new(move |job| {
            let work = handler(job);
            Box::pin(async move {
                let value = work.await.map_err(Failure::from_error)?;
                // The work is done: a value that cannot be JSON loses the result, not the job.
                Ok(serde_json::to_value(&value).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "the job's result cannot be JSON; it is not kept");
                    serde_json::Value::Null
                }))
            })
        });
        WorkerBuilder {
            queue,
            handler,
            concurrency: 4,
            batch_size: None,
            prefetch: DEFAULT_PREFETCH,
            adaptive: true,
            lease: idem_core::DEFAULT_LEASE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            backoff: Backoff::default(),
            listen: true,
            timeout: None,
            queues: Vec::new(),
            global_limits: Vec::new(),
        }
    }

    /// Serves the named queue `name` with up to `concurrency` of its jobs at once in this
    /// process (its own slots: a busy queue never takes another's). Call it once per queue;
    /// workers that name no queue serve [`DEFAULT_QUEUE`] at [`concurrency`](Self::concurrency),
    /// and workers that name some serve those only (name `DEFAULT_QUEUE` too to keep it).
    pub fn queue(mut self, name: impl Into<String>, concurrency: usize) -> Self {
        self.queues.push((name.into(), concurrency.max(1)));
        self
    }

    /// At most `jobs` of queue `name` run at once across every process serving it (a provider's
    /// rate or connection limit), on top of each process's own concurrency. Each process must
    /// say the same limit. A claim of such a queue takes an advisory lock for its transaction,
    /// so that two processes cannot both take the last free place: four or five round trips
    /// instead of one, a count of the queue's running jobs under the lock (which reads the
    /// queue's backlog in its index), and a finished job's completion does not claim the next
    /// one in its statement. Workers held back by the limit look again at their poll interval.
    pub fn global_limit(mut self, name: impl Into<String>, jobs: usize) -> Self {
        self.global_limits.push((name.into(), jobs.max(1)));
        self
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

    /// Always prefetch: every claim takes up to `jobs` jobs past the free slots, held on their
    /// lease in this process and started as slots free up, so that a busy queue of short jobs
    /// costs a claim statement per batch of jobs rather than one per job. 0 never prefetches:
    /// claims take only jobs a free slot can start. The default is
    /// [`adaptive_prefetch`](Self::adaptive_prefetch)`(`[`DEFAULT_PREFETCH`]`)`. Workers under
    /// a [`global_limit`](Self::global_limit) never prefetch. What it costs and keeps: the
    /// crate's **Tuning** section.
    pub fn prefetch(mut self, jobs: usize) -> Self {
        self.prefetch = jobs;
        self.adaptive = false;
        self
    }

    /// Prefetch under a backlog only, up to `jobs` past the free slots (the default, at
    /// [`DEFAULT_PREFETCH`]). The workers claim for free slots until a finished job's
    /// completion finds the next job waiting; then they prefetch, holding as many jobs as
    /// their slots start within a quarter of the lease at the pace jobs have run so far (so
    /// slow jobs are not prefetched at all), until a claim comes back short with nothing held,
    /// and they claim for free slots again. An idle queue's job starts as soon as without
    /// prefetching; a backlog drains as fast as with it. 0 never prefetches.
    pub fn adaptive_prefetch(mut self, jobs: usize) -> Self {
        self.prefetch = jobs;
        self.adaptive = true;
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

    /// Whether idle workers `LISTEN` for new work (default `true`; one connection per named
    /// queue served). Without it they only poll.
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

    /// Starts the workers on the current Tokio runtime: a producer per named queue.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime; for a queue name that is empty, longer than
    /// [`MAX_QUEUE_NAME_LEN`](crate::MAX_QUEUE_NAME_LEN) or holds control characters, named
    /// twice, or given a global limit without being served.
    pub fn start(self) -> Workers {
        let worker = format!("{}:{:x}", std::process::id(), crate::backoff::random());
        let queues = if self.queues.is_empty() {
            vec![(DEFAULT_QUEUE.to_owned(), self.concurrency)]
        } else {
            self.queues
        };
        for (i, (name, _)) in queues.iter().enumerate() {
            if let Err(problem) = check_name("queue name", name) {
                panic!("idem queue workers not started: {problem}");
            }
            assert!(
                !queues[..i].iter().any(|(other, _)| other == name),
                "idem queue workers not started: queue {name:?} is named twice"
            );
        }
        for (name, _) in &self.global_limits {
            assert!(
                queues.iter().any(|(served, _)| served == name),
                "idem queue workers not started: a global limit for queue {name:?}, which these \
                 workers do not serve"
            );
        }
        let producers = queues
            .into_iter()
            .map(|(name, concurrency)| {
                let global_limit = self
                    .global_limits
                    .iter()
                    .rev()
                    .find(|(limited, _)| *limited == name)
                    .map(|(_, jobs)| *jobs);
                let holder = Arc::new(Holder {
                    store: self.queue.store().clone(),
                    sql: self.queue.sql.clone(),
                    queue: name,
                    global_limit,
                    lease: self.lease,
                    worker: worker.clone(),
                    held: Held::default(),
                    stopping: std::sync::atomic::AtomicBool::new(false),
                    rescue: Rescue::new(self.lease),
                    prefetch: if global_limit.is_some() {
                        0
                    } else {
                        self.prefetch
                    },
                    prefetching: std::sync::atomic::AtomicBool::new(
                        global_limit.is_none() && self.prefetch > 0 && !self.adaptive,
                    ),
                    backlog: Default::default(),
                    job_micros: Default::default(),
                    starts: Default::default(),
                });
                let shared = Arc::new(Shared {
                    handler: self.handler.clone(),
                    backoff: self.backoff,
                    timeout: self.timeout,
                    holder,
                    queue: self.queue.clone(),
                    cut: tokio::sync::watch::Sender::new(false),
                    cut_released: std::sync::atomic::AtomicUsize::new(0),
                });
                let config = ProducerConfig {
                    concurrency,
                    batch_size: self.batch_size.unwrap_or(concurrency).min(concurrency),
                    poll_interval: self.poll_interval,
                    listen: self.listen,
                    prefetch: if global_limit.is_some() {
                        0
                    } else {
                        self.prefetch
                    },
                    adaptive: self.adaptive,
                };
                (shared, config)
            })
            .collect();
        Workers::start(producers)
    }
}

impl Queue {
    /// Workers that run `handler` for each job; configure, then [`start`](WorkerBuilder::start).
    ///
    /// The handler's `Err` (any `Display` error) and its panics are failures: the job is
    /// retried after a [`Backoff`], and dead-lettered after its last attempt with the error's
    /// text.
    /// The handler's `Ok` value is the job's result, kept as JSON with the job (see
    /// [`Queue::result`]); `()` keeps none worth reading.
    pub fn worker<H, F, T, E>(&self, handler: H) -> WorkerBuilder
    where
        H: Fn(Job) -> F + Send + Sync + 'static,
        F: Future<Output = Result<T, E>> + Send + 'static,
        T: Serialize + Send + 'static,
        E: Display + Send + 'static,
    {
        WorkerBuilder::new(self.clone(), handler)
    }
}
