//! Units of work: what is enqueued ([`NewJob`]), what a handler receives ([`Job`]), and what
//! the queue reports about them.

use std::error::Error as StdError;
use std::fmt;
use std::time::{Duration, SystemTime};

use idem_core::{InvalidKey, Key, StoreError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::schedules::tick::{parse_tick_key, Tick};
use crate::trace;

/// How many times a job runs before it is dead-lettered, unless [`NewJob::max_attempts`] says
/// otherwise.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 20;

/// A unit of work to [enqueue](super::Queue::enqueue): its key, its JSON payload, and when and
/// how often it may run.
///
/// ```
/// use idem_queue::NewJob;
/// use std::time::Duration;
///
/// let job = NewJob::new("welcome-email:42", &serde_json::json!({"user": 42}))
///     .unwrap()
///     .after(Duration::from_secs(60))
///     .max_attempts(5);
/// assert_eq!(job.key(), "welcome-email:42");
/// ```
#[derive(Debug, Clone)]
pub struct NewJob {
    pub(crate) key: Key,
    pub(crate) payload: String,
    pub(crate) run_after: Option<SystemTime>,
    pub(crate) delay: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) queue: String,
    pub(crate) priority: i16,
    pub(crate) serial_key: Option<String>,
    pub(crate) replace: bool,
    pub(crate) traceparent: Option<String>,
}

/// The named queue a job goes to unless [`NewJob::queue`] names another, and the one workers
/// serve unless [`WorkerBuilder::queue`](crate::WorkerBuilder::queue) names others.
pub const DEFAULT_QUEUE: &str = "default";

/// The longest name of a queue, and the longest serial key.
pub const MAX_QUEUE_NAME_LEN: usize = 100;

/// Checks a queue name or serial key (`what`): 1 to [`MAX_QUEUE_NAME_LEN`] bytes, no control
/// characters.
pub(crate) fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_QUEUE_NAME_LEN {
        return Err(format!(
            "{what} {name:?} must be 1 to {MAX_QUEUE_NAME_LEN} bytes long"
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("{what} {name:?} may not hold control characters"));
    }
    Ok(())
}

impl NewJob {
    /// A job keyed `key` carrying `payload` (any `Serialize` value, stored as `jsonb`). Fails
    /// for an invalid key (empty, too long, control characters) or a payload that cannot be
    /// stored exactly ([`EnqueueError::Payload`], naming where): one that cannot be JSON, a
    /// string with a NUL character (`\u0000`, which `jsonb` refuses), or a whole number beyond
    /// ±2^53 that JSON parsing has already rounded (send such numbers as strings). Nothing is
    /// stored either way.
    pub fn new<K, P>(key: K, payload: &P) -> Result<NewJob, EnqueueError>
    where
        K: TryInto<Key>,
        InvalidKey: From<K::Error>,
        P: Serialize + ?Sized,
    {
        let key = key
            .try_into()
            .map_err(|e| EnqueueError::InvalidKey(InvalidKey::from(e)))?;
        let value = serde_json::to_value(payload).map_err(EnqueueError::Payload)?;
        check_storable(&value, &mut String::from("$")).map_err(|problem| {
            EnqueueError::Payload(<serde_json::Error as serde::ser::Error>::custom(problem))
        })?;
        let payload = serde_json::to_string(&value).map_err(EnqueueError::Payload)?;
        Ok(NewJob {
            key,
            payload,
            run_after: None,
            delay: Duration::ZERO,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            queue: DEFAULT_QUEUE.to_owned(),
            priority: 0,
            serial_key: None,
            replace: false,
            traceparent: trace::current(),
        })
    }

    /// The W3C `traceparent` of the work this job continues, when it is not the current span's
    /// (with the `opentelemetry` feature, a job made inside a traced span takes that span's
    /// without this). The span that runs the job links to it. It must have the W3C shape
    /// (`00-` and three groups of hex digits); [`enqueue`](crate::Queue::enqueue) refuses
    /// another.
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> Self {
        self.traceparent = Some(traceparent.into());
        self
    }

    /// Opt-in debounce: if a job with this key is stored and waiting to run (`queued`: not yet
    /// claimed, or waiting for a retry, whose attempts so far it keeps), this enqueue replaces
    /// its payload, run time, priority, named queue, serial key and attempt limit
    /// ([`Enqueued::Replaced`]) instead of refusing a different payload. A job already running
    /// or finished is left as it is, and the enqueue answers as without this option.
    pub fn replace(mut self) -> Self {
        self.replace = true;
        self
    }

