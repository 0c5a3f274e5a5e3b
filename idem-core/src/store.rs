//! The storage contract: the claim lifecycle in one small trait, and the capabilities layered
//! on it (the effect journal as provided methods, [`Purge`] as a trait of its own).

use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::error::{Operation, StoreError};
use crate::fingerprint::Fingerprint;
use crate::key::Key;

/// A fencing token: a number that grows every time a key is claimed, including every takeover.
///
/// A run carries its token into `complete`, `release` and `renew`; a store applies those only
/// while the record still holds that token, so a run whose claim was taken over cannot overwrite
/// the newer run's record. Tokens are never reused for a key, not even after the record was
/// released or purged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(pub u64);

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Whether a fenced write applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Fenced {
    /// The record held the caller's fence; the write took effect.
    Applied,
    /// The record is gone or holds another fence (a newer run took it over); nothing changed.
    Lost,
}

/// What a claim asks for.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    /// The key to claim.
    pub key: &'a Key,
    /// The inputs' fingerprint, when the handler declares one.
    pub fingerprint: Option<&'a Fingerprint>,
    /// How long the claim holds without renewal.
    pub lease: Duration,
    /// The call's own token, when it has one: a live claim made with the same token is the
    /// caller's own (a claim sent again because its answer was lost), and is acquired again.
    pub token: Option<ClaimToken>,
}

/// A random number one call claims with, so that a claim sent again after its answer was lost
/// (the connection broke after the store committed it) recognises the record it made, rather
/// than reporting its own run as another's in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClaimToken(pub u64);

impl ClaimToken {
    /// A fresh token: 64 random bits, so two calls anywhere share one with negligible
    /// probability. Each thread draws from its own generator, seeded from the standard
    /// library's randomly keyed hasher; every draw also mixes in the monotonic clock, so a
    /// process forked from another (which inherits the generator's state) still draws others.
    pub fn random() -> ClaimToken {
        ClaimToken::random_at(std::time::Instant::now())
    }

    /// [`random`](ClaimToken::random), mixing in `now` (a time the caller read anyway).
    pub(crate) fn random_at(now: std::time::Instant) -> ClaimToken {
        use std::cell::Cell;
        use std::hash::{BuildHasher, Hash, Hasher};
        use std::sync::OnceLock;
        use std::time::Instant;
        thread_local! {
            static STATE: Cell<u64> = Cell::new({
                let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
                hasher.write_u32(std::process::id());
                std::thread::current().id().hash(&mut hasher);
                hasher.finish()
            });
        }
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        let ticks = now.saturating_duration_since(origin).as_nanos() as u64;
        let state = STATE.with(|state| {
            let next = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
            state.set(next);
            next
        });
        ClaimToken(splitmix64(state ^ splitmix64(ticks)))
    }
}

/// SplitMix64's finalizer: a bijection of `u64` that spreads every input bit over the output.
fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The caller holds the key now and may run the work.
    Acquired {
        /// The caller's fencing token.
        fence: Fence,
        /// When the claim lapses unless renewed.
        lease_expires_at: SystemTime,
        /// Whether an earlier claim existed whose lease had lapsed, or whose completed record had
        /// outlived its `keep`, and was taken over.
        taken_over: bool,
    },
    /// Another run holds a live claim on the key.
    InProgress {
        /// When that claim lapses unless renewed.
        lease_expires_at: SystemTime,
    },
    /// The work was done already.
    Completed {
        /// When it completed.
        completed_at: SystemTime,
        /// The recorded output, for replay.
        output: Option<Vec<u8>>,
    },
    /// The key is held or completed with a different fingerprint.
    Mismatch,
}

/// What `complete` records.
#[derive(Debug, Clone, Copy)]
pub struct Completion<'a> {
    /// The encoded output to hand to duplicates, when the handler replays.
    pub output: Option<&'a [u8]>,
    /// How long the completed record is kept (and duplicates are recognised).
    pub keep: Duration,
}

/// The state of a stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// Claimed and running (or crashed, if the lease is in the past).
    InProgress {
        /// When the claim lapses unless renewed.
        lease_expires_at: SystemTime,
    },
    /// Done.
    Completed {
        /// When it completed.
        completed_at: SystemTime,
        /// When the record stops counting and may be purged.
        expires_at: SystemTime,
        /// The recorded output, for replay.
        output: Option<Vec<u8>>,
    },
}

