//! One idempotent call: claim, run, renew, complete or release. The `#[idempotent]` attribute
//! expands to a [`Call`]; it can also be used directly, for work that is not a function.

use std::future::Future;
use std::pin::Pin;

/// A boxed, `Send` future borrowing for `'a`, as transactional work returns it.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
use std::time::Duration;

use tracing::Instrument;

use crate::codec::{Codec, JsonReplay, NoReplay, Replayable};
use crate::error::{CodecError, Error};
use crate::execute::{begin_in_transaction, catch_unwind, execute, TxBegun};
use crate::fingerprint::Fingerprint;
use crate::key::{InvalidKey, Key};
use crate::outcome::Outcome;
use crate::store::Store;
use crate::transactional::TransactionalStore;

/// The lease used when none is given: how long a claim holds without renewal.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How long a completed record is kept when no `keep` is given.
pub const DEFAULT_KEEP: Duration = Duration::from_secs(24 * 60 * 60);

/// One idempotent call, built step by step and then [`run`](Call::run).
///
/// ```
/// use idem_core::{Call, MemoryStore, Outcome};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = MemoryStore::new();
/// let first = Call::new(&store, "invoice-run:2026-11")
///     .run(async { Ok::<_, std::io::Error>(3) })
///     .await
///     .unwrap();
/// assert_eq!(first, Outcome::Executed(3));
/// let again = Call::new(&store, "invoice-run:2026-11")
///     .run(async { Ok::<_, std::io::Error>(3) })
///     .await
///     .unwrap();
/// assert!(again.is_duplicate());
/// # }
/// ```
#[derive(Debug)]
pub struct Call<'s> {
    pub(crate) store: &'s dyn Store,
    pub(crate) name: &'static str,
    pub(crate) key: Result<Key, InvalidKey>,
    pub(crate) fingerprint: Result<Option<Fingerprint>, CodecError>,
    pub(crate) lease: Duration,
    pub(crate) keep: Duration,
    pub(crate) wait: Option<Duration>,
}

