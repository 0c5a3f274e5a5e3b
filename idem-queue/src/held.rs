//! Who holds a set of workers' claims: its name in the queue's table, its lease, and the
//! claims it holds by job key (what the completer gives back at shutdown). A completion that
//! claims the next job for its slot claims it for this holder.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_store_postgres::PgStore;

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
}

/// When a claim also looks for jobs whose lease lapsed (their workers stopped), to take them
/// back first: at once, then at most every half lease, and at least every second. Not on every
/// claim: that look reads the queue's running jobs' index up to now, past the entries of every
/// job finished more than a lease ago until VACUUM removes them. A lapsed job therefore waits
/// up to this interval longer than its lease (a claim that looked and was then cut off delays
/// the next look by one interval).
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
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let now = micros(self.epoch.elapsed());
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

    /// The first claim looks for lapsed jobs, the next ones within the interval do not; with
    /// no interval (a lease of zero), every claim looks.
    #[test]
    fn a_look_for_lapsed_jobs_is_due_at_once_then_once_per_interval() {
        let rescue = Rescue::new(Duration::from_secs(60));
        assert!(rescue.due());
        assert!(!rescue.due());
        assert!(!rescue.due());
        let always = Rescue::new(Duration::ZERO);
        assert!(always.due() && always.due());
    }
}
