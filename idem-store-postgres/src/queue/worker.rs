//! Workers: claim batches, run each job as an idempotent call, settle it, renew leases, shut
//! down gracefully.

use std::any::Any;
use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_core::{Call, Claim, Error, Fence, Outcome};
use sqlx::Row;
use tokio::sync::{watch, Notify};
use tokio::task::{JoinError, JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

use super::backoff::Backoff;
use super::job::{parse_payload, Job};
use super::job_store::JobStore;
use super::listen::listen;
use super::Queue;
use crate::direct::on_conn;
use crate::time::{duration_micros, from_micros};

/// How often idle workers look for work that no notification announces (retries coming due,
/// run-after times reached, crashed workers' leases lapsing), unless
/// [`WorkerBuilder::poll_interval`] says otherwise.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The longest error text kept with a job.
const MAX_ERROR_LEN: usize = 2000;

type BoxFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
type Handler = Arc<dyn Fn(Job) -> BoxFuture + Send + Sync>;

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
            Box::pin(async move { work.await.map_err(|e| e.to_string()) })
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

    /// How long a claim holds without renewal (default `idem_core::DEFAULT_LEASE`, 30 s). Claims
    /// are renewed every third of it while jobs run; a crashed worker's jobs return to the queue
    /// once it lapses. It is also the lease of each job's idempotent call.
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

    /// Stops a job that runs longer than `limit` and counts it as a failed attempt (retried
    /// after a backoff, dead-lettered after the last), with the error `timed out after ..`.
    /// Without it (the default) a job runs as long as it takes, its lease renewed meanwhile.
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
        let (stop, stopping) = watch::channel(None);
        let worker = format!("{}:{:x}", std::process::id(), super::backoff::random());
        let shared = Arc::new(Shared {
            handler: self.handler,
            lease: self.lease,
            backoff: self.backoff,
            timeout: self.timeout,
            held: Mutex::new(HashMap::new()),
            worker,
            queue: self.queue,
        });
        let config = Config {
            concurrency: self.concurrency,
            batch_size: self.batch_size.unwrap_or(self.concurrency),
            poll_interval: self.poll_interval,
            listen: self.listen,
        };
        let span = tracing::info_span!("idem::queue::workers", queue = %shared.queue.sql.name);
        let producer = tokio::spawn(produce(shared, config, stopping).instrument(span));
        Workers {
            stop,
            producer: Some(producer),
        }
    }
}

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

struct Config {
    concurrency: usize,
    batch_size: usize,
    poll_interval: Duration,
    listen: bool,
}

struct Shared {
    queue: Queue,
    handler: Handler,
    lease: Duration,
    backoff: Backoff,
    timeout: Option<Duration>,
    /// The claims this process holds: key to attempt (the fence), and the fence of the record
    /// the claim took, if it took one.
    held: Mutex<HashMap<String, (i32, Option<i64>)>>,
    worker: String,
}

/// A claimed row.
struct Claimed {
    key: String,
    payload: String,
    attempt: i32,
    max_attempts: i32,
    /// The idempotency record the claim took for the key, if it had none: (fence, lease end in
    /// epoch µs).
    record: Option<(i64, i64)>,
}

/// How a job's claim ends.
enum Settle {
    Done,
    Retry {
        delay: Duration,
        error: String,
    },
    Dead {
        error: String,
    },
    /// Back to the queue without counting the attempt.
    Release {
        delay: Duration,
    },
}

async fn produce(
    shared: Arc<Shared>,
    config: Config,
    mut stopping: watch::Receiver<Option<Instant>>,
) -> ShutdownReport {
    let wake = Arc::new(Notify::new());
    // Stopped with the producer however it ends: a renewal outliving it would keep its jobs'
    // leases alive for ever.
    let _listener = config.listen.then(|| {
        let pool = shared.queue.store.pool().clone();
        AbortOnDrop(tokio::spawn(
            listen(pool, shared.queue.sql.name.clone(), wake.clone()).in_current_span(),
        ))
    });
    let heartbeat = AbortOnDrop(tokio::spawn(renew(shared.clone()).in_current_span()));
    let mut tasks = JoinSet::new();
    loop {
        if stopping.borrow().is_some() {
            break;
        }
        while let Some(joined) = tasks.try_join_next() {
            log_join(joined);
        }
        let free = config.concurrency.saturating_sub(tasks.len());
        if free == 0 {
            tokio::select! {
                Some(joined) = tasks.join_next() => log_join(joined),
                changed = stopping.changed() => if changed.is_err() { break },
            }
            continue;
        }
        let want = free.min(config.batch_size);
        let mut notified = pin!(wake.notified());
        notified.as_mut().enable();
        let idle = match shared.claim(want).await {
            Ok(jobs) => {
                let got = jobs.len();
                for job in jobs {
                    let shared = shared.clone();
                    let span = tracing::info_span!(
                        "idem::queue::job",
                        key = %job.key,
                        attempt = job.attempt
                    );
                    tasks.spawn(async move { shared.run(job).await }.instrument(span));
                }
                got < want
            }
            Err(e) => {
                tracing::warn!(error = %e, "claiming queued jobs failed; trying again after the poll interval");
                true
            }
        };
        if idle {
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep(config.poll_interval) => {}
                changed = stopping.changed() => if changed.is_err() { break },
            }
        }
    }

    let deadline = stopping.borrow().unwrap_or_else(Instant::now);
    while let Some(joined) = tasks.try_join_next() {
        log_join(joined);
    }
    let running = tasks.len();
    let _ = tokio::time::timeout_at(deadline, async {
        while let Some(joined) = tasks.join_next().await {
            log_join(joined);
        }
    })
    .await;
    let finished = running - tasks.len();
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let released = shared.release_held().await;
    drop(heartbeat);
    tracing::info!(finished, released, "idem queue workers stopped");
    ShutdownReport { finished, released }
}

