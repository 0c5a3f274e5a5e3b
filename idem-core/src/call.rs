//! One idempotent call: claim, run, renew, complete or release. The `#[idempotent]` attribute
//! expands to a [`Call`]; it can also be used directly, for work that is not a function.

use std::future::Future;
use std::time::Duration;

use tracing::Instrument;

use crate::codec::{Codec, JsonReplay, NoReplay, Replayable};
use crate::error::{CodecError, Error};
use crate::execute::execute;
use crate::fingerprint::Fingerprint;
use crate::key::{InvalidKey, Key};
use crate::outcome::Outcome;
use crate::store::Store;

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

    async fn run_with<T, E, F, C>(self, codec: C, work: F) -> Result<Outcome<T>, Error<E>>
    where
        F: Future<Output = Result<T, E>>,
        C: Codec<T>,
    {
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
        execute(self, codec, work).instrument(span).await
    }
}
