//! Who holds a set of workers' claims: its name in the queue's table, its lease, the claims it
//! holds by job key (what the completer gives back at shutdown), and the starts of its
//! prefetched jobs not written yet (`started` writes them). A completion that claims the next
//! job for its slot claims it for this holder.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_store_postgres::PgStore;
use tokio::sync::Notify;

use crate::claimed::Claimed;
use crate::sql::QueueSql;

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
    /// How many jobs past the free slots a claim may take, to start as slots free up (0: none;
    /// then each completion claims the next job for its slot).
    pub prefetch: usize,
    /// Prefetched jobs' starts not written yet.
    pub starts: Starts,
}

/// When a claim also looks for jobs whose lease lapsed (their workers stopped), to take them
/// back first: the workers' first claim looks, then one claim a second (or every half lease,
/// if that is shorter), and every claim while looks keep finding as many lapsed jobs as they
/// could take (a dead worker's jobs come back as fast as slots free up, before waiting jobs).
/// Not every claim: a look reads the queue's running jobs' index up to now, past the entries
/// of every job finished more than a lease ago until VACUUM removes them.
///
/// So a lapsed job waits up to an interval longer than its lease, or until the workers' next
/// claim if that comes later (an idle worker claims at its poll interval). A claim that could
/// take nothing (a global limit reached), or that did not look and found fewer waiting jobs
/// than it could take, makes the next claim look: workers call themselves idle only after a
/// look found nothing. A claim that looked and was cut off delays the next look by an
/// interval.
#[derive(Debug)]
pub(crate) struct Rescue {
    epoch: Instant,
    interval: Duration,
    /// The next look is due this many microseconds after `epoch`.
    next: AtomicU64,
}

impl Rescue {
    /// Looks for a `lease`'s lapsed jobs: due at once.
    pub fn new(lease: Duration) -> Rescue {
        Rescue {
            epoch: Instant::now(),
            interval: (lease / 2).min(Duration::from_secs(1)),
            next: AtomicU64::new(0),
        }
    }

    /// Whether the claim about to be sent should look for lapsed jobs; when it should, the next
    /// look is due an interval from now (one claim looks, not every claim sent meanwhile).
    pub fn due(&self) -> bool {
        self.due_at(self.epoch.elapsed())
    }

    /// Whether the next claim would look (without using the look up).
    pub fn pending(&self) -> bool {
        self.pending_at(self.epoch.elapsed())
    }

    /// `pending` at `now` (since `epoch`).
    fn pending_at(&self, now: Duration) -> bool {
        u64::try_from(now.as_micros()).unwrap_or(u64::MAX) >= self.next.load(Ordering::SeqCst)
    }

    /// What a claim took: `got` jobs where it could take `limit`, `lapsed` of them taken over
    /// from stopped workers; `looked` says whether it looked for those. The next claim looks
    /// again when lapsed jobs filled this one (more may be behind them), when this one could
    /// take nothing (a global limit), or when it did not look and came back short (waiting
    /// jobs ran out; only a look says whether lapsed ones remain).
    pub fn took(&self, looked: bool, lapsed: usize, got: usize, limit: usize) {
        let again = if looked {
            lapsed >= limit || limit == 0
        } else {
            got < limit
        };
        if again {
            self.next.store(0, Ordering::SeqCst);
        }
    }

    /// Makes the next claim look: a worker about to call itself idle looks once more, as a
    /// job may have lapsed since the last look.
    pub fn look_again(&self) {
        self.next.store(0, Ordering::SeqCst);
    }

    /// `due` at `now` (since `epoch`).
    fn due_at(&self, now: Duration) -> bool {
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let now = micros(now);
        let next = self.next.load(Ordering::SeqCst);
        now >= next
            && self
                .next
                .compare_exchange(
                    next,
                    now.saturating_add(micros(self.interval)),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_ok()
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
    /// [`MARK_DELAY`](crate::started::MARK_DELAY) (see `started`).
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
    use super::Rescue;
    use std::time::Duration;

    /// The first claim looks for lapsed jobs, the next ones within the interval do not, the
    /// first after it does (a second, for a lease of a minute; half a lease when shorter).
    #[test]
    fn a_look_for_lapsed_jobs_is_due_at_once_then_once_per_interval() {
        let ms = Duration::from_millis;
        let rescue = Rescue::new(Duration::from_secs(60));
        assert!(rescue.due_at(ms(0)));
        assert!(!rescue.due_at(ms(1)));
        assert!(!rescue.due_at(ms(999)));
        assert!(rescue.due_at(ms(1000)));
        assert!(!rescue.due_at(ms(1500)));
        assert!(rescue.due_at(ms(2000)));
        let short = Rescue::new(ms(400));
        assert!(short.due_at(ms(0)));
        assert!(!short.due_at(ms(199)));
        assert!(short.due_at(ms(200)));
    }

    /// A look whose lapsed jobs filled its claim, or that could take nothing, makes the next
    /// claim look again, and so does a claim that did not look and came back short; a look
    /// that found fewer than it could take, and a full claim, do not.
    #[test]
    fn a_look_that_filled_its_claim_with_lapsed_jobs_looks_again() {
        let ms = Duration::from_millis;
        let rescue = Rescue::new(Duration::from_secs(60));
        assert!(rescue.due_at(ms(0)));
        assert!(!rescue.pending_at(ms(1)));
        rescue.took(true, 4, 4, 4);
        assert!(rescue.pending_at(ms(1)));
        assert!(rescue.due_at(ms(1)), "four of four: maybe more");
        rescue.took(true, 1, 4, 4);
        assert!(!rescue.due_at(ms(2)), "one of four: all there were");
        rescue.took(false, 0, 4, 4);
        assert!(!rescue.due_at(ms(3)), "a full claim that did not look");
        rescue.took(false, 0, 2, 4);
        assert!(rescue.due_at(ms(4)), "a short claim that did not look");
        rescue.took(true, 0, 0, 0);
        assert!(rescue.due_at(ms(5)), "nothing could be taken");
    }
}
