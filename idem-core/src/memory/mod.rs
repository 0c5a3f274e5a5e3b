//! The embedded in-memory store.

use async_trait::async_trait;
use crossbeam_utils::CachePadded;
use std::collections::HashMap;
use std::hash::RandomState;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use crate::clock::{Clock, SystemClock};
use crate::error::StoreError;
use crate::fingerprint::Fingerprint;
use crate::key::Key;
use crate::store::{
    Claim, ClaimRequest, Completion, EffectEntry, EffectRecord, EffectState, Fence, Fenced, Purge,
    Record, RecordState, Store,
};

mod table;

use table::{hash_key, Record as Stored, Table};

/// The keyed hash of every `MemoryStore` in the process (SipHash, randomly keyed: keys may come
/// from clients, as with the HTTP layer).
fn hasher() -> &'static RandomState {
    static HASHER: std::sync::OnceLock<RandomState> = std::sync::OnceLock::new();
    HASHER.get_or_init(RandomState::new)
}

/// Shards (each its own lock) a store's keys are spread over, by hash.
const SHARDS: usize = 64;

/// Shards smaller than this (records and journal entries together) are never purged
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

struct Inner {
    /// Zero bytes that align the store as a [`CachePadded`] value, so its fields (read by every
    /// step) start a cache line apart from the `Arc`'s reference counts, which every fresh call
    /// writes ([`Store::shared`], for the body's context) from whichever thread it runs on.
    /// Sharing one line, two threads would take it from each other on every call.
    _apart: [CachePadded<()>; 0],
    /// This store, for [`Store::shared`] called on a shared handle.
    me: std::sync::Weak<Inner>,
    clock: Box<dyn Clock>,
    /// Hashes keys for the shard choice and the shards' indexes: [`hasher`], one for every
    /// `MemoryStore` of the process, so a key remembers its hash across a call's steps.
    hasher: &'static RandomState,
    /// Each on cache lines of its own, so that threads working on two shards do not take a
    /// line from each other.
    shards: Box<[CachePadded<Mutex<Shard>>]>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// The records and journal entries of the keys that hash to one shard.
struct Shard {
    /// The next fence: counts up by [`SHARDS`] from the shard's index, so no two records of the
    /// store share a fence, and (a key always hashing to the same shard) a key that is released
    /// (its record deleted) and claimed again still gets a larger fence than any earlier run of it.
    next_fence: u64,
    records: Table,
    effects: HashMap<(Key, String), Effect>,
    purge_at: usize,
}

#[derive(Debug, Clone)]
struct Effect {
    entry: EffectEntry,
    /// Monotonic nanoseconds (see [`Now`]) at which the entry expires.
    expires: u64,
}

/// The time of one store step: the monotonic time (nanoseconds on the store's clock), to
/// decide, and the wall clock, to report. Deadlines are kept in monotonic time, so a step of the
/// wall clock moves none of them. The wall clock is read only when a step reports a time: a
/// duplicate's claim reports the stored completion time, and a renewal reports none.
#[derive(Clone, Copy)]
struct Now<'c> {
    mono: u64,
    clock: &'c dyn Clock,
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The latest time a store reports (a deadline too far out to name is reported as this).
fn far_future() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_799) // 9999-12-31T23:59:59Z
}

impl Now<'_> {
    /// A deadline `after` from now.
    fn after(self, after: Duration) -> u64 {
        self.mono.saturating_add(nanos(after))
    }

    /// The wall-clock time at which the monotonic time will be (or was) `mono`.
    fn wall_at(self, mono: u64) -> SystemTime {
        let wall = self.clock.now();
        if mono >= self.mono {
            let ahead = Duration::from_nanos(mono - self.mono);
            wall.checked_add(ahead).unwrap_or_else(far_future)
        } else {
            let behind = Duration::from_nanos(self.mono - mono);
            wall.checked_sub(behind).unwrap_or(SystemTime::UNIX_EPOCH)
        }
    }

    /// The wall clock as nanoseconds since the Unix epoch (negative before it), saturating.
    fn wall_nanos(self) -> i64 {
        match self.clock.now().duration_since(SystemTime::UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_nanos()).unwrap_or(i64::MAX),
            Err(before) => i64::try_from(before.duration().as_nanos()).map_or(i64::MIN, |n| -n),
        }
    }
}