    /// Goes to the named queue `name` (default [`DEFAULT_QUEUE`]), which only workers that
    /// serve it run. A name is 1 to [`MAX_QUEUE_NAME_LEN`] bytes without control characters;
    /// [`enqueue`](crate::Queue::enqueue) refuses any other, storing nothing.
    pub fn queue(mut self, name: impl Into<String>) -> Self {
        self.queue = name.into();
        self
    }

    /// Runs before the queue's jobs of lower priority that are available too (default 0;
    /// higher first, negative below the default). Jobs of one priority run in the order they
    /// became available.
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// Runs one at a time with the other jobs of `key`, in the order they were enqueued,
    /// across every worker process: a job of the key runs only once the key's jobs enqueued
    /// before it are done, dead or cancelled (one waiting for a retry holds the later ones
    /// back). For work that must not overlap or reorder, such as one customer's. The same
    /// rules as a queue's name apply.
    pub fn serial_key(mut self, key: impl Into<String>) -> Self {
        self.serial_key = Some(key.into());
        self
    }

    /// Runs at `at` or later (the default is now): a delayed job, or a schedule's tick.
    pub fn run_at(mut self, at: SystemTime) -> Self {
        self.run_after = Some(at);
        self
    }

    /// Runs `delay` from now or later, by the database's clock (added to [`run_at`] if both
    /// are given).
    ///
    /// [`run_at`]: NewJob::run_at
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Runs at most `attempts` times (at least 1; default [`DEFAULT_MAX_ATTEMPTS`]); after the
    /// last failure the job is dead-lettered with its last error.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.clamp(1, i32::MAX as u32);
        self
    }

    /// The job's key.
    pub fn key(&self) -> &str {
        self.key.as_str()
    }

    /// Why the job's queue name or serial key cannot be stored, if one cannot.
    pub(crate) fn check(&self) -> Result<(), String> {
        check_name("queue name", &self.queue)?;
        if let Some(traceparent) = &self.traceparent {
            if !trace::is_traceparent(traceparent) {
                return Err(format!("{traceparent:?} is not a W3C traceparent"));
            }
        }
        match &self.serial_key {
            Some(key) => check_name("serial key", key),
            None => Ok(()),
        }
    }
}

/// What [enqueue](super::Queue::enqueue) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "Enqueued says whether the job was stored now or was already there"]
pub enum Enqueued {
    /// The job was stored and will run.
    Queued,
    /// A job with this key (and the same payload) was already stored, in whatever state; nothing
    /// was stored now.
    Duplicate,
    /// A job with this key waited to run and, as the new job asked
    /// ([`NewJob::replace`]), now carries its payload, run time, priority and attempts.
    Replaced,
}

impl Enqueued {
    /// `queued` or `duplicate`, as an HTTP API would say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Enqueued::Queued => "queued",
            Enqueued::Duplicate => "duplicate",
            Enqueued::Replaced => "replaced",
        }
    }
}

/// The largest integer a JSON number keeps exactly once parsed as a float: 2^53.
const EXACT_INTEGERS: f64 = 9_007_199_254_740_992.0;

/// Refuses what `jsonb` cannot store, or cannot store as it was meant: a NUL character in a
/// string or key, and a whole number beyond ±2^53 held as a float (it was rounded when parsed).
/// `path` is where in the payload the walk is (`$.a[2]`), for the message.
fn check_storable(value: &Value, path: &mut String) -> Result<(), String> {
    let nul = |path: &str| {
        format!(
            "the payload holds a NUL character (\\u0000) at {path}, which PostgreSQL's jsonb \
             cannot store"
        )
    };
    match value {
        Value::String(s) if s.contains('\0') => Err(nul(path)),
        Value::Number(n) => match n.as_f64() {
            Some(x) if n.is_f64() && x.fract() == 0.0 && x.abs() >= EXACT_INTEGERS => Err(format!(
                "the payload holds the number {n} at {path}, a whole number too large to be kept \
                 exact (beyond ±2^53); send it as a string"
            )),
            _ => Ok(()),
        },
        Value::Array(items) => items.iter().enumerate().try_for_each(|(i, item)| {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            let checked = check_storable(item, path);
            path.truncate(len);
            checked
        }),
        Value::Object(fields) => fields.iter().try_for_each(|(name, item)| {
            let len = path.len();
            path.push_str(&format!(".{name}"));
            let checked = if name.contains('\0') {
                Err(nul(path))
            } else {
                check_storable(item, path)
            };
            path.truncate(len);
            checked
        }),
        _ => Ok(()),
    }
}

