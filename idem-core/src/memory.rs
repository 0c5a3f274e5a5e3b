//! The embedded in-memory store.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use crate::clock::{Clock, SystemClock};
use crate::error::StoreError;
use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::store::{
    Claim, ClaimRequest, ClaimToken, Completion, EffectEntry, EffectRecord, EffectState, Fence,
    Fenced, Purge, Record, RecordState, Store,
};

/// Fences come from one counter for the whole process, so a key that is released (its record
/// deleted) and claimed again still gets a larger fence than any earlier run of it.
static NEXT_FENCE: AtomicU64 = AtomicU64::new(1);

/// Maps smaller than this (records and journal entries together) are never purged
/// automatically.
const AUTO_PURGE_FLOOR: usize = 1024;

/// An in-memory store for one process: tests, development, and single-instance services.
///
/// Thread-safe and honouring every rule of [`Store`], but it is only as durable and as shared
/// as the process: a restart forgets every key, and two processes do not see each other's
/// claims. Use a database-backed store (`idem-store-postgres`) when several processes or
/// servers handle the same work.
///
/// Leases and retention are judged on the clock's monotonic time ([`Clock::monotonic`]): a step
/// of the wall clock (NTP, a resumed VM) neither frees a live claim nor keeps a dead one. The
/// wall clock only dates what the store reports.
///
/// Expired records and journal entries are purged by [`Purge::purge_expired`], and
/// automatically whenever the store has doubled in size since the last purge, so memory stays
/// bounded by the live entries without a background task.
///
/// ```
/// use idem_core::{idempotent, MemoryStore, Outcome};
///
/// struct App { store: MemoryStore }
///
/// #[idempotent(key = "reminder:{user_id}", store = app.store)]
/// async fn send_reminder(app: &App, user_id: u64) -> Result<&'static str, std::io::Error> {
///     Ok("sent")
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let app = App { store: MemoryStore::new() };
/// assert_eq!(send_reminder(&app, 42).await.unwrap(), Outcome::Executed("sent"));
/// assert!(send_reminder(&app, 42).await.unwrap().is_duplicate());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    clock: Box<dyn Clock>,
    map: Mutex<Map>,
}

#[derive(Debug, Default)]
struct Map {
    records: HashMap<Key, Entry>,
    effects: HashMap<(Key, String), Effect>,
    purge_at: usize,
}

#[derive(Debug, Clone)]
struct Effect {
    entry: EffectEntry,
    /// Monotonic time (see [`Now`]) at which the entry expires.
    expires: Duration,
}

#[derive(Debug, Clone)]
struct Entry {
    fence: Fence,
    fingerprint: Option<Fingerprint>,
    /// The token of the claim that made this fence.
    token: Option<ClaimToken>,
    state: State,
}

/// Deadlines are kept in monotonic time, so a step of the wall clock moves none of them; wall
/// times are only reported.
#[derive(Debug, Clone)]
enum State {
    InProgress {
        /// Monotonic time at which the lease lapses.
        lease_until: Duration,
    },
    Completed {
        /// Reported: when it completed.
        completed_at: SystemTime,
        /// Monotonic time of the completion, which `keep` counts from.
        completed: Duration,
        /// Monotonic time at which the record stops counting.
        keep_until: Duration,
        output: Option<Vec<u8>>,
    },
}

/// The time of one store step: the wall clock, to report, and the monotonic time, to decide.
#[derive(Debug, Clone, Copy)]
struct Now {
    wall: SystemTime,
    mono: Duration,
}

impl Now {
    /// The wall-clock time at which the monotonic time will be (or was) `mono`.
    fn wall_at(self, mono: Duration) -> SystemTime {
        if mono >= self.mono {
            self.wall + (mono - self.mono)
        } else {
            self.wall - (self.mono - mono)
        }
    }
}

impl Entry {
    fn is_expired(&self, now: Now) -> bool {
        match &self.state {
            State::InProgress { lease_until } => *lease_until <= now.mono,
            State::Completed { keep_until, .. } => *keep_until <= now.mono,
        }
    }
}