fn wall_from_nanos(nanos: i64) -> SystemTime {
    let magnitude = Duration::from_nanos(nanos.unsigned_abs());
    if nanos >= 0 {
        SystemTime::UNIX_EPOCH + magnitude
    } else {
        SystemTime::UNIX_EPOCH - magnitude
    }
}

impl Stored {
    fn is_expired(&self, now: Now<'_>) -> bool {
        self.until <= now.mono
    }

    fn completed_at(&self) -> SystemTime {
        wall_from_nanos(self.done_wall)
    }
}

fn fingerprints_differ(stored: Option<&str>, requested: Option<&Fingerprint>) -> bool {
    matches!((stored, requested), (Some(a), Some(b)) if a != b.as_str())
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> MemoryStore {
        MemoryStore::with_clock(SystemClock)
    }

    /// An empty store on the given clock, e.g. a [`ManualClock`](crate::clock::ManualClock)
    /// to test lease expiry without sleeping.
    pub fn with_clock(clock: impl Clock + 'static) -> MemoryStore {
        let shards = (0..SHARDS)
            .map(|index| {
                CachePadded::new(Mutex::new(Shard {
                    next_fence: SHARDS as u64 + index as u64,
                    records: Table::default(),
                    effects: HashMap::new(),
                    purge_at: AUTO_PURGE_FLOOR,
                }))
            })
            .collect();
        MemoryStore {
            inner: Arc::new_cyclic(|me| Inner {
                _apart: [],
                me: me.clone(),
                clock: Box::new(clock),
                hasher: hasher(),
                shards,
            }),
        }
    }

    /// How many records are held, expired ones included.
    pub fn len(&self) -> usize {
        (0..SHARDS).map(|i| self.inner.lock(i).records.len()).sum()
    }

    /// Whether no records are held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
fn free_unfinished(record: &mut Stored) -> After {
    if record.is_completed() {
        After::Refuse
    } else {
        After::Remove
    }
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::new()
    }
}

impl Shard {
    /// Records and journal entries held, expired ones included.
    fn size(&self) -> usize {
        self.records.len() + self.effects.len()
    }

    /// Purges everything expired once the shard has doubled since its last purge, so memory
    /// stays bounded by the live entries at an amortized O(1) per write.
    fn purge_if_grown(&mut self, now: Now<'_>, hasher: &RandomState) {
        if self.size() >= self.purge_at {
            self.purge(now, (usize::MAX, usize::MAX), hasher);
        }
    }

    /// Deletes up to `limits.0` expired records and up to `limits.1` expired journal entries;
    /// returns how many of each.
    fn purge(
        &mut self,
        now: Now<'_>,
        limits: (usize, usize),
        hasher: &RandomState,
    ) -> (usize, usize) {
        let records = self
            .records
            .remove_where(limits.0, hasher, |r| r.is_expired(now));
        let effects = remove_expired(&mut self.effects, limits.1, |e| e.expires <= now.mono);
        self.purge_at = (self.size() * 2).max(AUTO_PURGE_FLOOR);
        (records, effects)
    }
}

/// Removes up to `limit` entries of `map` for which `expired` holds; returns how many.
fn remove_expired<K, V>(
    map: &mut HashMap<K, V>,
    limit: usize,
    expired: impl Fn(&V) -> bool,
) -> usize
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
    before - map.len()
}

/// The store's steps, each one critical section of one shard. The `Store` impls (of
/// `MemoryStore` and of `Inner`, the handle `shared` gives out) call these.
impl Inner {
    fn lock(&self, shard: usize) -> MutexGuard<'_, Shard> {
        // A panic while holding the lock cannot leave a record half-written (each step replaces
        // whole records), so a poisoned lock is safe to keep using.
        self.shards[shard].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The hash of `key` and its shard, locked.
    fn shard(&self, key: &Key) -> (u64, MutexGuard<'_, Shard>) {
        let hash = key.memory_hash(|key| hash_key(self.hasher, key));
        // The index uses the low bits (slot) and the top seven (tag); the shard takes others.
        (hash, self.lock((hash >> 48) as usize % SHARDS))
    }