/// Why a job was not enqueued. Nothing was stored.
#[derive(Debug)]
#[non_exhaustive]
pub enum EnqueueError {
    /// The key is empty, too long or has control characters.
    InvalidKey(InvalidKey),
    /// The payload cannot be stored as it is: not JSON, a NUL character, or a whole number too
    /// large to be exact. The message says where.
    Payload(serde_json::Error),
    /// A job with this key is stored with a different payload: the key names other work. Use a
    /// key that tells the two apart.
    KeyReused {
        /// The key in question.
        key: String,
    },
    /// An option names something that cannot be stored: a queue name or serial key that is
    /// empty, too long, or holds control characters.
    Invalid(String),
    /// The database failed or could not be reached; retry later.
    Store(StoreError),
}

impl fmt::Display for EnqueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnqueueError::InvalidKey(e) => write!(f, "job not enqueued: {e}"),
            EnqueueError::Payload(e) => {
                write!(f, "job not enqueued: its payload cannot be stored: {e}")
            }
            EnqueueError::KeyReused { key } => write!(
                f,
                "job not enqueued: key {key:?} is already stored with a different payload; use a \
                 key that tells the two jobs apart"
            ),
            EnqueueError::Invalid(problem) => write!(f, "job not enqueued: {problem}"),
            EnqueueError::Store(e) => write!(f, "job not enqueued: {e}"),
        }
    }
}

impl StdError for EnqueueError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            EnqueueError::InvalidKey(e) => Some(e),
            EnqueueError::Payload(e) => Some(e),
            EnqueueError::KeyReused { .. } | EnqueueError::Invalid(_) => None,
            EnqueueError::Store(e) => Some(e),
        }
    }
}

impl From<StoreError> for EnqueueError {
    fn from(e: StoreError) -> Self {
        EnqueueError::Store(e)
    }
}

/// A claimed job, as a worker's handler receives it.
#[derive(Debug, Clone)]
pub struct Job {
    pub(crate) key: String,
    pub(crate) payload: Value,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    pub(crate) queue: String,
    pub(crate) traceparent: Option<String>,
    /// Set once an operator cancelled the job while it runs ([`Queue::cancel`](crate::Queue::cancel)).
    pub(crate) cancel: tokio::sync::watch::Receiver<bool>,
}

impl Job {
    /// The named queue it was enqueued to.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The W3C `traceparent` of the span that enqueued it (or the one given to
    /// [`NewJob::traceparent`]), if there was one.
    pub fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }

    /// Whether the job was cancelled while it runs ([`Queue::cancel`](crate::Queue::cancel)).
    /// The worker hears of it at the job's next lease renewal (a third of the lease); a handler
    /// that checks this can stop cleanly: any `Err` then ends the job cancelled, while `Ok`
    /// (the work was finished after all) ends it done. One that ignores it is cut a lease
    /// after the worker heard, and ends cancelled.
    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Waits until the job is cancelled (see [`is_cancelled`](Job::is_cancelled)); never
    /// returns for a job nobody cancels. For `tokio::select!` against the work.
    pub async fn cancelled(&self) {
        let mut cancel = self.cancel.clone();
        if cancel.wait_for(|cancelled| *cancelled).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
    /// The schedule and tick this job was enqueued for, if a [`Scheduler`](crate::Scheduler)
    /// enqueued it (its key is `schedule:NAME:TIME`).
    pub fn tick(&self) -> Option<Tick> {
        parse_tick_key(&self.key).map(|(schedule, at)| Tick {
            schedule: schedule.to_owned(),
            at,
        })
    }

    /// The job's key; also the key of the idempotent call the handler runs in, so
    /// `idem_core::context::current()` and the journal see it.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The payload as stored.
    pub fn payload(&self) -> &Value {
        &self.payload
    }

    /// The payload as a `T`.
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.payload)
    }

    /// Which attempt this is, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The attempt after which a failure dead-letters the job.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Waiting to run (now, after a run-after time, or after a retry's backoff).
    Queued,
    /// Claimed by a worker.
    Running,
    /// Finished.
    Done,
    /// Failed its last attempt; see [`Queue::dead`](super::Queue::dead).
    Dead,
    /// Cancelled ([`Queue::cancel`](super::Queue::cancel), or its handler's
    /// [`JobError::cancel`](crate::JobError::cancel)): it will not run again.
    Cancelled,
}

