//! The claims this process holds, by job key: what the completer gives back at shutdown.

use std::collections::HashMap;
use std::sync::Mutex;

use super::producer::Claimed;

/// One held claim: the job's attempt (the queue row's fence) and the fence of the idempotency
/// record the claim statement took for it, if it took one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeldClaim {
    pub attempt: i32,
    pub record_fence: Option<i64>,
}

#[derive(Debug, Default)]
pub(crate) struct Held(Mutex<HashMap<String, HeldClaim>>);

impl Held {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, HeldClaim>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a claimed job as held.
    pub fn hold(&self, job: &Claimed) {
        let claim = HeldClaim {
            attempt: job.attempt,
            record_fence: job.record.map(|(fence, _)| fence),
        };
        self.map().insert(job.key.clone(), claim);
    }

    /// Forgets `key`'s claim if it is still the one of `attempt`.
    pub fn forget(&self, key: &str, attempt: i32) {
        let mut map = self.map();
        if map.get(key).is_some_and(|held| held.attempt == attempt) {
            map.remove(key);
        }
    }

    /// Every held claim.
    pub fn snapshot(&self) -> Vec<(String, HeldClaim)> {
        self.map().iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}