    fn now(&self) -> Now<'_> {
        let clock = &*self.clock;
        Now {
            mono: nanos(clock.monotonic()),
            clock,
        }
    }

    /// Applies `f` to the record for `key` if it holds `fence`, in one critical section.
    fn fenced(&self, key: &Key, fence: Fence, f: impl FnOnce(&mut Stored) -> After) -> Fenced {
        let (hash, mut shard) = self.shard(key);
        let Some(at) = shard.records.find(hash, key) else {
            return Fenced::Lost;
        };
        let record = shard.records.get_mut(at);
        if record.fence != fence.0 {
            return Fenced::Lost;
        }
        match f(record) {
            After::Keep => Fenced::Applied,
            After::Remove => {
                shard.records.remove(hash, at);
                Fenced::Applied
            }
            After::Refuse => Fenced::Lost,
        }
    }

    fn claim(&self, request: ClaimRequest<'_>) -> Claim {
        let now = self.now();
        let hasher = self.hasher;
        let (hash, mut shard) = self.shard(request.key);
        shard.purge_if_grown(now, hasher);
        let found = shard.records.find(hash, request.key);
        let taken_over = match found {
            None => false,
            Some(at) => {
                let record = shard.records.get(at);
                if record.is_expired(now) {
                    true
                } else {
                    return settled(record, request, now);
                }
            }
        };
        let fence = shard.next_fence;
        shard.next_fence += SHARDS as u64;
        let lease_until = now.after(request.lease);
        let record = Stored::claimed(
            request.key,
            request.fingerprint.map(Fingerprint::as_str),
            request.token.map(|t| t.0),
            fence,
            lease_until,
        );
        match found {
            Some(at) => shard.records.replace(at, record),
            None => shard.records.insert(hash, record),
        }
        // The wall clock is read outside the shard's critical section.
        drop(shard);
        Claim::Acquired {
            fence: Fence(fence),
            lease_expires_at: now.wall_at(lease_until),
            taken_over,
        }
    }

    fn complete(&self, key: &Key, fence: Fence, completion: Completion<'_>) -> Fenced {
        let now = self.now();
        // Read before the shard's critical section: all but a repeated completion need it.
        let wall = now.wall_nanos();
        self.fenced(key, fence, |record| {
            // A repeated completion keeps the first completion time.
            let (done, done_wall) = if record.is_completed() {
                (record.done, record.done_wall)
            } else {
                (now.mono, wall)
            };
            let until = done.saturating_add(nanos(completion.keep));
            record.complete(done, done_wall, until, completion.output);
            After::Keep
        })
    }

    fn release(&self, key: &Key, fence: Fence) -> Fenced {
        self.fenced(key, fence, free_unfinished)
    }

    fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Fenced {
        let now = self.now();
        self.fenced(key, fence, |record| {
            if record.is_completed() {
                After::Refuse
            } else {
                record.until = now.after(lease);
                After::Keep
            }
        })
    }

    fn get(&self, key: &Key) -> Option<Record> {
        let now = self.now();
        let (hash, shard) = self.shard(key);
        shard.records.find(hash, key).map(|at| {
            let record = shard.records.get(at);
            Record {
                key: key.clone(),
                fence: Fence(record.fence),
                fingerprint: record.fingerprint().map(Fingerprint::from_stored),
                state: if record.is_completed() {
                    RecordState::Completed {
                        completed_at: record.completed_at(),
                        expires_at: now.wall_at(record.until),
                        output: record.output().map(<[u8]>::to_vec),
                    }
                } else {
                    RecordState::InProgress {
                        lease_expires_at: now.wall_at(record.until),
                    }
                },
            }
        })
    }

    fn effect(&self, key: &Key, effect: &str) -> Option<EffectEntry> {
        let now = self.now();
        let (_, shard) = self.shard(key);
        shard
            .effects
            .get(&(key.clone(), effect.to_owned()))
            .filter(|e| e.expires > now.mono)
            .map(|e| e.entry.clone())
    }

    fn record_effect(&self, key: &Key, fence: Fence, record: EffectRecord<'_>) -> Fenced {
        let now = self.now();
        let (hash, mut shard) = self.shard(key);
        shard.purge_if_grown(now, self.hasher);
        let holds = shard.records.find(hash, key).is_some_and(|at| {
            let held = shard.records.get(at);
            held.fence == fence.0 && !held.is_completed()
        });
        if !holds {
            return Fenced::Lost;
        }
        let id = (key.clone(), record.effect.to_owned());
        if matches!(shard.effects.get(&id), Some(e) if e.entry.state == EffectState::Done && e.expires > now.mono)
        {
            return Fenced::Lost;
        }
        shard.effects.insert(
            id,
            Effect {
                entry: EffectEntry {
                    state: record.state,
                    output: record.output.map(<[u8]>::to_vec),
                    fence,
                },
                expires: now.after(record.keep),
            },
        );
        Fenced::Applied
    }

    fn abandon(&self, key: &Key, fence: Fence) {
        // Synchronous and cheap here, so the key is free at once.
        let _ = self.fenced(key, fence, free_unfinished);
    }
}

