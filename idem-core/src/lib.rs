//! # idem: make job and request handlers idempotent
//!
//! Schedulers, queues and HTTP clients deliver work *at least once*: a timeout after the handler
//! finished, a retry after a slow answer, two servers firing the same cron. A handler that sends
//! an email or charges a card must not do it twice. `idem` makes "again" a no-op: annotate an
//! async handler with [`#[idempotent]`](idempotent) and, before the body runs, the key naming
//! its work is claimed in a [`Store`] in one atomic step; after the body returns `Ok`, the key
//! is recorded as completed; every later delivery of the same key is answered with
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
//! [`MemoryStore`] needs no server: it is the store for tests, development and single-process
//! services. The handler does not change when its records move to a database; only the value
//! behind `store = ..` does (see [Choosing a store](#choosing-a-store)). The runtime needs a
//! Tokio runtime with timers enabled (for lease renewal and `wait`).
//!
//! This page is the guide:
//!
//! - [The attribute](#the-attribute): `#[idempotent(..)]` and every option it takes.
//! - [Keys and scopes](#keys-and-scopes): what names a unit of work.
//! - [What a duplicate gets](#what-a-duplicate-gets): replay, waiting, in progress, reused keys.
//! - [What happens on each call](#what-happens-on-each-call): the claim, the body, the
//!   settling.
//! - [Lease mode and transactional mode](#lease-mode-and-transactional-mode).
//! - [Effects and the journal](#effects-and-the-journal): keys for providers, and a record
//!   of effects for those that take none.
//! - [Without the macro: `Call`](#without-the-macro-call).
//! - [Cancellation](#cancellation): a caller that goes away, and `detach`.
//! - [Choosing a store](#choosing-a-store).
//! - [Tracing and metrics](#tracing-and-metrics).
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
//! (`detach` and `transaction` do not combine.)
//!
//! | option | what it does | default |
//! | --- | --- | --- |
//! | `key = ".."` | The template the call's [`Key`] is rendered from: it names the unit of work. See [Keys and scopes](#keys-and-scopes). | required |
//! | `store = ..` | Where the key is claimed: any expression whose value is a [`Store`] (`app.store`, `self.store`, `*STORE` for a `LazyLock` static), a reference to one, a `&dyn Store` or an `Arc<dyn Store>`. It is evaluated once per call. | required |
//! | `scope = ".."` | The key's scope: records of one scope never answer calls of another. | the function's name |
//! | `lease = ".."` | How long a claim holds without renewal. It is renewed every third of a lease while the body runs, so a live run is never taken over and a crashed one is taken over at most one lease later ([`lease`]). | [`DEFAULT_LEASE`] (30 s) |
//! | `keep = ".."` | How long a completed record answers duplicates; after it, the key is new work. | [`DEFAULT_KEEP`] (24 h) |
//! | `wait = ".."` | When another run holds the key: wait up to this long for its outcome (a duplicate once it completes; the body runs here if it is released or lapses) instead of returning [`Outcome::InProgress`] at once. | no wait |
//! | `fingerprint(a, b)` | Parameters (`serde::Serialize`) hashed into a [`Fingerprint`] stored with the key: the same key with other values is refused with [`Error::KeyReused`] instead of being answered as a duplicate. | none: the key alone decides |
//! | `replay` | Stores the `Ok` value (as JSON: the output must be [`Replayable`]) and hands it to duplicates in [`Outcome::Duplicate`]. | off: duplicates carry no value |
//! | `detach` | Runs the call in a task of its own, so a caller that goes away does not stop the body. The parameters must be owned. See [Cancellation](#cancellation). | off |
//! | `transaction = tx` | Transactional mode: the body gets the open transaction as `tx`, and claim, body writes and completion commit together. Needs a [`TransactionalStore`]. See [Lease mode and transactional mode](#lease-mode-and-transactional-mode). | off: lease mode |
//! | `clients(a, b)` | Parameters whose types implement [`keyed::KeyedClient`]: inside the body each is rebound to its keyed view, which hands the call's key to the provider. See [Effects and the journal](#effects-and-the-journal). | none |
//! | `crate = ".."` | The path of idem-core, when it is renamed or re-exported. | `::idem_core` |
//!
//! Durations are a whole number with `ms`, `s`, `m`, `h` or `d`; a malformed or zero duration
//! is a compile error, and a `lease`, `keep` or `wait` over [`MAX_DURATION`] is refused before
//! the claim ([`Error::InvalidOption`]).
//!
//! The annotated function must be `async` and return `Result<T, E>` (both parameters written
//! out: an alias like `io::Result<T>` hides `E`); it then returns [`Idempotent<T, E>`], that is
//! `Result<Outcome<T>, Error<E>>`. It may be a free function, an inherent or trait-impl method
//! (`store = self.store`, `{self.id}` in the key), or generic, with borrowed or owned
//! parameters. In a trait whose implementations are annotated, declare the method as returning
//! [`Idempotent<T, E>`]. Methods of `#[async_trait]` impls are not supported: `async_trait`
//! rewrites the method before `#[idempotent]` sees it; use native `async fn` in traits.
//!
//! Mistakes (a missing option, a placeholder that names no parameter, a duration without a
//! unit, `detach` with a borrowed parameter, a `replay` output that is not serializable, a
//! `transaction` store without transactions) are compile errors on the token at fault, saying
//! how to fix it.
//!
//! ## Keys and scopes
//!
//! A key names the *work*, never the delivery: `invoice-run:2026-11`, not a per-request UUID or
//! the time the delivery arrived (a retry that arrives after midnight would otherwise be new
//! work: see [`period`] for recurring jobs). Inputs the key does not name belong in a
//! `fingerprint(..)`.
//!
//! **Templates.** Placeholders are `{param}` or `{param.field}` naming parameters (`{self.id}`,
//! `{invoice.customer.id}`, `{pair.0}`), rendered with `Display`; `{{` and `}}` are literal
//! braces. A rendered key is validated ([`Key`]: not empty, at most [`MAX_KEY_LEN`] bytes, no
//! control characters); an invalid one is [`Error::InvalidKey`] and nothing is claimed. To use
//! a key computed elsewhere, pass it as a parameter and write `key = "{param}"`.
//!
//! **Key encoding.** Distinct parameter values always render distinct keys. With two or more
//! placeholders, the first character of the text between each two (the `:` of
//! `"a:{x}:{y}"`) and `%` are escaped inside the values as `%XX` per UTF-8 byte, so `x = "1:2",
//! y = "3"` renders `a:1%3A2:3` and `x = "1", y = "2:3"` renders `a:1:2%3A3`. Values without
//! those characters (integers, dates, UUIDs and words, for `:`-separated templates) render
//! unchanged, and with one placeholder nothing is escaped. Placeholders must be separated by
//! text that does not start with `%` (a compile error says so). The length limit
//! ([`MAX_KEY_LEN`]) applies to the rendered key.
//!
//! ```
//! use idem_core::{context, idempotent, MemoryStore};
//!
//! #[idempotent(key = "a:{x}:{y}", store = store, replay)]
//! async fn rendered(store: &MemoryStore, x: &str, y: &str) -> Result<String, std::io::Error> {
//!     // The current call's key, as the store sees it.
//!     Ok(context::current().unwrap().key().as_str().to_owned())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! assert_eq!(rendered(&store, "1:2", "3").await?.into_value().unwrap(), "a:1%3A2:3");
//! assert_eq!(rendered(&store, "1", "2:3").await?.into_value().unwrap(), "a:1:2%3A3");
//! # Ok(()) }
//! ```
//!
//! **Scopes.** Every key belongs to a scope, stored apart from its text (a field, and a column
//! in database stores, never a prefix a template could forge): `#[idempotent]` uses the
//! function's name, so two handlers with the same template never share a record. Renaming the
//! function changes its default scope (its earlier records then count for nothing: the work is
//! new); write `scope = "..."` to keep one across renames, or to share records between two
//! handlers on purpose. Moving the function to another module keeps its scope. [`Key::new`]
//! and a [`Call`] given no scope use [`DEFAULT_SCOPE`]; a scope is at most [`MAX_SCOPE_LEN`]
//! bytes.
//!
//! ```
//! use idem_core::{idempotent, Call, MemoryStore};
//!
//! #[idempotent(key = "user:{id}", store = store)]
//! async fn send_welcome(store: &MemoryStore, id: u64) -> Result<(), std::io::Error> {
//!     Ok(())
//! }
//!
//! #[idempotent(key = "user:{id}", store = store)]
//! async fn open_wallet(store: &MemoryStore, id: u64) -> Result<(), std::io::Error> {
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! // One key text, two scopes (the functions' names): two records.
//! assert!(send_welcome(&store, 1).await?.is_executed());
//! assert!(open_wallet(&store, 1).await?.is_executed());
//! // A call in the same scope finds the work done.
//! let again = Call::new(&store, "user:1")
//!     .scope("send_welcome")
//!     .run(async { Ok::<_, std::io::Error>(()) })
//!     .await?;
//! assert!(again.is_duplicate());
//! # Ok(()) }
//! ```
//!
//! ## What a duplicate gets
//!
//! `Ok` means the delivery was handled correctly, which for a duplicate means *not* running the
//! work again: answer a scheduler's duplicate with success (an HTTP 2xx), or it retries again.
//!
//! | the key | the call returns |
//! | --- | --- |
//! | is new, its claim lapsed, or its completion is past its `keep` | the body runs: [`Outcome::Executed`] with its value, or [`Error::Handler`] with its error (the claim is released, so a retry runs again) |
//! | was completed within its `keep` | [`Outcome::Duplicate`], with the stored value under `replay` (else `None`) and when it completed |
//! | is held by a live run | [`Outcome::InProgress`], with when that run's lease lapses (an HTTP API answers 409 with `Retry-After`); with `wait`, whatever the wait ends in |
//! | was used with another fingerprint | [`Error::KeyReused`]: the key names other work, or the template misses the part that tells these calls apart |
//!
//! With `replay` and `wait`, a delivery that arrives while the first one runs waits for it and
//! gets its value:
//!
//! ```
//! use idem_core::{idempotent, MemoryStore, Outcome};
//! use tokio::sync::Notify;
//!
//! struct App {
//!     store: MemoryStore,
//!     report_ready: Notify,
//! }
//!
//! #[idempotent(key = "daily-report:{day}", store = app.store, replay, wait = "10s")]
//! async fn daily_report(app: &App, day: &str) -> Result<u32, std::io::Error> {
//!     app.report_ready.notified().await; // a slow report
//!     Ok(17)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let app = App { store: MemoryStore::new(), report_ready: Notify::new() };
//! let (first, second, ()) = tokio::join!(
//!     daily_report(&app, "2026-11-01"),
//!     daily_report(&app, "2026-11-01"), // arrives while the first one runs
//!     async { app.report_ready.notify_one() },
//! );
//! assert_eq!(first.unwrap(), Outcome::Executed(17));
//! assert_eq!(second.unwrap().into_value(), Some(17)); // a duplicate, with the first one's value
//! # }
//! ```
//!
//! With `fingerprint(..)`, a key reused with other inputs is refused rather than answered:
//!
//! ```
//! use idem_core::{idempotent, Error, MemoryStore};
//!
//! #[idempotent(key = "charge:{order}", store = store, fingerprint(amount))]
//! async fn charge(store: &MemoryStore, order: u64, amount: u32) -> Result<(), std::io::Error> {
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let store = MemoryStore::new();
//! assert!(charge(&store, 7, 100).await.unwrap().is_executed());
//! assert!(charge(&store, 7, 100).await.unwrap().is_duplicate());
//! assert!(matches!(charge(&store, 7, 250).await, Err(Error::KeyReused { .. })));
//! # }
//! ```
//!
//! A reuse is refused only when both the stored record and the call carry a fingerprint; a
//! lapsed or released key is free whatever its fingerprint.
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
//!    A completion the store fails to record is retried three times, then reported as
//!    [`Error::Store`] (the body ran; a retry after the lease runs it again). A claim whose
//!    answer came after a third of its lease is renewed before the body starts, so no body
//!    runs on a lease another process could already take over. A `lease` or `keep` over
//!    [`MAX_DURATION`] is refused before the claim ([`Error::InvalidOption`]). What happens
//!    when the caller goes away meanwhile is the subject of [Cancellation](#cancellation).
//! 4. Completed before: [`Outcome::Duplicate`], with the stored value under `replay`.
//! 5. Held by a live run: [`Outcome::InProgress`], or with `wait` the other run's outcome.
//! 6. Same key, other fingerprint: [`Error::KeyReused`].
//!
//! Every [`Error`] variant except [`Error::Handler`] and [`Error::LostClaim`] means the body
//! did not run in this call.
//!
//! ## Lease mode and transactional mode
//!
//! **Lease mode** (the default) commits the claim at once, before the body, and renews it while
//! the body runs; the completion is a second, fenced write. The body may take any time and its
//! effects may be anywhere (emails, HTTP calls, other databases). Renewal does not run in the
//! body's task, so a body that blocks its thread keeps its lease on a multi-thread runtime; see
//! [`lease`] for what can still stop it. If a run stalls past its lease (a GC pause, a frozen
//! VM) and another takes the key over, the stalled run's completion is refused
//! ([`Error::LostClaim`]): that takeover of work cut off mid-way is the one window in which a
//! body runs twice, which is why effects should carry the call's key to their providers (see
//! [Effects and the journal](#effects-and-the-journal)).
//!
//! **Transactional mode** (`transaction = tx`) claims the key inside a new database
//! transaction, hands that transaction to the body, and commits the completion with the body's
//! writes on `Ok`, or rolls everything back on `Err`, a panic or a dropped call. No lease is
//! renewed: the open transaction holds the claim. It gives *exactly once* for effects that are
//! writes to the store's own database, and needs a [`TransactionalStore`]: `PgStore`
//! (idem-store-postgres) or `SqliteStore` (idem-store-sqlite), named by its concrete type (a
//! `dyn Store` or [`MemoryStore`] is a compile error on the `store` expression). The body sees
//! `tx` as `&mut S::Transaction`; for `PgStore` that is a `PgTransaction`, which derefs to
//! sqlx's connection, so a write is `sqlx::query(..).execute(&mut **tx).await?`.
//!
//! ```
//! use idem_core::{idempotent, TransactionalStore};
//!
//! /// Credits an order once: the credit commits together with the record that it was made.
//! #[idempotent(key = "credit:{order}", store = store, transaction = tx)]
//! async fn credit<S: TransactionalStore>(store: &S, order: u64) -> Result<(), std::io::Error> {
//!     let tx: &mut S::Transaction = tx; // the open transaction that holds the claim
//!     // ... write the credit through `tx` ...
//!     Ok(())
//! }
//! ```
//!
//! | | lease mode (default) | transactional mode (`transaction = tx`) |
//! | --- | --- | --- |
//! | the key is committed | at once, before the body | with the body's writes, at the end |
//! | the body may take | any time (the lease is renewed) | as long as a transaction may stay open |
//! | a crash mid-body | the key is taken over once the lease lapses; the body may run again | everything rolls back; the retry runs cleanly |
//! | effects it protects | anything: emails, HTTP calls, other databases | writes to the store's database: exactly once |
//! | a concurrent duplicate | [`Outcome::InProgress`] (or waits, with `wait`) | waits on the claimed row, then [`Outcome::Duplicate`] |
//!
//! Choose lease mode for long jobs and for side effects outside the database; transactional
//! mode for short jobs whose effects are writes to the same database. The
//! [journal] is not available in transactional mode (its writes could not see a claim
//! that is not committed yet): write the effect's record in the transaction instead.
//!
//! ## Effects and the journal
//!
//! The key protects the handler; pass it on, so the payment provider or email API drops
//! repeats too. Code anywhere under the body reaches the current call through
//! [`context::current`] (a task-local, like `tracing`'s current span) and derives a named
//! sub-key per effect ([`CallContext::sub_key`](context::CallContext::sub_key)):
//! `invoice-run:2026-11/charge:cust_42`. Sub-keys are the same on every retry of the same work
//! and differ per effect, so two charges of one run never share a provider key. A spawned task
//! does not inherit the context: spawn [`context::propagate`]`(future)`.
//!
//! `clients(payments, mailer)` rebinds those parameters, inside the claimed body, to keyed
//! views of themselves: a client supports it by implementing [`keyed::KeyedClient`] (the
//! [`keyed`] module has a complete example). With the `reqwest` feature, `reqwest::Client` is
//! one, and its requests carry `Idempotency-Key: <job key>/<effect>`.
//!
//! For providers that take no idempotency key, the [`journal::Journal`] records each named
//! effect of a claimed run in the store the call claimed its key in (found through the call's
//! context: there is no store to pass), so a retry of failed work skips what was done and gets
//! its recorded output:
//!
//! - [`at_least_once`](journal::Journal::at_least_once) runs the effect, then records it: a
//!   crash between the two repeats it on the retry.
//! - [`at_most_once`](journal::Journal::at_most_once) records the intent first: a crash (or an
//!   `Err` from the effect, whose provider may have acted before failing) between intent and
//!   completion makes the retry skip the effect with [`journal::Effect::Unknown`], to
//!   reconcile by hand.
//!
//! ```
//! use idem_core::journal::{Effect, Journal};
//! use idem_core::{idempotent, MemoryStore};
//! use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
//!
//! struct Shop {
//!     store: MemoryStore,
//!     receipts_sent: AtomicU32,
//!     warehouse_up: AtomicBool,
//! }
//!
//! #[idempotent(key = "order:{id}", store = shop.store)]
//! async fn fulfil(shop: &Shop, id: u64) -> Result<(), std::io::Error> {
//!     let journal = Journal::new();
//!     // An email API that takes no idempotency key: journaled.
//!     let receipt = journal
//!         .at_least_once("send-receipt", async {
//!             shop.receipts_sent.fetch_add(1, Ordering::SeqCst);
//!             Ok::<_, std::io::Error>(())
//!         })
//!         .await
//!         .map_err(std::io::Error::other)?;
//!     // A later step fails on the first delivery.
//!     if !shop.warehouse_up.swap(true, Ordering::SeqCst) {
//!         return Err(std::io::Error::other("warehouse unreachable"));
//!     }
//!     assert!(matches!(receipt, Effect::Skipped(()))); // on the retry: sent before
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let shop = Shop {
//!     store: MemoryStore::new(),
//!     receipts_sent: AtomicU32::new(0),
//!     warehouse_up: AtomicBool::new(false),
//! };
//! assert!(fulfil(&shop, 1).await.is_err()); // the receipt went out, then the run failed
//! assert!(fulfil(&shop, 1).await.unwrap().is_executed()); // the retry runs the body again...
//! assert_eq!(shop.receipts_sent.load(Ordering::SeqCst), 1); // ...but not the receipt
//! # }
//! ```
//!
//! Journal writes are fenced by the claim's token (a run that lost its claim cannot record),
//! outlive a release of the key (so a retry sees what the failed run did), and are kept for
//! [`journal::DEFAULT_JOURNAL_KEEP`] (a week) unless told otherwise. Every store of this
//! workspace keeps a journal.
//!
//! ## Without the macro: `Call`
//!
//! The attribute expands to a [`Call`], which can be used directly for work that is not a
//! function, or whose key is built at run time. Its builder methods are the attribute's
//! options; the `run` methods pick replay and the mode:
//!
//! ```
//! use idem_core::{Call, MemoryStore, Outcome};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! let invoice_run = |period: &str| {
//!     Call::new(&store, format!("invoice-run:{period}"))
//!         .scope("invoice_run")
//!         .name("billing::invoice_run") // the handler, in the span and the metrics
//!         .lease(Duration::from_secs(120))
//!         .wait(Duration::from_secs(10))
//!         .run_replay(async { Ok::<_, std::io::Error>(42u32) }) // the invoices it sent
//! };
//! assert_eq!(invoice_run("2026-11").await?, Outcome::Executed(42));
//! assert_eq!(invoice_run("2026-11").await?.into_value(), Some(42)); // a duplicate
//! # Ok(()) }
//! ```
//!
//! | attribute | `Call` |
//! | --- | --- |
//! | `key`, `store` | [`Call::new`]`(&store, key)` |
//! | `scope`, `lease`, `keep`, `wait` | [`Call::scope`], [`Call::lease`], [`Call::keep`], [`Call::wait`] |
//! | `fingerprint(..)` | [`Call::fingerprint`] with a [`Fingerprint::builder`] |
//! | (the default) | [`Call::run`] |
//! | `replay` | [`Call::run_replay`], or [`Call::run_with`] and a [`Codec`] of your own |
//! | `detach` | [`Call::run_detached`] (and its `_replay`, `_with` forms) |
//! | `transaction = tx` | [`Call::run_in_transaction`] (and its `_replay`, `_with` forms) |
//!
//! ## Cancellation
//!
//! A caller that goes away (a timeout, a client that disconnects, an aborted task) drops the
//! call's future. What that does depends on where the call was:
//!
//! - **Before the body returned**, the body stops at the `.await` it was at, and the store is
//!   told to [abandon](Store::abandon) the claim: every store of this workspace frees it at
//!   once (a store without `abandon` frees it when its lease lapses). The next delivery runs
//!   the body again, from the start, redoing what it had done, except effects keyed by the
//!   call or recorded in the [`journal`].
//! - **After the body returned `Ok`**, the completion is recorded anyway, in the background:
//!   done work is never undone, nor run again. A runtime that is shutting down drops that
//!   task, so a process that stops on purpose calls [`pending::drain`] before `main` returns
//!   (`idem-queue`'s `Workers::shutdown` does): cut there instead, the claim lapses with its
//!   lease and the work runs again.
//! - **In transactional mode** the transaction rolls back, the claim and the body's writes
//!   with it.
//!
//! ```
//! use idem_core::{idempotent, MemoryStore};
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::time::Duration;
//!
//! struct App {
//!     store: MemoryStore,
//!     attempts: AtomicU32,
//! }
//!
//! #[idempotent(key = "sync:{account}", store = app.store)]
//! async fn sync_account(app: &App, account: u64) -> Result<(), std::io::Error> {
//!     if app.attempts.fetch_add(1, Ordering::SeqCst) == 0 {
//!         std::future::pending::<()>().await; // the first attempt hangs
//!     }
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let app = App { store: MemoryStore::new(), attempts: AtomicU32::new(0) };
//! // The caller gives up: the call is dropped mid-body, and its claim abandoned.
//! let gave_up = tokio::time::timeout(Duration::from_millis(50), sync_account(&app, 7)).await;
//! assert!(gave_up.is_err());
//! // The next delivery runs the body again.
//! assert!(sync_account(&app, 7).await.unwrap().is_executed());
//! assert_eq!(app.attempts.load(Ordering::SeqCst), 2);
//! # }
//! ```
//!
//! **`detach`** (and [`Call::run_detached`]) runs the call (claim, body and completion) in a
//! task of its own on the current Tokio runtime, and the function's future only waits for its
//! outcome. A caller that goes away then does not stop the body: it runs to its end and its
//! completion is recorded, so the next delivery finds it done (or in progress, while it runs).
//! Such a body outlives its caller, so it must be `Send + 'static`: the function takes owned
//! parameters (an `Arc<App>`, a `String`; a method `self: Arc<Self>` or `self`), not
//! references. It does not combine with `transaction`, whose claim, body and completion commit
//! together or not at all. The cost is a task spawned per call.
//!
//! ```
//! use idem_core::{idempotent, MemoryStore};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tokio::sync::Notify;
//!
//! struct App {
//!     store: MemoryStore,
//!     bank_answered: Notify,
//! }
//!
//! #[idempotent(key = "transfer:{id}", store = app.store, detach)]
//! async fn transfer(app: Arc<App>, id: u64) -> Result<(), std::io::Error> {
//!     app.bank_answered.notified().await; // a slow bank
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let app = Arc::new(App { store: MemoryStore::new(), bank_answered: Notify::new() });
//! // The caller gives up while the bank is slow...
//! let gave_up = tokio::time::timeout(Duration::from_millis(50), transfer(app.clone(), 7)).await;
//! assert!(gave_up.is_err());
//! // ...but the transfer goes on: a retry meanwhile is told it is in progress,
//! assert!(transfer(app.clone(), 7).await.unwrap().is_in_progress());
//! // and once the bank answers, it completes, once.
//! app.bank_answered.notify_one();
//! # loop {
//! #     if transfer(app.clone(), 7).await.unwrap().is_duplicate() { break }
//! #     tokio::time::sleep(Duration::from_millis(5)).await;
//! # }
//! # }
//! ```
//!
//! ## Choosing a store
//!
//! The handler does not change; only the value behind `store = ..` does. Every store passes
//! the same conformance suite.
//!
//! | store | where records live | pick it when | transactional mode |
//! | --- | --- | --- | --- |
//! | [`MemoryStore`] (this crate) | this process's memory | tests, development, one process whose work may repeat after a restart | no |
//! | `SqliteStore` (idem-store-sqlite) | one SQLite file, durable | one machine: cron, CLI tools, several processes on the box | yes |
//! | `PgStore` (idem-store-postgres) | PostgreSQL, durable | several servers share the work | yes |
//! | `RedisStore` (idem-store-redis) | Redis or Redis Cluster, as durable as its persistence | you run Redis already | no |
//!
//! Built on these: idem-http's `IdempotencyLayer` answers `Idempotency-Key` requests for tower
//! and axum on any store; idem-queue is a durable work queue in PostgreSQL whose jobs run as
//! calls; idem-cli's `idem` command inspects, releases and purges records through
//! [`inspect::Inspect`]. Stores that keep records until told otherwise delete expired ones
//! through [`Purge`]. A store of your own implements [`Store`] (and runs the conformance
//! suite); [`clock::ManualClock`] with [`MemoryStore::with_clock`] tests lease expiry without
//! sleeping.
//!
//! ## Tracing and metrics
//!
//! Every call is one `tracing` span named `idem`, with the fields `handler`, `key`, `fence`
//! and `outcome` (`executed`, `duplicate`, `in_progress`, `handler_error`, `key_reused`,
//! `lost_claim`, `store_error`, `invalid_key`, `invalid_option`, `codec_error`, `panicked`).
//! Takeovers, refused completions and failed releases are logged in it.
//!
//! Metrics go through the `metrics` crate's facade: idem records them, the application picks
//! the exporter by installing a recorder, and with none installed they cost next to nothing.
//! [`metrics`] lists them: `idem_calls_total` (by `handler` and `outcome`),
//! `idem_store_errors_total`, `idem_lost_claims_total`, and the histograms
//! `idem_claim_seconds` and `idem_body_seconds`. Under `#[idempotent]` the `handler` is the
//! function's module path and name (`billing::invoice_run`), else [`Call::name`].
//!
//! ## Feature flags
//!
//! | feature | default | adds |
//! | --- | --- | --- |
//! | `reqwest` | off | [`keyed::KeyedClient`] for `reqwest::Client`, whose keyed requests carry `Idempotency-Key: <job key>/<effect>` |

#![cfg_attr(docsrs, feature(doc_cfg))]
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
pub mod pending;
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
/// The guide to this attribute is [the crate documentation](crate#the-attribute): every option
/// with its default, keys and scopes, what a duplicate gets, and what a call does.
///
pub use idem_macros::idempotent;
pub use inspect::release_claim;
pub use inspect::{
    ExpiredCounts, Inspect, InspectedEffect, InspectedRecord, RecordCursor, RecordFilter,
    RecordPage, RecordStatus, RecordSummary, Released, ScopeCounts, PAGE_SCAN, SUMMARY_ROWS,
};
pub use key::{
    InvalidKey, InvalidKeyReason, Key, DEFAULT_SCOPE, LEGACY_SCOPE, MAX_KEY_LEN, MAX_SCOPE_LEN,
};
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

/// The README's example, compiled with the doc tests so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