impl JobState {
    pub(crate) fn parse(state: &str) -> JobState {
        match state {
            "queued" => JobState::Queued,
            "running" => JobState::Running,
            "done" => JobState::Done,
            "cancelled" => JobState::Cancelled,
            _ => JobState::Dead,
        }
    }

    /// `queued`, `running`, `done`, `dead` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Dead => "dead",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Whether it has ended for good: done, dead or cancelled.
    pub fn is_finished(self) -> bool {
        matches!(self, JobState::Done | JobState::Dead | JobState::Cancelled)
    }
}

/// One job's state, from [`Queue::status`](super::Queue::status).
#[derive(Debug, Clone, PartialEq)]
pub struct JobStatus {
    /// Where it is.
    pub state: JobState,
    /// Attempts so far (claims, including one running now).
    pub attempts: u32,
    /// Its attempt limit.
    pub max_attempts: u32,
    /// The last failure's message, if it failed before.
    pub last_error: Option<String>,
    /// The payload.
    pub payload: Value,
    /// Its attempts, oldest first: each ended one that did not complete (the latest 20), then
    /// the current one (running, or the one that completed).
    pub attempt_log: Vec<Attempt>,
}

/// Which jobs [`Queue::jobs`](crate::Queue::jobs) lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobFilter {
    /// Waiting to run.
    Queued,
    /// Claimed, on a live lease.
    Running,
    /// Claimed, its lease lapsed: its worker died or stalled; the workers take it back before
    /// waiting jobs (a busy worker looks once a second, an idle one at each poll).
    Stale,
    /// Finished.
    Done,
    /// Dead-lettered.
    Dead,
    /// Cancelled.
    Cancelled,
}

impl JobFilter {
    /// The name operators use: `queued`, `running`, `stale`, `done`, `dead`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobFilter::Queued => "queued",
            JobFilter::Running => "running",
            JobFilter::Stale => "stale",
            JobFilter::Done => "done",
            JobFilter::Dead => "dead",
            JobFilter::Cancelled => "cancelled",
        }
    }

    /// The state [`as_str`](Self::as_str) names, or `None`.
    pub fn parse(name: &str) -> Option<JobFilter> {
        use JobFilter::*;
        [Queued, Running, Stale, Done, Dead, Cancelled]
            .into_iter()
            .find(|state| state.as_str() == name)
    }
}

/// A job as operators see it, from [`Queue::job`](crate::Queue::job) and
/// [`Queue::jobs`](crate::Queue::jobs).
#[derive(Debug, Clone, PartialEq)]
pub struct JobInfo {
    /// Its key.
    pub key: String,
    /// Where it is; `stale` for a running job whose lease lapsed.
    pub state: JobFilter,
    /// Attempts so far (claims, including one running now).
    pub attempts: u32,
    /// Its attempt limit.
    pub max_attempts: u32,
    /// The worker that holds (or last held) it.
    pub worker: Option<String>,
    /// The last failure's message.
    pub last_error: Option<String>,
    /// The payload.
    pub payload: Value,
    /// When it was enqueued.
    pub created_at: SystemTime,
    /// When it may run (queued), or when its lease lapses (running).
    pub available_at: SystemTime,
    /// When it finished (done, dead or cancelled).
    pub finished_at: Option<SystemTime>,
    /// Its attempts (see [`JobStatus::attempt_log`]).
    pub attempt_log: Vec<Attempt>,
    /// The named queue it is in.
    pub queue: String,
    /// Its priority in that queue.
    pub priority: i16,
    /// Its serial key, if it has one.
    pub serial_key: Option<String>,
    /// When an operator asked a running attempt to stop, if one did (kept once the job ends;
    /// cleared by [`Queue::retry_dead`](crate::Queue::retry_dead)).
    pub cancel_requested_at: Option<SystemTime>,
}