fn fingerprints_differ(stored: Option<&Fingerprint>, requested: Option<&Fingerprint>) -> bool {
    matches!((stored, requested), (Some(a), Some(b)) if a != b)
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> MemoryStore {
        MemoryStore::with_clock(SystemClock)
    }

    /// An empty store on the given clock, e.g. a [`ManualClock`](crate::clock::ManualClock)
    /// to test lease expiry without sleeping.
    pub fn with_clock(clock: impl Clock + 'static) -> MemoryStore {
        MemoryStore {
            inner: Arc::new(Inner {
                clock: Box::new(clock),
                map: Mutex::new(Map {
                    records: HashMap::new(),
                    effects: HashMap::new(),
                    purge_at: AUTO_PURGE_FLOOR,
                }),
            }),
        }
    }

    /// How many records are held, expired ones included.
    pub fn len(&self) -> usize {
        self.map().records.len()
    }

    /// Whether no records are held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn map(&self) -> MutexGuard<'_, Map> {
        // A panic while holding the lock cannot leave a record half-written (each step replaces
        // whole entries), so a poisoned lock is safe to keep using.
        self.inner.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> Now {
        let clock = &self.inner.clock;
        Now {
            wall: clock.now(),
            mono: clock.monotonic(),
        }
    }

    /// Applies `f` to the record for `key` if it holds `fence`, in one critical section.
    fn fenced(&self, key: &Key, fence: Fence, f: impl FnOnce(&mut Entry) -> After) -> Fenced {
        let mut map = self.map();
        let after = match map.records.get_mut(key) {
            Some(entry) if entry.fence == fence => f(entry),
            _ => return Fenced::Lost,
        };
        match after {
            After::Keep => Fenced::Applied,
            After::Remove => {
                map.records.remove(key);
                Fenced::Applied
            }
            After::Refuse => Fenced::Lost,
        }
    }
}

/// What a fenced step does with the record it matched.
enum After {
    Keep,
    Remove,
    Refuse,
}

/// Release and abandon free unfinished claims only: a completed record stays completed, and
/// the release reports that nothing was released.
fn free_unfinished(entry: &mut Entry) -> After {
    match entry.state {
        State::InProgress { .. } => After::Remove,
        State::Completed { .. } => After::Refuse,
    }
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::new()
    }
}

impl Map {
    /// Records and journal entries held, expired ones included.
    fn size(&self) -> usize {
        self.records.len() + self.effects.len()
    }

    /// Purges everything expired once the maps have doubled since the last purge, so memory
    /// stays bounded by the live entries at an amortized O(1) per write.
    fn purge_if_grown(&mut self, now: Now) {
        if self.size() >= self.purge_at {
            self.purge(now, usize::MAX);
        }
    }

    /// Deletes up to `limit` expired records and up to `limit` expired journal entries.
    fn purge(&mut self, now: Now, limit: usize) -> u64 {
        let removed = remove_expired(&mut self.records, limit, |e| e.is_expired(now))
            + remove_expired(&mut self.effects, limit, |e| e.expires <= now.mono);
        self.purge_at = (self.size() * 2).max(AUTO_PURGE_FLOOR);
        removed
    }
}

/// Removes up to `limit` entries of `map` for which `expired` holds; returns how many.
fn remove_expired<K, V>(map: &mut HashMap<K, V>, limit: usize, expired: impl Fn(&V) -> bool) -> u64
where
    K: std::hash::Hash + Eq + Clone,
{
    let before = map.len();
    if limit >= before {
        map.retain(|_, v| !expired(v));
    } else {
        let keys: Vec<K> = map
            .iter()
            .filter(|(_, v)| expired(v))
            .map(|(k, _)| k.clone())
            .take(limit)
            .collect();
        for key in keys {
            map.remove(&key);
        }
    }
    (before - map.len()) as u64
}

