//! Who holds a set of workers' claims: its name in the queue's table, its lease, the claims it
//! holds by job key (what the completer gives back at shutdown), and the starts of its
//! prefetched jobs not written yet (`started` writes them). A completion that claims the next
//! job for its slot claims it for this holder.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_store_postgres::PgStore;
use tokio::sync::Notify;

use crate::completer::rescue::Rescue;
use crate::db::QueueSql;
use crate::worker::claimed::Claimed;

/// A set of workers as the holder of claims in the queue's table.
#[derive(Debug)]
pub(crate) struct Holder {
    /// The store whose queue the claims are in.
    pub store: PgStore,
    /// The queue's statements.
    pub sql: Arc<QueueSql>,
    /// The named queue whose jobs these workers claim.
    pub queue: String,
    /// At most this many of the named queue's jobs run at once across every process.
    pub global_limit: Option<usize>,
    /// How long a claim holds without renewal.
    pub lease: Duration,
    /// The workers' name in the queue table (`pid:random`).
    pub worker: String,
    /// The claims held now.
    pub held: Held,
    /// Set once the workers stop: completions then claim no next job.
    pub stopping: AtomicBool,
    /// When a claim of this queue also takes back jobs whose lease lapsed.
    pub rescue: Rescue,
    /// How many jobs past the free slots a claim may take, to start as slots free up (0:
    /// never).
    pub prefetch: usize,
    /// Whether the workers prefetch now: then the producer claims past the free slots, else
    /// each completion claims the next job for its slot. Always, for a fixed prefetch; under
    /// a backlog only, for an adaptive one (see `producer`).
    pub prefetching: AtomicBool,
    /// Set by a completion that claimed the next job for its slot: the queue had more work
    /// than slots when a job ended.
    pub backlog: Backlog,
    /// How long jobs take, from start to settled (a moving average, µs): how many jobs the
    /// slots start within a lease, and so how many an adaptive prefetch holds.
    pub job_micros: AtomicU64,
    /// Prefetched jobs' starts not written yet.
    pub starts: Starts,
}

impl Holder {
    /// Notes that a job took `took` from its start to its settlement.
    pub fn job_took(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        let average = self.job_micros.load(Ordering::Relaxed);
        // Up at once, down by an eighth of each quicker job: a slow job stops prefetching
        // before more are held than the slots start in time, and quick ones (a duplicate, a
        // rescued job) resume it only as they keep coming. Races lose a sample, harmlessly.
        let next = micros.max(average - average / 8 + micros / 8);
        self.job_micros.store(next, Ordering::Relaxed);
    }

    /// How many jobs past `slots` free slots an adaptive prefetch holds now: as many as the
    /// slots start within a quarter of the lease at the jobs' pace so far, at most
    /// `prefetch`; none before a job has ended. Held jobs then start well within the half
    /// lease they are given (see `Claimed::start_by`); a queue of slow jobs does not prefetch
    /// at all.
    pub fn prefetch_now(&self, slots: usize) -> usize {
        match self.job_micros.load(Ordering::Relaxed) {
            // No job has ended yet: nothing says how long they take.
            0 => 0,
            micros => started_within(slots, self.lease / 4, Duration::from_micros(micros))
                .min(self.prefetch),
        }
    }
}

/// How many jobs `slots` slots start within `time`, each job taking `job`.
fn started_within(slots: usize, time: Duration, job: Duration) -> usize {
    let job = job.as_micros().max(1);
    let started = (slots as u128).saturating_mul(time.as_micros()) / job;
    usize::try_from(started).unwrap_or(usize::MAX)
}

/// Whether a completion found the queue backlogged since the producer last looked.
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    seen: AtomicBool,
    wake: Notify,
}

impl Backlog {
    /// A completion claimed the next job for its slot.
    pub fn seen(&self) {
        if !self.seen.swap(true, Ordering::SeqCst) {
            self.wake.notify_one();
        }
    }

    /// Whether a backlog was seen since the last call; forgets it.
    pub fn take(&self) -> bool {
        self.seen.swap(false, Ordering::SeqCst)
    }

    /// Waits until a backlog is seen.
    pub async fn noticed(&self) {
        self.wake.notified().await;
    }
}

/// Starts not yet written: each job's key, with its attempt (the claim's fence).
#[derive(Debug, Default)]
pub(crate) struct Starts {
    pending: Mutex<HashMap<String, i32>>,
    wake: Notify,
}

impl Starts {
    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, i32>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that `key`'s claim of `attempt` started; written within
    /// [`MARK_DELAY`](crate::worker::started::MARK_DELAY) (see `started`).
    pub fn started(&self, key: &str, attempt: i32) {
        self.pending().insert(key.to_owned(), attempt);
        self.wake.notify_one();
    }

    /// `key`'s claim of `attempt` ended: its outcome notes its start, if that is not written
    /// yet.
    pub fn ended(&self, key: &str, attempt: i32) {
        let mut pending = self.pending();
        if pending.get(key) == Some(&attempt) {
            pending.remove(key);
        }
    }

    /// Waits until a start is noted.
    pub async fn noted(&self) {
        self.wake.notified().await;
    }

    /// Takes every start noted and not written yet.
    pub fn take(&self) -> Vec<(String, i32)> {
        self.pending().drain().collect()
    }
}

/// The held claims: each job's key, with its attempt (the queue row's fence).
#[derive(Debug, Default)]
pub(crate) struct Held(Mutex<HashMap<String, i32>>);

impl Held {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, i32>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a claimed job as held.
    pub fn hold(&self, job: &Claimed) {
        self.map().insert(job.key.clone(), job.attempt);
    }

    /// Forgets `key`'s claim if it is still the one of `attempt`.
    pub fn forget(&self, key: &str, attempt: i32) {
        let mut map = self.map();
        if map.get(key) == Some(&attempt) {
            map.remove(key);
        }
    }

    /// Every held claim: (key, attempt).
    pub fn snapshot(&self) -> Vec<(String, i32)> {
        self.map().iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::started_within;
    use std::time::Duration;

    #[test]
    fn slow_jobs_leave_nothing_to_prefetch() {
        let quarter = Duration::from_millis(7_500);
        // No-op jobs: far more than any prefetch.
        assert_eq!(
            started_within(16, quarter, Duration::from_micros(150)),
            800_000
        );
        // Jobs of a few seconds: a few per slot.
        assert_eq!(started_within(4, quarter, Duration::from_secs(3)), 10);
        // The article's 35 s job: none (so no prefetching).
        assert_eq!(started_within(4, quarter, Duration::from_secs(35)), 0);
        // No measure yet counts as instant, never as a division by zero.
        assert_eq!(started_within(1, quarter, Duration::ZERO), 7_500_000);
    }
}