/// A background task that stops when this is dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn log_join(joined: Result<(), JoinError>) {
    if let Err(e) = joined {
        if e.is_panic() {
            tracing::error!(error = %e, "an idem queue job task panicked outside its handler");
        }
    }
}

/// Renews every held claim in one statement, every third of a lease.
async fn renew(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(shared.lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let (keys, attempts) = shared.held_claims();
        if keys.is_empty() {
            continue;
        }
        let result = on_conn!(shared.queue.store, conn => sqlx::query(&shared.queue.sql.renew)
            .bind(&keys)
            .bind(&attempts)
            .bind(duration_micros(shared.lease))
            .execute(&mut *conn));
        match result {
            Ok(done) if done.rows_affected() < keys.len() as u64 => tracing::debug!(
                held = keys.len(),
                renewed = done.rows_affected(),
                "some claims were settled or taken over before their renewal"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "renewing queue leases failed; retrying"),
        }
    }
}

impl Shared {
    async fn claim(&self, limit: usize) -> Result<Vec<Claimed>, sqlx::Error> {
        let rows = on_conn!(self.queue.store, conn => sqlx::query(&self.queue.sql.claim)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(duration_micros(self.lease))
            .bind(&self.worker)
            .fetch_all(&mut *conn))?;
        let claimed: Vec<Claimed> = rows
            .iter()
            .map(|row| Claimed {
                key: row.get(0),
                payload: row.get(1),
                attempt: row.get(2),
                max_attempts: row.get(3),
                record: row
                    .get::<Option<i64>, _>(4)
                    .zip(row.get::<Option<i64>, _>(5)),
            })
            .collect();
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        for job in &claimed {
            held.insert(job.key.clone(), (job.attempt, job.record.map(|r| r.0)));
        }
        Ok(claimed)
    }

    fn held_claims(&self) -> (Vec<String>, Vec<i32>) {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.iter().map(|(k, (a, _))| (k.clone(), *a)).unzip()
    }