#[async_trait]
impl Store for MemoryStore {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let now = self.now();
        let mut map = self.map();
        map.purge_if_grown(now);
        let lease_until = now.mono + request.lease;
        let taken_over = match map.records.get(request.key) {
            None => false,
            Some(entry) if entry.is_expired(now) => true,
            Some(entry) => {
                if let (State::InProgress { lease_until }, Some(token)) =
                    (&entry.state, request.token)
                {
                    if entry.token == Some(token) {
                        // The caller's own claim, sent again: it holds the key.
                        return Ok(Claim::Acquired {
                            fence: entry.fence,
                            lease_expires_at: now.wall_at(*lease_until),
                            taken_over: false,
                        });
                    }
                }
                if fingerprints_differ(entry.fingerprint.as_ref(), request.fingerprint) {
                    return Ok(Claim::Mismatch);
                }
                return Ok(match &entry.state {
                    State::InProgress { lease_until } => Claim::InProgress {
                        lease_expires_at: now.wall_at(*lease_until),
                    },
                    State::Completed {
                        completed_at,
                        output,
                        ..
                    } => Claim::Completed {
                        completed_at: *completed_at,
                        output: output.clone(),
                    },
                });
            }
        };
        let fence = Fence(NEXT_FENCE.fetch_add(1, Ordering::Relaxed));
        map.records.insert(
            request.key.clone(),
            Entry {
                fence,
                fingerprint: request.fingerprint.cloned(),
                token: request.token,
                state: State::InProgress { lease_until },
            },
        );
        Ok(Claim::Acquired {
            fence,
            lease_expires_at: now.wall_at(lease_until),
            taken_over,
        })
    }

    async fn complete(
        &self,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, StoreError> {
        let now = self.now();
        Ok(self.fenced(key, fence, |entry| {
            let (completed_at, completed) = match &entry.state {
                // A repeated completion keeps the first completion time.
                State::Completed {
                    completed_at,
                    completed,
                    ..
                } => (*completed_at, *completed),
                State::InProgress { .. } => (now.wall, now.mono),
            };
            entry.state = State::Completed {
                completed_at,
                completed,
                keep_until: completed + completion.keep,
                output: completion.output.map(<[u8]>::to_vec),
            };
            After::Keep
        }))
    }

    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        Ok(self.fenced(key, fence, free_unfinished))
    }

    async fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Result<Fenced, StoreError> {
        let now = self.now();
        Ok(self.fenced(key, fence, |entry| match &mut entry.state {
            State::InProgress { lease_until } => {
                *lease_until = now.mono + lease;
                After::Keep
            }
            State::Completed { .. } => After::Refuse,
        }))
    }

    async fn get(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        let now = self.now();
        let map = self.map();
        Ok(map.records.get(key).map(|entry| Record {
            key: key.clone(),
            fence: entry.fence,
            fingerprint: entry.fingerprint.clone(),
            state: match &entry.state {
                State::InProgress { lease_until } => RecordState::InProgress {
                    lease_expires_at: now.wall_at(*lease_until),
                },
                State::Completed {
                    completed_at,
                    keep_until,
                    output,
                    ..
                } => RecordState::Completed {
                    completed_at: *completed_at,
                    expires_at: now.wall_at(*keep_until),
                    output: output.clone(),
                },
            },
        }))
    }

    async fn effect(&self, key: &Key, effect: &str) -> Result<Option<EffectEntry>, StoreError> {
        let now = self.now();
        let map = self.map();
        Ok(map
            .effects
            .get(&(key.clone(), effect.to_owned()))
            .filter(|e| e.expires > now.mono)
            .map(|e| e.entry.clone()))
    }

    async fn record_effect(
        &self,
        key: &Key,
        fence: Fence,
        record: EffectRecord<'_>,
    ) -> Result<Fenced, StoreError> {
        let now = self.now();
        let mut map = self.map();
        map.purge_if_grown(now);
        let holds = matches!(
            map.records.get(key),
            Some(entry) if entry.fence == fence && matches!(entry.state, State::InProgress { .. })
        );
        if !holds {
            return Ok(Fenced::Lost);
        }
        let id = (key.clone(), record.effect.to_owned());
        if matches!(map.effects.get(&id), Some(e) if e.entry.state == EffectState::Done && e.expires > now.mono)
        {
            return Ok(Fenced::Lost);
        }
        map.effects.insert(
            id,
            Effect {
                entry: EffectEntry {
                    state: record.state,
                    output: record.output.map(<[u8]>::to_vec),
                    fence,
                },
                expires: now.mono + record.keep,
            },
        );
        Ok(Fenced::Applied)
    }

    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }

    fn abandon(&self, key: &Key, fence: Fence) {
        // Synchronous and cheap here, so the key is free at once.
        let _ = self.fenced(key, fence, free_unfinished);
    }
}

