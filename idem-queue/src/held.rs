//! The claims this process holds, by job key: what the completer gives back at shutdown.

use std::collections::HashMap;
use std::sync::Mutex;

use super::producer::Claimed;

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
