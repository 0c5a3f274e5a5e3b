//! One idempotent call, built step by step: the public face of the runtime. The `#[idempotent]`
//! attribute expands to a [`Call`]; it can also be used directly, for work that is not a function.
//!
//! This file only builds calls; [`crate::execute`] runs them in lease mode and
//! [`crate::transactional`] in a transaction.

use std::future::Future;
use std::time::Duration;

use crate::boxed::BoxFuture;
use crate::codec::{Codec, JsonReplay, NoReplay, Replayable};
use crate::error::{Error, StoreError};
use crate::execute::{execute, Spec};
use crate::fingerprint::Fingerprint;
use crate::key::{InvalidKey, Key};
use crate::outcome::Outcome;
use crate::store::Store;
use crate::transactional::{execute_in_transaction, handoff, TransactionalStore};

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

    /// Runs `work` as [`run`](Call::run) does, detached from the caller: the call (its claim,
    /// `work` and its completion) runs in a task of its own on the current Tokio runtime, and
    /// the returned future only waits for its outcome. Dropping that future (a caller's
    /// timeout, a client that went away, an aborted task) leaves the work running to its end
    /// and its completion recorded, so the next delivery of the key finds it done (or in
    /// progress, while it runs) instead of running it again.
    ///
    /// Without detaching, a dropped call stops its work at the `.await` it was at and frees the
    /// key, so whatever the work did before that point is done again by the next delivery. Use
    /// this for work whose effects must not be cut in half, whose inputs it owns (`'static`).
    ///
    /// ```
    /// use idem_core::{Call, MemoryStore, Outcome};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = MemoryStore::new();
    /// let (started, finish) = (tokio::sync::oneshot::channel::<()>(), tokio::sync::oneshot::channel::<()>());
    /// let (started_tx, started_rx) = started;
    /// let (finish_tx, finish_rx) = finish;
    /// let call = Call::new(&store, "charge:7").run_detached(async move {
    ///     let _ = started_tx.send(());
    ///     finish_rx.await.ok(); // the work goes on after its caller gave up
    ///     Ok::<_, std::io::Error>(())
    /// });
    /// // The caller gives up once the work has started...
    /// let gave_up = tokio::select! {
    ///     _ = call => false,
    ///     _ = started_rx => true,
    /// };
    /// assert!(gave_up);
    /// // ... and the work still finishes, once: the retry waits for it and finds it done.
    /// finish_tx.send(()).unwrap();
    /// let retry = Call::new(&store, "charge:7")
    ///     .wait(Duration::from_secs(5))
    ///     .run(async { Ok::<_, std::io::Error>(()) })
    ///     .await
    ///     .unwrap();
    /// assert!(retry.is_duplicate());
    /// # }
    /// ```
    ///
    /// The cost is a task spawned per call. A panic in `work` resumes in the caller, as with
    /// [`run`](Call::run).
    ///
    /// # Panics
    ///
    /// When polled outside a Tokio runtime.
    pub fn run_detached<T, E, F>(
        self,
        work: F,
    ) -> impl Future<Output = Result<Outcome<T>, Error<E>>> + Send + 'static
    where
        F: Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        self.run_detached_with(NoReplay, work)
    }

    /// [`run_detached`](Call::run_detached), storing the `Ok` value (as JSON) for duplicates
    /// as [`run_replay`](Call::run_replay) does.
    pub fn run_detached_replay<T, E, F>(
        self,
        work: F,
    ) -> impl Future<Output = Result<Outcome<T>, Error<E>>> + Send + 'static
    where
        T: Replayable + Send + 'static,
        E: Send + 'static,
        F: Future<Output = Result<T, E>> + Send + 'static,
    {
        self.run_detached_with(JsonReplay, work)
    }

    /// [`run_detached`](Call::run_detached), storing the `Ok` value with `codec`.
    pub fn run_detached_with<T, E, F, C>(
        self,
        codec: C,
        work: F,
    ) -> impl Future<Output = Result<Outcome<T>, Error<E>>> + Send + 'static
    where
        F: Future<Output = Result<T, E>> + Send + 'static,
        C: Codec<T> + Send + Sync + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        // The task keeps the store through a handle of its own (the borrow ends here).
        let store = self.store.shared();
        let spec = self.spec;
        async move {
            let call = async move { execute(&*store, spec, codec, work).await };
            let task = crate::pending::spawn(
                &tokio::runtime::Handle::current(),
                tracing::Instrument::in_current_span(call),
            );
            match task.await {
                Ok(settled) => settled,
                Err(e) => match e.try_into_panic() {
                    Ok(panic) => std::panic::resume_unwind(panic),
                    Err(_) => Err(Error::Store(StoreError::msg(
                        "the detached call's task was cancelled (its runtime shut down); the \
                         work may or may not have finished",
                    ))),
                },
            }
        }
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