    fn forget(&self, key: &str, attempt: i32) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.get(key).is_some_and(|(a, _)| *a == attempt) {
            held.remove(key);
        }
    }

    /// Runs one claimed job and settles its claim.
    async fn run(&self, job: Claimed) {
        let settle = if job.attempt > job.max_attempts {
            Some(Settle::Dead {
                error: "the worker running its last attempt stopped without settling it \
                        (crashed, killed or cut off from the database) and its lease lapsed"
                    .to_owned(),
            })
        } else {
            self.execute(&job).await
        };
        // `None`: settled already (with the call's completion), or another claim owns the job.
        if let Some(settle) = settle {
            self.settle(&job, settle).await;
        }
        self.forget(&job.key, job.attempt);
    }

    /// Runs the job's idempotent call; says how to settle its claim, or `None` when it is
    /// settled already or a newer claim owns it.
    async fn execute(&self, job: &Claimed) -> Option<Settle> {
        let work = (self.handler)(Job {
            key: job.key.clone(),
            payload: parse_payload(&job.payload),
            attempt: job.attempt.unsigned_abs(),
            max_attempts: job.max_attempts.unsigned_abs(),
        });
        let claimed = job.record.map(|(fence, expires_us)| Claim::Acquired {
            fence: Fence(fence.unsigned_abs()),
            lease_expires_at: from_micros(expires_us),
            taken_over: false,
        });
        let store = JobStore::new(&self.queue, job.attempt, claimed);
        let call = Call::new(&store, job.key.as_str())
            .name("idem::queue::run")
            .lease(self.lease)
            .run(work);
        // idem-core's own panic catcher: the call releases its claim on a panic and resumes it.
        let caught = idem_core::__private::catch_unwind(call);
        let result = match self.timeout {
            None => caught.await,
            // Dropping the call on timeout abandons its claim, so the retry can take it.
            Some(limit) => match tokio::time::timeout(limit, caught).await {
                Ok(result) => result,
                Err(_) => return Some(self.failure(job, format!("timed out after {limit:?}"))),
            },
        };
        Some(match result {
            // The completion marked the job done in the same statement, unless the job's claim
            // was taken over meanwhile; then the newer claim finds the call completed.
            Ok(Ok(Outcome::Executed(()))) => {
                if !store.marked_done() {
                    tracing::warn!("the job ran and its call completed, but its claim was taken over meanwhile (this worker stalled past its lease)");
                }
                return None;
            }
            Ok(Ok(Outcome::Duplicate { .. })) => {
                tracing::info!(
                    "the job's idempotent call was completed before; not running it again"
                );
                Settle::Done
            }
            Ok(Ok(Outcome::InProgress { lease_expires_at })) => {
                let delay = lease_expires_at
                    .duration_since(std::time::SystemTime::now())
                    .unwrap_or_default();
                tracing::info!(
                    ?delay,
                    "another run holds the job's key; trying again after its lease"
                );
                Settle::Release { delay }
            }
            Ok(Err(Error::Handler(error))) => self.failure(job, error),
            Err(panic) => self.failure(job, format!("panicked: {}", panic_message(&*panic))),
            Ok(Err(Error::LostClaim { .. })) => {
                tracing::warn!("the job ran, but a newer run took it over meanwhile (this worker stalled past its lease)");
                return None;
            }
            Ok(Err(Error::Store(e))) => {
                tracing::warn!(error = %e, "the store failed around the job; it goes back to the queue");
                Settle::Release {
                    delay: self.backoff.delay(1),
                }
            }
            Ok(Err(other)) => Settle::Dead {
                error: other.to_string(),
            },
        })
    }

    fn failure(&self, job: &Claimed, error: String) -> Settle {
        let error = truncate(error);
        if job.attempt >= job.max_attempts {
            tracing::warn!(%error, "the job failed its last attempt; dead-lettered");
            Settle::Dead { error }
        } else {
            let delay = self.backoff.delay(job.attempt.unsigned_abs());
            tracing::info!(%error, ?delay, "the job failed; retrying after a backoff");
            Settle::Retry { delay, error }
        }
    }

    async fn settle(&self, job: &Claimed, settle: Settle) {
        let sql = &self.queue.sql;
        let query = || match &settle {
            Settle::Done => sqlx::query(&sql.done)
                .bind(vec![job.key.clone()])
                .bind(vec![job.attempt]),
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
                .bind(duration_micros(*delay)),
        };
        match on_conn!(self.queue.store, conn => query().execute(&mut *conn)) {
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

    /// Gives every claim still held back to the queue, at once and without counting it, and
    /// frees the idempotency records the claims took for calls that did not complete.
    async fn release_held(&self) -> usize {
        let (keys, attempts) = self.held_claims();
        if keys.is_empty() {
            return 0;
        }
        let (record_keys, fences): (Vec<&str>, Vec<i64>) = {
            let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            keys.iter()
                .filter_map(|k| held.get(k).and_then(|(_, f)| *f).map(|f| (k.as_str(), f)))
                .unzip()
        };
        let freed = on_conn!(self.queue.store, conn => sqlx::query(&self.queue.sql.forget_records)
            .bind(&record_keys)
            .bind(&fences)
            .execute(&mut *conn));
        if let Err(e) = freed {
            tracing::warn!(error = %e, "freeing the records of released jobs failed; they lapse with their lease");
        }
        let result = on_conn!(self.queue.store, conn => sqlx::query(&self.queue.sql.release)
            .bind(&keys)
            .bind(&attempts)
            .bind(0i64)
            .execute(&mut *conn));
        match result {
            Ok(done) => usize::try_from(done.rows_affected()).unwrap_or(usize::MAX),
            Err(e) => {
                tracing::warn!(error = %e, held = keys.len(), "releasing jobs at shutdown failed; they return when their lease lapses");
                0
            }
        }
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a non-string panic payload")
}

fn truncate(mut error: String) -> String {
    if error.len() > MAX_ERROR_LEN {
        let mut end = MAX_ERROR_LEN;
        while !error.is_char_boundary(end) {
            end -= 1;
        }
        error.truncate(end);
        error.push('…');
    }
    error
}
