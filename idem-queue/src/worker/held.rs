//! Who holds a set of workers' claims: its name in the queue's table, its lease, the claims it
//! holds by job key (what the completer gives back at shutdown), and the starts of its
//! prefetched jobs not written yet (`started` writes them). A completion that claims the next
//! job for its slot claims it for this holder.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
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
    /// How many jobs past the free slots a claim may take, to start as slots free up (0: none;
    /// then each completion claims the next job for its slot).
    pub prefetch: usize,
    /// Prefetched jobs' starts not written yet.
    pub starts: Starts,
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