impl RecordState {
    /// The state of a record as stores keep it: completed at `completed_at` (`None`: claimed,
    /// not completed), its lease or its keep ending at `expires_at`, with `output` when it is
    /// completed.
    pub fn from_stored(
        completed_at: Option<SystemTime>,
        expires_at: SystemTime,
        output: Option<Vec<u8>>,
    ) -> RecordState {
        match completed_at {
            None => RecordState::InProgress {
                lease_expires_at: expires_at,
            },
            Some(completed_at) => RecordState::Completed {
                completed_at,
                expires_at,
                output,
            },
        }
    }
}

/// A stored record, as [`Store::get`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The key.
    pub key: Key,
    /// The fence of the latest claim.
    pub fence: Fence,
    /// The fingerprint of the latest claim.
    pub fingerprint: Option<Fingerprint>,
    /// In progress or completed.
    pub state: RecordState,
}

/// Whether a journaled effect is known to have happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectState {
    /// The intent was recorded before running the effect (at-most-once); no completion yet.
    Started,
    /// The effect ran and its output is recorded. Final: never overwritten.
    Done,
}

/// A journal entry, as [`Store::effect`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectEntry {
    /// Started or done.
    pub state: EffectState,
    /// The recorded output (for `Done`).
    pub output: Option<Vec<u8>>,
    /// The fence of the run that wrote it.
    pub fence: Fence,
}

/// What [`Store::record_effect`] writes.
#[derive(Debug, Clone, Copy)]
pub struct EffectRecord<'a> {
    /// The effect's name within the key, e.g. `send-receipt`.
    pub effect: &'a str,
    /// Started or done.
    pub state: EffectState,
    /// The output to hand a retry (for `Done`).
    pub output: Option<&'a [u8]>,
    /// How long the entry is kept.
    pub keep: Duration,
}

/// Where idempotency records live: the claim lifecycle.
///
/// Each method is one atomic step for the backend: a single statement or a single critical
/// section, never a read followed by a separate write. The rules every store follows (and that
/// the shared conformance suite checks) are:
///
/// - `claim` on a key with no record, a record whose lease lapsed, or a completed record past
///   its `keep` returns [`Claim::Acquired`] with a fence greater than any earlier one for the key;
///   concurrent claims of one key acquire it exactly once.
/// - `claim` on a live claim made with the request's own token returns [`Claim::Acquired`]
///   with that claim's fence (the caller's own claim, sent again after its answer was lost).
/// - `claim` on another live claim returns [`Claim::InProgress`], on a completed record
///   [`Claim::Completed`] with its output, and on either with another fingerprint (both sides
///   having one) [`Claim::Mismatch`].
/// - `complete`, `release` and `renew` apply only while the record holds the caller's fence, and
///   say [`Fenced::Lost`] otherwise. `complete` of an already completed record with the same
///   fence applies again (so a retried completion is safe).
/// - `release` deletes an unfinished claim so the key is free at once; a completed record is
///   left as it is (and the release reports [`Fenced::Lost`]).
/// - The effect journal (the provided methods [`effect`](Store::effect) and
///   [`record_effect`](Store::record_effect), which a store with a journal overrides):
///   `record_effect` writes an entry for `(key, effect)` only while the key's record holds the
///   caller's fence and is not completed, never overwrites a `Done` entry, and outlives a
///   release of the key (so a retry sees what the failed run did).
///
/// Deleting expired records is a separate capability, [`Purge`]; running a handler inside a
/// database transaction another, [`TransactionalStore`](crate::TransactionalStore).
///
/// The trait is object safe: handlers take `&dyn Store` or `Arc<dyn Store>`, so backends swap
/// at run time without touching handlers.
#[async_trait]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an idem store",
    label = "this must evaluate to an idem store",
    note = "`store = ...` takes a value implementing `idem_core::Store` (such as `MemoryStore` or \
            `PgStore`), a reference to one, a `&dyn Store`, or an `Arc<dyn Store>`"
)]
pub trait Store: fmt::Debug + Send + Sync {
    /// Claims `request.key` for one run, atomically.
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError>;

