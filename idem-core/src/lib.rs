//! # idem: make job and request handlers idempotent
//!
//! Schedulers, queues and HTTP clients deliver work *at least once*: a timeout after the handler
//! finished, a retry after a slow answer, two servers firing the same cron. `idem` makes the
//! second delivery a no-op. Annotate an async handler with [`#[idempotent]`](idempotent): before
//! the body runs, the key is claimed in a [`Store`] in one atomic step; after it returns `Ok`,
//! the key is recorded as completed; every later delivery of the same key is answered with
//! [`Outcome::Duplicate`] without running the body.
//!
//! ```
//! use idem_core::{idempotent, MemoryStore, Outcome};
//! use std::sync::atomic::{AtomicU32, Ordering};
//!
//! struct App {
//!     store: MemoryStore,
//!     emails_sent: AtomicU32,
//! }
//!
//! #[idempotent(key = "reminder:{user_id}:{day}", store = app.store)]
//! async fn send_reminder(app: &App, user_id: u64, day: &str) -> Result<(), std::io::Error> {
//!     app.emails_sent.fetch_add(1, Ordering::SeqCst); // the side effect
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let app = App { store: MemoryStore::new(), emails_sent: AtomicU32::new(0) };
//! assert_eq!(send_reminder(&app, 42, "2026-11-01").await.unwrap(), Outcome::Executed(()));
//! assert!(send_reminder(&app, 42, "2026-11-01").await.unwrap().is_duplicate());
//! assert_eq!(app.emails_sent.load(Ordering::SeqCst), 1);
//! # }
//! ```
//!
//! ## The attribute
//!
//! ```text
//! #[idempotent(
//!     key = "reminder:{user_id}:{day}", // required: template over the parameters
//!     scope = "reminders",              // the key's scope (default: the function's name)
//!     store = app.store,                // required: the store (any expression)
//!     lease = "30s",                    // claim lease, renewed while the body runs (default 30s)
//!     keep = "7d",                      // how long completed records count (default 24h)
//!     fingerprint(amount, currency),    // inputs that must match when the key is reused
//!     replay,                           // store the Ok value and hand it to duplicates
//!     wait = "10s",                     // on an in-flight duplicate, wait for its outcome
//!     detach,                           // run in a task of its own: the work finishes even if the caller goes away
//!     transaction = tx,                 // claim, body and completion in one transaction
//!     clients(mailer, payments),        // inside the body, these are keyed by the call
//!     crate = "my_idem",                // path to a renamed idem-core dependency
//! )]
//! ```
//!
//! - `transaction = tx` needs a [`TransactionalStore`] (such as `PgStore`): the body gets the
//!   open transaction as `tx` (`&mut` it), and its writes commit with the completion or roll
//!   back with the claim. No lease is renewed: the open transaction holds the claim.
//! - `clients(..)` names parameters whose types implement [`keyed::KeyedClient`]; inside the
//!   body each is rebound to its keyed view, which hands the call's key (a sub-key per effect)
//!   to the provider as its idempotency key.
//! - `detach` runs the call (claim, body, completion) in a task of its own on the current Tokio
//!   runtime, and the function's future waits for its outcome. When a caller goes away mid-body
//!   (a timeout, a client that disconnects, an aborted task), a body without `detach` stops at
//!   the `.await` it was at: its claim is abandoned and the next delivery runs it again from the
//!   start, redoing what it had done (except effects recorded in the [`journal`]). With
//!   `detach` the body runs to its end and its completion is recorded, so the next delivery
//!   finds it done (or in progress, while it runs). Such a body outlives its caller, so it must
//!   be `Send + 'static`: the function takes owned parameters (an `Arc<App>`, a `String`; a
//!   method `self: Arc<Self>` or `self`), not references. It does not combine with
//!   `transaction`, whose claim, body and completion commit together or not at all.
//!
//! The annotated function must be `async` and return `Result<T, E>`; it then returns
//! [`Idempotent<T, E>`], that is `Result<Outcome<T>, Error<E>>`. Placeholders are `{param}` or
//! `{param.field}` naming parameters, rendered with `Display`; `{{` and `}}` are literal braces.
//!
//! **Scopes.** Every key belongs to a scope, stored apart from its text: `#[idempotent]` uses the
//! function's name, so two handlers with the same template never share a record. Renaming the
//! function changes its default scope (its earlier records then count for nothing: the work is
//! new); write `scope = "..."` to keep one across renames.
//!
//! **Key encoding.** Distinct parameter values always render distinct keys. With two or more
//! placeholders, the first character of the text between each two (the `:` of
//! `"a:{x}:{y}"`) and `%` are escaped inside the values as `%XX` per UTF-8 byte, so `x = "1:2",
//! y = "3"` renders `a:1%3A2:3` and `x = "1", y = "2:3"` renders `a:1:2%3A3`. Values without
//! those characters (integers, dates, UUIDs and words, for `:`-separated templates) render
//! unchanged, and with one placeholder nothing is escaped. Placeholders must be separated by
//! text that does not start with `%` (a compile error says so). The length limit
//! ([`MAX_KEY_LEN`]) applies to the rendered key.
//! Durations are a whole number with `ms`, `s`, `m`, `h` or `d`.
//!
//! ## What happens on each call
//!
//! 1. The key is rendered and validated ([`Key`]); an invalid key is [`Error::InvalidKey`].
//! 2. One atomic claim in the store. If the store fails the body does not run
//!    ([`Error::Store`]): idem fails closed.
//! 3. Claimed: the body runs while the lease is renewed every third of a lease
//!    ([`lease`], the one renewal policy). `Ok(v)` is
//!    recorded as completed, fenced by the claim's token, and returned as
//!    [`Outcome::Executed`]; if a newer run took the key over meanwhile, the completion is
//!    refused and the call returns [`Error::LostClaim`]. `Err(e)` releases the claim (a retry
//!    runs again) and returns [`Error::Handler`]. A panic releases the claim, then continues.
//!    If the call's future is dropped (a caller's timeout, a client gone) while the body runs,
//!    the body stops at its `.await` and the store is told to [abandon](Store::abandon) the
//!    claim, which frees it at once for [`MemoryStore`] and the PostgreSQL store, and at the
//!    latest when its lease lapses: the next delivery runs the body again. Once the body has
//!    returned `Ok`, a dropped call's completion is recorded anyway, in the background: done
//!    work is never undone. [`Call::run_detached`] runs the whole call in a task of its own, so
//!    a caller that goes away does not stop the work at all. A claim whose answer came after a
//!    third of its lease is renewed before the body starts, so no body runs on a lease another
//!    process could already take over. A `lease` or `keep` over [`MAX_DURATION`] is refused
//!    before the claim ([`Error::InvalidOption`]).
//! 4. Completed before: [`Outcome::Duplicate`], with the stored value under `replay`.
//! 5. Held by a live run: [`Outcome::InProgress`], or with `wait` the other run's outcome.
//! 6. Same key, other fingerprint: [`Error::KeyReused`].
//!
//! Every call is one `tracing` span named `idem`, with the fields `handler`, `key`, `fence`
//! and `outcome`.
//!
//! The runtime needs a Tokio runtime with timers enabled (for lease renewal and `wait`).

