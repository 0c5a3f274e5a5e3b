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
        })
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
}

impl Enqueued {
    /// `queued` or `duplicate`, as an HTTP API would say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Enqueued::Queued => "queued",
            Enqueued::Duplicate => "duplicate",
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
            EnqueueError::Store(e) => write!(f, "job not enqueued: {e}"),
        }
    }
}

impl StdError for EnqueueError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            EnqueueError::InvalidKey(e) => Some(e),
            EnqueueError::Payload(e) => Some(e),
            EnqueueError::KeyReused { .. } => None,
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
}

impl Job {
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
}

impl JobState {
    pub(crate) fn parse(state: &str) -> JobState {
        match state {
            "queued" => JobState::Queued,
            "running" => JobState::Running,
            "done" => JobState::Done,
            _ => JobState::Dead,
        }
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
    /// Claimed, its lease lapsed: its worker died or stalled; the next claim takes it again.
    Stale,
    /// Finished.
    Done,
    /// Dead-lettered.
    Dead,
}

impl JobFilter {
    /// The name operators use: `queued`, `running`, `stale`, `done`, `dead`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobFilter::Queued => "queued",
            JobFilter::Running => "running",
            JobFilter::Stale => "stale",
            JobFilter::Done => "done",
            JobFilter::Dead => "dead",
        }
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
    /// When it finished (done or dead).
    pub finished_at: Option<SystemTime>,
    /// Its attempts (see [`JobStatus::attempt_log`]).
    pub attempt_log: Vec<Attempt>,
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
    /// How it ended: `done`, `retried`, `dead`, `released` (given back, not counted), or
    /// `running`.
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
            JobState::Queued | JobState::Dead => None,
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
}

pub(crate) fn parse_payload(text: &str) -> Value {
    // The column is jsonb, so its text is always JSON.
    serde_json::from_str(text).unwrap_or(Value::Null)
}