    /// Marks the key completed, if it still holds `fence`.
    async fn complete(
        &self,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, StoreError>;

    /// Frees the key (after a handler error or panic), if it still holds `fence`.
    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError>;

    /// Extends a live claim to `lease` from now, if the key still holds `fence`.
    async fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Result<Fenced, StoreError>;

    /// Reads the record for `key`, expired or not.
    async fn get(&self, key: &Key) -> Result<Option<Record>, StoreError>;

    /// A handle to this same store that the runtime may keep beyond the borrow it was given:
    /// the current call's [journal](crate::journal) reaches the store through it. Stores are
    /// cheap handles, so this is `Arc::new(self.clone())`.
    fn shared(&self) -> Arc<dyn Store>;

    /// Called, without waiting, when a claimed run's future is dropped before it finished (the
    /// caller timed out or went away). A store should free the key promptly if it can do so
    /// without blocking, for example by spawning the release on the current runtime. The default
    /// does nothing: the key is then free when the lease lapses, at most one lease later.
    fn abandon(&self, key: &Key, fence: Fence) {
        let _ = (key, fence);
    }

    /// Called, without waiting, when a claim's caller went away before the claim was answered:
    /// the store may have applied it (or may still), holding the key for nobody until its lease
    /// lapses. A store should undo such a claim if it can. The default sends the claim again
    /// with its token on a task of the current runtime and releases it if acquired
    /// ([`reclaim_and_release_in_background`]): right for a store that applies one caller's
    /// requests in the order they were sent. A store that knows better (PostgreSQL's batches
    /// skip a claim whose caller left before it was sent, and release one acquired after)
    /// overrides it.
    fn abandon_claim(&self, request: ClaimRequest<'_>) {
        reclaim_and_release_in_background(self.shared(), request);
    }

    /// Reads the journal entry of `effect` under `key`, unless it expired. The default says the
    /// store keeps no journal.
    async fn effect(&self, key: &Key, effect: &str) -> Result<Option<EffectEntry>, StoreError> {
        let _ = (key, effect);
        Err(no_journal(self))
    }

    /// Writes a journal entry for `key`, if the key's record still holds `fence` and is in
    /// progress, and the entry is not already `Done`. One atomic step. The default says the
    /// store keeps no journal.
    async fn record_effect(
        &self,
        key: &Key,
        fence: Fence,
        record: EffectRecord<'_>,
    ) -> Result<Fenced, StoreError> {
        let _ = (key, fence, record);
        Err(no_journal(self))
    }
}

/// Releases `key`'s claim made with `fence` on a task of the current Tokio runtime, without
/// waiting: what a store's [`abandon`](Store::abandon) does when a release is the way to free a
/// key at once. Outside a runtime it does nothing (the key is free when its lease lapses); a
/// failure is logged.
pub fn release_in_background(store: Arc<dyn Store>, key: &Key, fence: Fence) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let key = key.clone();
    crate::pending::spawn(&runtime, async move {
        if let Err(e) = store.release(&key, fence).await {
            tracing::warn!(%key, error = %e, "releasing an abandoned claim failed; it lapses with its lease");
        }
    });
}