impl<'s> Call<'s> {
    /// A call of the work named `key` against `store`. An invalid key is reported when the call
    /// runs, as [`Error::InvalidKey`].
    pub fn new<K>(store: &'s dyn Store, key: K) -> Call<'s>
    where
        K: TryInto<Key>,
        InvalidKey: From<K::Error>,
    {
        Call::from_rendered(store, key.try_into().map_err(InvalidKey::from))
    }

    /// A call whose key was rendered (and validated) already; used by `#[idempotent]`.
    #[doc(hidden)]
    pub fn from_rendered(store: &'s dyn Store, key: Result<Key, InvalidKey>) -> Call<'s> {
        Call {
            store,
            name: "idem::call",
            key,
            fingerprint: Ok(None),
            lease: DEFAULT_LEASE,
            keep: DEFAULT_KEEP,
            wait: None,
        }
    }

    /// Names the handler in the call's `tracing` span.
    pub fn name(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    /// How long the claim holds without renewal (default [`DEFAULT_LEASE`]). It is renewed every
    /// third of a lease while the work runs, so a live run is never taken over; a crashed one is
    /// taken over once its lease lapses.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long a completed record is kept, and duplicates recognised (default
    /// [`DEFAULT_KEEP`]).
    pub fn keep(mut self, keep: Duration) -> Self {
        self.keep = keep;
        self
    }

    /// On finding the work in progress elsewhere, wait up to `wait` for it to finish (and return
    /// its outcome as a duplicate) or to be released or lapse (and then take it over).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// The inputs' fingerprint: a later call with this key and another fingerprint is refused
    /// with [`Error::KeyReused`].
    pub fn fingerprint(mut self, fingerprint: Fingerprint) -> Self {
        self.fingerprint = Ok(Some(fingerprint));
        self
    }

    /// Like [`fingerprint`](Call::fingerprint), taking the builder's result as it comes.
    #[doc(hidden)]
    pub fn fingerprint_result(mut self, fingerprint: Result<Fingerprint, CodecError>) -> Self {
        self.fingerprint = fingerprint.map(Some);
        self
    }

    /// Runs `work` if this call claims the key. Duplicates get no value back.
    pub async fn run<T, E, F>(self, work: F) -> Result<Outcome<T>, Error<E>>
    where
        F: Future<Output = Result<T, E>>,
    {
        self.run_with(NoReplay, work).await
    }

    /// Runs `work` if this call claims the key, storing its `Ok` value (as JSON) so duplicates
    /// get it back in [`Outcome::Duplicate`].
    pub async fn run_replay<T, E, F>(self, work: F) -> Result<Outcome<T>, Error<E>>
    where
        T: Replayable,
        F: Future<Output = Result<T, E>>,
    {
        self.run_with(JsonReplay, work).await
    }

    /// Runs `work` inside one transaction of `store` that also holds the claim and records the
    /// completion: they commit together when `work` returns `Ok`, and roll back together on
    /// `Err`, a panic, or a dropped future. `work` receives the open transaction and returns a
    /// boxed future (the form that stays `Send` for borrowed transactions):
    ///
    /// ```text
    /// Call::new(&store, "credit:7")
    ///     .run_in_transaction(&store, |tx| Box::pin(async move {
    ///         sqlx::query("UPDATE accounts SET credits = credits + 100 WHERE id = 42")
    ///             .execute(&mut **tx).await?;
    ///         Ok::<_, sqlx::Error>(())
    ///     }))
    ///     .await
    /// ```
    ///
    /// The `store` given to [`Call::new`] is not used; pass the same one. See
    /// [`TransactionalStore`] for when to choose this over lease mode.
    pub async fn run_in_transaction<S, T, E, F>(
        self,
        store: &S,
        work: F,
    ) -> Result<Outcome<T>, Error<E>>
    where
        S: TransactionalStore + ?Sized,
        F: for<'t> FnOnce(&'t mut S::Transaction) -> BoxFuture<'t, Result<T, E>>,
    {
        self.run_in_transaction_with(store, NoReplay, work).await
    }

    /// [`run_in_transaction`](Call::run_in_transaction), storing the `Ok` value for
    /// duplicates as [`run_replay`](Call::run_replay) does.
    pub async fn run_in_transaction_replay<S, T, E, F>(
        self,
        store: &S,
        work: F,
    ) -> Result<Outcome<T>, Error<E>>
    where
        S: TransactionalStore + ?Sized,
        T: Replayable,
        F: for<'t> FnOnce(&'t mut S::Transaction) -> BoxFuture<'t, Result<T, E>>,
    {
        self.run_in_transaction_with(store, JsonReplay, work).await
    }

    async fn run_in_transaction_with<S, T, E, F, C>(
        self,
        store: &S,
        codec: C,
        work: F,
    ) -> Result<Outcome<T>, Error<E>>
    where
        S: TransactionalStore + ?Sized,
        C: Codec<T>,
        F: for<'t> FnOnce(&'t mut S::Transaction) -> BoxFuture<'t, Result<T, E>>,
    {
        let span = self.span();
        async move {
            match self.begin_in_transaction(store, codec).await? {
                TxBegun::Settled(outcome) => Ok(outcome),
                TxBegun::Claimed(mut transaction, pending) => {
                    let result = catch_unwind(pending.scope(work(&mut transaction))).await;
                    pending.finish(transaction, result).await
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Claims inside a new transaction of `store`; used by `#[idempotent(transaction = ..)]`,
    /// which runs the body in between and then calls [`TxPending::finish`], all inside
    /// [`span`](Call::span).
    #[doc(hidden)]
    pub async fn begin_in_transaction<'t, S, T, E, C>(
        self,
        store: &'t S,
        codec: C,
    ) -> Result<TxBegun<'t, S, T, C>, Error<E>>
    where
        S: TransactionalStore + ?Sized,
        C: Codec<T>,
    {
        begin_in_transaction(self, store, codec).await
    }

    async fn run_with<T, E, F, C>(self, codec: C, work: F) -> Result<Outcome<T>, Error<E>>
    where
        F: Future<Output = Result<T, E>>,
        C: Codec<T>,
    {
        let span = self.span();
        execute(self, codec, work).instrument(span).await
    }

    /// The call's span: one per call, named `idem`, carrying the key and (later) the outcome.
    #[doc(hidden)]
    pub fn span(&self) -> tracing::Span {
        let span = tracing::info_span!(
            "idem",
            handler = self.name,
            key = tracing::field::Empty,
            outcome = tracing::field::Empty,
            fence = tracing::field::Empty,
        );
        match &self.key {
            Ok(key) => span.record("key", key.as_str()),
            Err(invalid) => span.record("key", tracing::field::debug(invalid)),
        };
        span
    }
}