/// What [`Queue::cancel`](crate::Queue::cancel) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "Cancel says whether the job was cancelled now or only asked to stop"]
pub enum Cancel {
    /// It was waiting to run: it is `cancelled` now and never runs.
    Cancelled,
    /// It is running: its handler is told at its next lease renewal
    /// ([`Job::cancelled`](crate::Job::cancelled)), and it ends `cancelled` unless it finishes
    /// first (work done stays done). If its worker died, the claim that takes it over ends it
    /// `cancelled` without running it (or `done`, if that worker had finished the work).
    Requested,
    /// It had ended already (done, dead or cancelled): nothing changed.
    Finished(JobState),
    /// No job has this key.
    NotFound,
}

/// How a job ended, or that it has not, from [`Queue::result`](crate::Queue::result).
#[derive(Debug, Clone, PartialEq)]
pub enum JobResult {
    /// Not finished yet (queued or running).
    Pending,
    /// Done, with its handler's `Ok` value as JSON (`None` for `()` or a result too large to
    /// keep).
    Done(Option<Value>),
    /// Dead-lettered, with its last error.
    Dead(Option<String>),
    /// Cancelled, with the reason.
    Cancelled(Option<String>),
}

/// One attempt of a job, from its [attempt log](JobStatus::attempt_log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Its number (1 for the first).
    pub attempt: u32,
    /// When it was claimed.
    pub started_at: Option<SystemTime>,
    /// When it ended (`None` while it runs).
    pub ended_at: Option<SystemTime>,
    /// How it ended: `done`, `retried`, `dead`, `released` (given back, not counted),
    /// `snoozed`, `cancelled`, `lapsed` (its worker stopped renewing the lease and the next
    /// claim took the job over), or `running`.
    pub outcome: String,
    /// Its error text, if it failed (bounded as `last_error` is).
    pub error: Option<String>,
}

impl Attempt {
    /// The attempts `log` (the `attempt_log` column's JSON) holds, then the current one: a job
    /// in `state`, claimed for its `attempt` at `attempted_at`, finished at `finished_at`.
    pub(crate) fn log(
        log: &str,
        state: JobState,
        attempt: u32,
        attempted_at: Option<SystemTime>,
        finished_at: Option<SystemTime>,
    ) -> Vec<Attempt> {
        let time = |v: &Value| {
            v.as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| SystemTime::from(t.with_timezone(&chrono::Utc)))
        };
        let mut attempts: Vec<Attempt> = serde_json::from_str::<Vec<Value>>(log)
            .unwrap_or_default()
            .iter()
            .map(|entry| Attempt {
                attempt: entry["attempt"].as_u64().unwrap_or(0) as u32,
                started_at: time(&entry["started_at"]),
                ended_at: time(&entry["ended_at"]),
                outcome: entry["outcome"].as_str().unwrap_or("unknown").to_owned(),
                error: entry["error"].as_str().map(str::to_owned),
            })
            .collect();
        let current = match state {
            JobState::Done => Some("done"),
            JobState::Running => Some("running"),
            JobState::Queued | JobState::Dead | JobState::Cancelled => None,
        };
        if let (Some(outcome), Some(started_at)) = (current, attempted_at) {
            attempts.push(Attempt {
                attempt,
                started_at: Some(started_at),
                ended_at: finished_at.filter(|_| state == JobState::Done),
                outcome: outcome.to_owned(),
                error: None,
            });
        }
        attempts
    }
}

/// A dead-lettered job, from [`Queue::dead`](super::Queue::dead).
#[derive(Debug, Clone, PartialEq)]
pub struct DeadJob {
    /// Its key.
    pub key: String,
    /// Its payload.
    pub payload: Value,
    /// How many times it ran.
    pub attempts: u32,
    /// The last attempt's error.
    pub last_error: Option<String>,
    /// When it was dead-lettered.
    pub failed_at: SystemTime,
}

/// Counts of the queue's jobs by state, from [`Queue::stats`](super::Queue::stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Waiting to run, including jobs waiting for a run-after time or a retry.
    pub queued: u64,
    /// Claimed by a worker whose lease is live (a crashed worker's claim counts here until its
    /// lease lapses).
    pub running: u64,
    /// Claimed by a worker whose lease lapsed without a renewal or an answer: its worker died,
    /// hung, or lost the database. The next claim takes the job over and runs it again.
    pub stale: u64,
    /// Finished and not yet purged.
    pub done: u64,
    /// Dead-lettered.
    pub dead: u64,
    /// Cancelled.
    pub cancelled: u64,
}

pub(crate) fn parse_payload(text: &str) -> Value {
    // The column is jsonb, so its text is always JSON.
    serde_json::from_str(text).unwrap_or(Value::Null)
}