/// Undoes a claim whose caller went away before its answer (see [`Store::abandon_claim`]): on a
/// task of the current Tokio runtime, sends `request` again (a live claim with the request's
/// token is answered as the caller's own) and releases it if acquired. Outside a runtime it
/// does nothing (the key is free when its lease lapses); a failure is logged.
pub fn reclaim_and_release_in_background(store: Arc<dyn Store>, request: ClaimRequest<'_>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let key = request.key.clone();
    let fingerprint = request.fingerprint.cloned();
    let (lease, token) = (request.lease, request.token);
    crate::pending::spawn(&runtime, async move {
        let request = ClaimRequest {
            key: &key,
            fingerprint: fingerprint.as_ref(),
            lease,
            token,
        };
        match store.claim(request).await {
            Ok(Claim::Acquired { fence, .. }) => {
                tracing::info!(%key, "a claim's caller went away; releasing it");
                if let Err(e) = store.release(&key, fence).await {
                    tracing::warn!(%key, error = %e, "releasing an abandoned claim failed; it lapses with its lease");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(
                %key,
                error = %e,
                "a claim's caller went away and it could not be undone; the key is free again \
                 when its lease lapses"
            ),
        }
    });
}

fn no_journal<S: fmt::Debug + ?Sized>(store: &S) -> StoreError {
    StoreError::msg(format!(
        "{store:?} keeps no effect journal; use a store that does (MemoryStore, PgStore)"
    ))
    .during(Operation::JournalRead)
}

/// Deleting expired records: a capability of stores that keep them until told otherwise.
///
/// Written once for every store: [`purge_all_expired`](Purge::purge_all_expired) loops over
/// bounded batches, and [`spawn_purger`](Purge::spawn_purger) runs it periodically (with the
/// loops of [`crate::purge`], which the work queue's purger uses too).
#[async_trait]
pub trait Purge: Store {
    /// Deletes up to `limit` expired records (lapsed claims, completions past their `keep`) and
    /// up to `limit` expired journal entries, and returns how many it deleted.
    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError>;

    /// Deletes every expired record, `batch` at a time (each batch one short step, so no long
    /// lock), and returns how many it deleted.
    async fn purge_all_expired(&self, batch: usize) -> Result<u64, StoreError> {
        self.purge_all_expired_reporting(batch, &mut |_| {}).await
    }

    /// [`purge_all_expired`](Purge::purge_all_expired), calling `on_batch` with the count of
    /// each batch that deleted something, as it goes (`idem purge` prints them).
    ///
    /// Both drains run this one, so a store that drains its own way (PostgreSQL starts each
    /// batch where the one before ended) overrides this method, not `purge_all_expired`.
    async fn purge_all_expired_reporting(
        &self,
        batch: usize,
        on_batch: &mut (dyn FnMut(u64) + Send),
    ) -> Result<u64, StoreError> {
        crate::purge::drain_reporting(batch, |limit| self.purge_expired(limit), on_batch).await
    }

    /// Runs [`purge_all_expired`](Purge::purge_all_expired) every `every` on the current Tokio
    /// runtime, until the returned handle is aborted. Failures are logged and retried at the
    /// next tick.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    fn spawn_purger(&self, every: Duration, batch: usize) -> tokio::task::JoinHandle<()>
    where
        Self: Clone + Sized + 'static,
    {
        let store = self.clone();
        crate::purge::spawn_every(every, "expired idem records", move || {
            let store = store.clone();
            async move { store.purge_all_expired(batch).await }
        })
    }
}

macro_rules! delegate_store {
    ($($ty:ty),*) => {$(
        // Each step hands back the inner store's future as it is: written `async`, a step
        // would box a second future around the one the inner store boxed.
        #[diagnostic::do_not_recommend]
        impl<S: Store + ?Sized> Store for $ty {
            fn claim<'a, 'b, 'f>(&'a self, request: ClaimRequest<'b>) -> StepFuture<'f, Claim>
            where
                'a: 'f,
                'b: 'f,
                Self: 'f,
            {
                (**self).claim(request)
            }
            fn complete<'a, 'b, 'c, 'f>(
                &'a self,
                key: &'b Key,
                fence: Fence,
                completion: Completion<'c>,
            ) -> StepFuture<'f, Fenced>
            where
                'a: 'f,
                'b: 'f,
                'c: 'f,
                Self: 'f,
            {
                (**self).complete(key, fence, completion)
            }
            fn release<'a, 'b, 'f>(&'a self, key: &'b Key, fence: Fence) -> StepFuture<'f, Fenced>
            where
                'a: 'f,
                'b: 'f,
                Self: 'f,
            {
                (**self).release(key, fence)
            }
            fn renew<'a, 'b, 'f>(
                &'a self,
                key: &'b Key,
                fence: Fence,
                lease: Duration,
            ) -> StepFuture<'f, Fenced>
            where
                'a: 'f,
                'b: 'f,
                Self: 'f,
            {
                (**self).renew(key, fence, lease)
            }
            fn get<'a, 'b, 'f>(&'a self, key: &'b Key) -> StepFuture<'f, Option<Record>>
            where
                'a: 'f,
                'b: 'f,
                Self: 'f,
            {
                (**self).get(key)
            }
            fn shared(&self) -> Arc<dyn Store> {
                (**self).shared()
            }
            fn abandon(&self, key: &Key, fence: Fence) {
                (**self).abandon(key, fence)
            }
            fn abandon_claim(&self, request: ClaimRequest<'_>) {
                (**self).abandon_claim(request)
            }
            fn effect<'a, 'b, 'c, 'f>(
                &'a self,
                key: &'b Key,
                effect: &'c str,
            ) -> StepFuture<'f, Option<EffectEntry>>
            where
                'a: 'f,
                'b: 'f,
                'c: 'f,
                Self: 'f,
            {
                (**self).effect(key, effect)
            }
            fn record_effect<'a, 'b, 'c, 'f>(
                &'a self,
                key: &'b Key,
                fence: Fence,
                record: EffectRecord<'c>,
            ) -> StepFuture<'f, Fenced>
            where
                'a: 'f,
                'b: 'f,
                'c: 'f,
                Self: 'f,
            {
                (**self).record_effect(key, fence, record)
            }
        }

        #[async_trait]
        impl<S: Purge + ?Sized> Purge for $ty {
            async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
                (**self).purge_expired(limit).await
            }
            async fn purge_all_expired_reporting(
                &self,
                batch: usize,
                on_batch: &mut (dyn FnMut(u64) + Send),
            ) -> Result<u64, StoreError> {
                (**self).purge_all_expired_reporting(batch, on_batch).await
            }
        }
    )*};
}

/// The future of one [`Store`] step, as `async-trait` boxes it.
type StepFuture<'f, T> = crate::boxed::BoxFuture<'f, Result<T, StoreError>>;

delegate_store!(&S, Arc<S>, Box<S>);