/// What a claim of a live record gets: the caller's own claim again, a mismatch, the other
/// run's lease, or the completion.
fn settled(record: &Stored, request: ClaimRequest<'_>, now: Now<'_>) -> Claim {
    if !record.is_completed()
        && request.token.is_some()
        && record.token() == request.token.map(|t| t.0)
    {
        // The caller's own claim, sent again: it holds the key.
        return Claim::Acquired {
            fence: Fence(record.fence),
            lease_expires_at: now.wall_at(record.until),
            taken_over: false,
        };
    }
    if fingerprints_differ(record.fingerprint(), request.fingerprint) {
        return Claim::Mismatch;
    }
    if record.is_completed() {
        Claim::Completed {
            completed_at: record.completed_at(),
            output: record.output().map(<[u8]>::to_vec),
        }
    } else {
        Claim::InProgress {
            lease_expires_at: now.wall_at(record.until),
        }
    }
}

#[async_trait]
impl Purge for MemoryStore {
    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
        Ok(self.inner.purge_expired(limit))
    }
}

impl Inner {
    fn purge_expired(&self, limit: usize) -> u64 {
        let now = self.now();
        // What each kind may still delete.
        let (mut records, mut effects) = (limit, limit);
        for shard in 0..SHARDS {
            if records == 0 && effects == 0 {
                break;
            }
            let (r, e) = self.lock(shard).purge(now, (records, effects), self.hasher);
            records -= r;
            effects -= e;
        }
        ((limit - records) + (limit - effects)) as u64
    }
}

/// The `Store` impl of a type whose `$inner` (an expression of `self`) is the [`Inner`], and
/// whose `$shared` is an `Arc` of it: `MemoryStore`, and `Inner` itself (what `shared` hands
/// out, so sharing a store allocates nothing).
macro_rules! store_impl {
    ($ty:ty, |$this:ident| inner: $inner:expr, shared: $shared:expr) => {
        // Not offered in "the trait is implemented for" hints, which would show this macro; the
        // `Store` trait's own message names `MemoryStore`.
        #[diagnostic::do_not_recommend]
        #[async_trait]
        impl Store for $ty {
            async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
                let $this = self;
                Ok(Inner::claim($inner, request))
            }
            async fn complete(
                &self,
                key: &Key,
                fence: Fence,
                completion: Completion<'_>,
            ) -> Result<Fenced, StoreError> {
                let $this = self;
                Ok(Inner::complete($inner, key, fence, completion))
            }
            async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
                let $this = self;
                Ok(Inner::release($inner, key, fence))
            }
            async fn renew(
                &self,
                key: &Key,
                fence: Fence,
                lease: Duration,
            ) -> Result<Fenced, StoreError> {
                let $this = self;
                Ok(Inner::renew($inner, key, fence, lease))
            }
            async fn get(&self, key: &Key) -> Result<Option<Record>, StoreError> {
                let $this = self;
                Ok(Inner::get($inner, key))
            }
            async fn effect(
                &self,
                key: &Key,
                effect: &str,
            ) -> Result<Option<EffectEntry>, StoreError> {
                let $this = self;
                Ok(Inner::effect($inner, key, effect))
            }
            async fn record_effect(
                &self,
                key: &Key,
                fence: Fence,
                record: EffectRecord<'_>,
            ) -> Result<Fenced, StoreError> {
                let $this = self;
                Ok(Inner::record_effect($inner, key, fence, record))
            }
            fn shared(&self) -> Arc<dyn Store> {
                let $this = self;
                $shared
            }
            fn abandon(&self, key: &Key, fence: Fence) {
                let $this = self;
                Inner::abandon($inner, key, fence)
            }
        }
    };
}

store_impl!(MemoryStore, |this| inner: &this.inner, shared: this.inner.clone());
store_impl!(Inner, |this| inner: this, shared: this.me.upgrade().expect("a store's handles keep it alive"));

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
            let held: usize = (0..SHARDS).map(|i| store.inner.lock(i).effects.len()).sum();
            peak = peak.max(held);
        }
        assert!(
            peak <= 2 * AUTO_PURGE_FLOOR + 500,
            "10,000 expired entries written, {peak} held at most"
        );
    }
}