#![warn(missing_docs)]

mod boxed;
mod call;
pub mod clock;
mod codec;
pub mod context;
mod error;
mod execute;
mod fingerprint;
mod holder;
pub mod inspect;
pub mod journal;
mod key;
pub mod keyed;
pub mod lease;
mod memory;
pub mod metrics;
mod outcome;
pub mod period;
pub mod purge;
mod store;
mod transactional;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private_v1;

pub use boxed::BoxFuture;
pub use call::Call;
pub use codec::{Codec, JsonReplay, NoReplay, Replayable};
pub use error::{BoxError, CodecError, Error, Operation, StoreError};
pub use execute::{DEFAULT_KEEP, DEFAULT_LEASE, MAX_DURATION};
pub use fingerprint::{Fingerprint, FingerprintBuilder};
pub use holder::holder;
pub use idem_macros::idempotent;
pub use inspect::{
    ExpiredCounts, Inspect, InspectedEffect, InspectedRecord, RecordFilter, RecordStatus,
};
pub use key::{InvalidKey, InvalidKeyReason, Key, DEFAULT_SCOPE, MAX_KEY_LEN, MAX_SCOPE_LEN};
pub use memory::MemoryStore;
pub use outcome::Outcome;
pub use store::{
    reclaim_and_release_in_background, release_in_background, Claim, ClaimRequest, ClaimToken,
    Completion, EffectEntry, EffectRecord, EffectState, Fence, Fenced, Purge, Record, RecordState,
    Store,
};
pub use transactional::{TransactionalStore, TxClaim};

/// The return type of an `#[idempotent]` function whose body returns `Result<T, E>`.
///
/// Handy in trait declarations whose implementations are annotated:
///
/// ```
/// use idem_core::{idempotent, Idempotent, MemoryStore};
///
/// trait Job {
///     async fn run(&self, id: u64) -> Idempotent<(), std::io::Error>;
/// }
///
/// struct Cleanup { store: MemoryStore }
///
/// impl Job for Cleanup {
///     #[idempotent(key = "cleanup:{id}", store = self.store)]
///     async fn run(&self, id: u64) -> Result<(), std::io::Error> {
///         Ok(())
///     }
/// }
/// ```
pub type Idempotent<T, E> = Result<Outcome<T>, Error<E>>;
