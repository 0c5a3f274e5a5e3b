//! One idempotent call, built step by step: the public face of the runtime. The `#[idempotent]`
//! attribute expands to a [`Call`]; it can also be used directly, for work that is not a function.
//!
//! This file only builds calls; [`crate::execute`] runs them in lease mode and
//! [`crate::transactional`] in a transaction.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::codec::{Codec, JsonReplay, NoReplay, Replayable};
use crate::error::Error;
use crate::execute::{execute, Spec};
use crate::fingerprint::Fingerprint;
use crate::key::{InvalidKey, Key};
use crate::outcome::Outcome;
use crate::store::Store;
use crate::transactional::{execute_in_transaction, handoff, TransactionalStore};

/// A boxed, `Send` future borrowing for `'a`, as transactional work returns it.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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
///
/// `S` is the store's type: any [`Store`] (a concrete one, or `dyn Store`) for lease mode, a
/// [`TransactionalStore`] for [`run_in_transaction`](Call::run_in_transaction).
#[derive(Debug)]
pub struct Call<'s, S: ?Sized = dyn Store> {
    pub(crate) store: &'s S,
    pub(crate) spec: Spec,
}

impl<'s, S: Store + ?Sized> Call<'s, S> {
    /// A call of the work named `key` against `store`. An invalid key is reported when the call
    /// runs, as [`Error::InvalidKey`].
    pub fn new<K>(store: &'s S, key: K) -> Call<'s, S>
    where
        K: TryInto<Key>,
        InvalidKey: From<K::Error>,
    {
        Call::from_rendered(store, key.try_into().map_err(InvalidKey::from))
    }

    pub(crate) fn from_rendered(store: &'s S, key: Result<Key, InvalidKey>) -> Call<'s, S> {
        Call {
            store,
            spec: Spec::new(key),
        }
    }

    /// The scope of the call's key (default [`DEFAULT_SCOPE`](crate::DEFAULT_SCOPE)): the same
    /// key text in two scopes names two
    /// records, so two kinds of work with one template never share one. `#[idempotent]` scopes
    /// by the function's name unless given `scope = ".."`. An invalid scope (over 128 bytes,
    /// control characters) is reported when the call runs, as [`Error::InvalidKey`].
    pub fn scope(mut self, scope: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        self.spec.key = self.spec.key.and_then(|key| key.with_scope(scope));
        self
    }

    /// Names the handler in the call's `tracing` span.
    pub fn name(mut self, name: &'static str) -> Self {
        self.spec.name = name;
        self
    }

    /// How long the claim holds without renewal (default [`DEFAULT_LEASE`](crate::DEFAULT_LEASE)).
    /// It is renewed every third of a lease while the work runs ([`crate::lease`]), so a live run
    /// is never taken over; a crashed one is taken over once its lease lapses.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.spec.lease = lease;
        self
    }

    /// How long a completed record is kept, and duplicates recognised (default
    /// [`DEFAULT_KEEP`](crate::DEFAULT_KEEP)).
    pub fn keep(mut self, keep: Duration) -> Self {
        self.spec.keep = keep;
        self
    }

    /// On finding the work in progress elsewhere, wait up to `wait` for it to finish (and return
    /// its outcome as a duplicate) or to be released or lapse (and then take it over).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.spec.wait = Some(wait);
        self
    }

    /// The inputs' fingerprint: a later call with this key and another fingerprint is refused
    /// with [`Error::KeyReused`].
    pub fn fingerprint(mut self, fingerprint: Fingerprint) -> Self {
        self.spec.fingerprint = Ok(Some(fingerprint));
        self
    }

    /// Runs `work` if this call claims the key. Duplicates get no value back.
    pub fn run<T, E, F>(
        self,
        work: F,
    ) -> impl Future<Output = Result<Outcome<T>, Error<E>>> + use<'s, S, T, E, F>
    where
        F: Future<Output = Result<T, E>>,
    {
        self.run_with(NoReplay, work)
    }

    /// Runs `work` if this call claims the key, storing its `Ok` value (as JSON) so duplicates
    /// get it back in [`Outcome::Duplicate`].
    pub fn run_replay<T, E, F>(
        self,
        work: F,
    ) -> impl Future<Output = Result<Outcome<T>, Error<E>>> + use<'s, S, T, E, F>
    where
        T: Replayable,
        F: Future<Output = Result<T, E>>,
    {
        self.run_with(JsonReplay, work)
    }

    /// Runs `work` if this call claims the key, storing its `Ok` value with `codec` (for
    /// example raw bytes, for a value that is bytes already) so duplicates get it back.
    pub fn run_with<T, E, F, C>(
        self,
        codec: C,
        work: F,
    ) -> impl Future<Output = Result<Outcome<T>, Error<E>>> + use<'s, S, T, E, F, C>
    where
        F: Future<Output = Result<T, E>>,
        C: Codec<T>,
    {
        execute(self.store, self.spec, codec, work)
    }
}

impl<S: TransactionalStore + ?Sized> Call<'_, S> {
    /// Runs `work` inside one transaction of the call's store that also holds the claim and
    /// records the completion: they commit together when `work` returns `Ok`, and roll back
    /// together on `Err`, a panic, or a dropped future. `work` receives the open transaction and
    /// returns a boxed future (the form that stays `Send` for borrowed transactions):
    ///
    /// ```text
    /// Call::new(&store, "credit:7")
    ///     .run_in_transaction(|tx| Box::pin(async move {
    ///         sqlx::query("UPDATE accounts SET credits = credits + 100 WHERE id = 42")
    ///             .execute(&mut **tx).await?;
    ///         Ok::<_, sqlx::Error>(())
    ///     }))
    ///     .await
    /// ```
    ///
    /// See [`TransactionalStore`] for when to choose this over lease mode.
    pub async fn run_in_transaction<T, E, F>(self, work: F) -> Result<Outcome<T>, Error<E>>
    where
        F: for<'t> FnOnce(&'t mut S::Transaction) -> BoxFuture<'t, Result<T, E>>,
    {
        self.run_in_transaction_with(NoReplay, work).await
    }

    /// [`run_in_transaction`](Call::run_in_transaction), storing the `Ok` value for
    /// duplicates as [`run_replay`](Call::run_replay) does.
    pub async fn run_in_transaction_replay<T, E, F>(self, work: F) -> Result<Outcome<T>, Error<E>>
    where
        T: Replayable,
        F: for<'t> FnOnce(&'t mut S::Transaction) -> BoxFuture<'t, Result<T, E>>,
    {
        self.run_in_transaction_with(JsonReplay, work).await
    }

    /// [`run_in_transaction`](Call::run_in_transaction), storing the `Ok` value with `codec`.
    pub async fn run_in_transaction_with<T, E, F, C>(
        self,
        codec: C,
        work: F,
    ) -> Result<Outcome<T>, Error<E>>
    where
        C: Codec<T>,
        F: for<'t> FnOnce(&'t mut S::Transaction) -> BoxFuture<'t, Result<T, E>>,
    {
        let (sender, receiver) = handoff();
        let body = async move {
            let mut transaction = receiver.recv().await;
            let result = work(&mut transaction).await;
            (transaction, result)
        };
        execute_in_transaction(self.store, self.spec, codec, sender, body).await
    }
}