#[async_trait]
impl Purge for MemoryStore {
    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
        let now = self.now();
        Ok(self.map().purge(now, limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const DAY: Duration = Duration::from_secs(24 * 60 * 60);

    async fn claim(store: &MemoryStore, key: &Key, lease: Duration) -> Claim {
        store
            .claim(ClaimRequest {
                key,
                fingerprint: None,
                lease,
                token: None,
            })
            .await
            .unwrap()
    }

    /// A wall clock stepped a day forward (NTP, a resumed VM) does not free a live claim.
    #[tokio::test]
    async fn a_wall_clock_step_forward_does_not_free_a_live_claim() {
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let key = Key::new("live").unwrap();
        assert!(matches!(
            claim(&store, &key, Duration::from_secs(30)).await,
            Claim::Acquired { .. }
        ));
        clock.set_wall(clock.now() + DAY);
        assert!(matches!(
            claim(&store, &key, Duration::from_secs(30)).await,
            Claim::InProgress { .. }
        ));
        // Nor does it end a completed record's retention.
        let done = Key::new("done").unwrap();
        let Claim::Acquired { fence, .. } = claim(&store, &done, Duration::from_secs(30)).await
        else {
            panic!("acquire")
        };
        let completion = Completion {
            output: None,
            keep: Duration::from_secs(60),
        };
        let _ = store.complete(&done, fence, completion).await.unwrap();
        clock.set_wall(clock.now() + DAY);
        assert!(matches!(
            claim(&store, &done, Duration::from_secs(30)).await,
            Claim::Completed { .. }
        ));
    }

    /// A wall clock stepped back does not keep a dead claim: once its lease has run out in
    /// monotonic time, it is taken over.
    #[tokio::test]
    async fn a_wall_clock_step_back_does_not_keep_a_dead_claim() {
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let key = Key::new("dead").unwrap();
        let _ = claim(&store, &key, Duration::from_secs(30)).await;
        clock.advance(Duration::from_secs(31));
        clock.set_wall(clock.now() - DAY);
        assert!(matches!(
            claim(&store, &key, Duration::from_secs(30)).await,
            Claim::Acquired {
                taken_over: true,
                ..
            }
        ));
    }

    /// Journal entries count toward the automatic purge, so a store whose records stay few but
    /// whose journal keeps growing still sheds expired entries.
    #[tokio::test]
    async fn expired_journal_entries_are_purged_automatically() {
        let clock = ManualClock::new();
        let store = MemoryStore::with_clock(clock.clone());
        let key = Key::new("one-job").unwrap();
        let keep = Duration::from_secs(1);
        let mut peak = 0;
        for round in 0..20 {
            let Claim::Acquired { fence, .. } = store
                .claim(ClaimRequest {
                    key: &key,
                    fingerprint: None,
                    lease: Duration::from_secs(60),
                    token: None,
                })
                .await
                .unwrap()
            else {
                panic!("acquire");
            };
            for i in 0..500 {
                let effect = format!("effect-{round}-{i}");
                let record = EffectRecord {
                    effect: &effect,
                    state: EffectState::Done,
                    output: None,
                    keep,
                };
                assert_eq!(
                    store.record_effect(&key, fence, record).await.unwrap(),
                    Fenced::Applied
                );
            }
            let _ = store.release(&key, fence).await.unwrap();
            clock.advance(keep * 2);
            peak = peak.max(store.map().effects.len());
        }
        assert!(
            peak <= 2 * AUTO_PURGE_FLOOR + 500,
            "10,000 expired entries written, {peak} held at most"
        );
    }
}
