//! # idem-store-postgres: idem's records in PostgreSQL
//!
//! [`PgStore`] keeps idem's idempotency records in one PostgreSQL table, shared by every
//! process and every machine that uses the same database: the store to use when "two servers
//! fire the same cron". It runs on the application's existing [`sqlx::PgPool`], judges leases
//! by the database's clock (app servers with skewed clocks agree), and makes each store
//! operation one SQL statement. It is also a [`TransactionalStore`](idem_core::TransactionalStore):
//! a handler's claim, its own writes and its completion can commit in one transaction.
//!
//! - [Setup](#setup): the pool, [`PgStore::new`], [`PgStore::migrate`].
//! - [Options](#options): the [`PgStoreBuilder`] settings, their defaults, and when to change
//!   them.
//! - [Lease mode or transactional mode](#lease-mode-or-transactional-mode).
//! - [Purging](#purging) expired records, and [inspection](#inspection) for operators.
//! - [Claim, then process](#claim-then-process-on-your-own-table) on a table of your own
//!   ([`own_table`]).
//! - [Building on the store](#building-on-the-store), as `idem-queue` does.
//!
//! ## Setup
//!
//! ```no_run
//! use idem_core::{idempotent, Purge};
//! use idem_store_postgres::{sqlx::PgPool, PgStore};
//! use std::time::Duration;
//!
//! struct App { store: PgStore }
//!
//! #[idempotent(key = "reminder:{user_id}:{day}", store = app.store, lease = "2m")]
//! async fn send_reminder(app: &App, user_id: u64, day: &str) -> Result<(), std::io::Error> {
//!     Ok(()) // send the email
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
//! let store = PgStore::new(pool); // public.idem_records; the defaults are the fast path
//! store.migrate().await?; // once at start-up; safe from many processes at once
//! let _purger = store.spawn_purger(Duration::from_secs(300), 1_000); // see Purging
//!
//! let app = App { store };
//! assert!(send_reminder(&app, 42, "2026-11-01").await?.is_executed());
//! assert!(send_reminder(&app, 42, "2026-11-01").await?.is_duplicate());
//! # Ok(()) }
//! ```
//!
//! [`PgStore::migrate`] creates or upgrades, in the store's schema (created if missing):
//!
//! | object | what it holds |
//! | --- | --- |
//! | `<table>` (`idem_records`) | one row per key and scope: fence, fingerprint, completion, lease or keep end, replayed output, claim token, holder (`host:pid`), next purge time |
//! | `<table>_fence` | the sequence fences come from: never reused, even after a purge |
//! | `<table>_effects` | the effect journal ([`idem_core::journal`]) |
//! | `<table>_migrations` | which of the store's migrations are applied |
//!
//! The migrations are versioned SQL files embedded in the store. `migrate` applies the missing
//! ones, each in a transaction of its own (an index built concurrently outside one), under an
//! advisory lock that every idem migration takes, so
//! concurrent start-ups take turns and the later ones find nothing to do. The history is kept
//! apart from sqlx's `_sqlx_migrations`, so it never mixes with the application's own
//! migrations. A table migrated by a newer version of this crate, or a shipped migration that
//! changed, is an error rather than a guess.
//!
//! ## Options
//!
//! [`PgStore::builder`] takes the same pool; [`build`](PgStoreBuilder::build) checks the
//! names. Every option has a default that suits most applications:
//!
//! | option | default | change it when |
//! | --- | --- | --- |
//! | [`schema`](PgStoreBuilder::schema), [`table`](PgStoreBuilder::table) | [`DEFAULT_SCHEMA`] `public`, [`DEFAULT_TABLE`] `idem_records` | idem's tables belong elsewhere, or several stores share a database. Names are plain lowercase identifiers (`[a-z_][a-z0-9_]*`, not `pg_..`, at most [`MAX_IDENT_LEN`] bytes); anything else is refused before it reaches SQL |
//! | [`dedicated_connections(n)`](PgStoreBuilder::dedicated_connections) | the store holds up to half of the pool's `max_connections` | the application's own queries need the whole pool: the store opens up to `n` connections of its own, apart from it |
//! | [`through_pool()`](PgStoreBuilder::through_pool) | off | the store must hold no connection between statements (a round trip more per statement, and no batching) |
//! | [`batching(on)`](PgStoreBuilder::batching) | on | you want every claim and completion sent as a statement of its own |
//! | [`max_batches_in_flight(n)`](PgStoreBuilder::max_batches_in_flight) | [`DEFAULT_BATCHES_IN_FLIGHT`], 1 | transactional handlers share keys and scopes with lease-mode ones, so batches may wait on row locks |
//! | [`lock_timeout(d)`](PgStoreBuilder::lock_timeout) | [`DEFAULT_LOCK_TIMEOUT`], 5 s | a row lock may legitimately be held longer (a transaction of your own on idem's table) |
//! | [`claim_with_begin(on)`](PgStoreBuilder::claim_with_begin) | off | transactional calls are mostly fresh keys, and a round trip saved per call matters more than a server log line per duplicate |
//!
//! ```no_run
//! use idem_store_postgres::{sqlx::PgPool, PgStore};
//! use std::time::Duration;
//!
//! # async fn run(pool: PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! let store = PgStore::builder(pool)
//!     .schema("jobs")
//!     .table("idem")
//!     .dedicated_connections(4)
//!     .lock_timeout(Duration::from_secs(2))
//!     .build()?; // an invalid name is an error here
//! store.migrate().await?; // creates the schema `jobs` if it is missing
//! # Ok(()) }
//! ```
//!
//! **Connections.** By default the store takes up to half of the pool's `max_connections`
//! (rounded down) out of the pool as it needs them, and keeps them: sqlx's pool tests every
//! connection with a round trip when it is given back, which would double the round trips of
//! idem's one-statement operations, and keeping connections taken from the pool means the
//! server never sees more connections than the pool allows. The other half serves the
//! application's own queries. A pool of one connection is used per statement instead. The
//! store's connections keep one generic plan per statement, with sequential scans off, so
//! their plans find rows by index whatever the tables' statistics say. A connection that
//! failed or was cancelled mid-statement is closed, never reused, and a dead idle one (the
//! server restarted) is replaced: every statement the store sends again is safe to repeat
//! (claims carry their token, completions their fence). `pool.close().await` still returns
//! while the store lives; calls after it fail closed.
//!
//! **Batching.** The claims of concurrent calls share one statement, and so do their
//! completions. A batch is whatever queued while the previous statement was on the wire, so a
//! lone call is sent at once and waits for nothing, and under load many calls cost one round
//! trip. Each call is answered as if it had been alone: a batch never holds two calls for one
//! key, a duplicate gets its own key's output, a completion applies under its own fence; a
//! batch the database refuses is sent again call by call, so a failure reaches only its own
//! call; a batch that cannot reach the database fails each of its calls at once. A batch is
//! sent by a task on the Tokio runtime of the call that started it.
//!
//! **Pool size.** Size the pool for the store's half and for your own queries in the other,
//! plus the transactions beyond what the store lends (see [`PgTransaction`]). A claim that
//! cannot get a connection fails closed ([`idem_core::Error::Store`]) after the pool's
//! `acquire_timeout`.
//!
//! **`lease` and `keep`** (set per handler on `#[idempotent]`): a lease longer than the
//! longest pause a live process can take (GC, a stalled VM, a slow database failover), since
//! renewal runs every third of it, and shorter leases mean faster takeover after a crash; a
//! `keep` longer than your callers retry.
//!
//! **Durability.** idem's guarantees are as durable as a commit. With
//! `synchronous_commit = off`, a database crash can lose acknowledged completions, and a
//! duplicate would then run again: keep it on for idem's statements (it is per transaction, so
//! a session can opt out for other work).
//!
//! **What a call costs.** A fresh lease-mode call is two statements (claim, complete), a
//! duplicate one, which only reads (no row lock, no WAL); under load, batching shares each
//! statement among the calls that queued behind the previous one. A fresh transactional call
//! is BEGIN, the claim, the handler's statements and COMMIT: the claim writes a fresh key's
//! record completed already, since nothing outside the transaction sees it before the commit,
//! so the commit is the completion.
//!
//! ## Lease mode or transactional mode
//!
//! | | lease mode (the default) | transactional mode (`transaction = tx`) |
//! | --- | --- | --- |
//! | the key is committed | at once, before the body | with the body's writes, at the end |
//! | the body may take | any time (the lease is renewed) | as long as you can hold a transaction and a row lock open |
//! | a crash mid-body | the key is taken over once the lease lapses; the body may run again | everything rolls back; the retry runs cleanly |
//! | effects it protects | anything: emails, HTTP calls, other databases | writes to this database: exactly once |
//! | a concurrent duplicate | `InProgress` (or waits, with `wait`) | waits on the row lock, then `Duplicate` |
//!
//! Choose lease mode for long jobs and for side effects outside the database; choose
//! transactional mode for short jobs whose effects are writes to the same database. In
//! transactional mode the body gets the open transaction as `tx`, a [`PgTransaction`] that
//! derefs to a [`PgConnection`](sqlx::PgConnection): run your queries on `&mut **tx`.
//!
//! ```no_run
//! use idem_core::idempotent;
//! use idem_store_postgres::{sqlx, PgStore};
//!
//! struct App { store: PgStore }
//!
//! /// Credits an order once: the credit and the key commit together, or neither.
//! #[idempotent(key = "credit:{order}", store = app.store, transaction = tx)]
//! async fn credit(app: &App, order: i64) -> Result<(), sqlx::Error> {
//!     sqlx::query("UPDATE accounts SET credits = credits + 100 WHERE order_id = $1")
//!         .bind(order)
//!         .execute(&mut **tx) // the open transaction that holds the key
//!         .await?;
//!     Ok(())
//! }
//! ```
//!
//! An `Err`, a panic or a dropped call rolls the transaction back, the claim with it. The
//! transaction runs on one of the store's own connections, lent for as long as it lasts,
//! while the store keeps a few for lease mode's statements (so a transactional body that
//! makes lease-mode calls on the same store never starves them); past those, it runs on a
//! connection of the pool. Either way a transaction dropped at any point, its `BEGIN` on the
//! way included, never leaves its connection open for the next user: sqlx's `pool.begin()`
//! can (a call dropped before the server answered `BEGIN` returns its connection inside the
//! transaction, and the next statements on it never commit), so idem closes such a
//! connection instead. The same guard is yours for the application's own transactions:
//! [`ClosingTransaction`].
//!
//! ## Purging
//!
//! Expired records (lapsed claims, completions past their `keep`) and journal entries stay
//! until deleted. [`Purge::spawn_purger`](idem_core::Purge::spawn_purger)`(every, batch)` runs
//! [`purge_all_expired`](idem_core::Purge::purge_all_expired) on the current Tokio runtime
//! until its handle is aborted; every few minutes, with batches of 1,000, keeps the table near
//! the live set. Each batch is one short statement over the `purge_at` index that skips rows a
//! claim holds, and each batch of one drain starts where the one before ended, so a long drain
//! does not re-read the index entries of the rows it deleted. A row a drain passed over is due
//! for the next. A completion does not change the indexed `purge_at` (unless `keep` ends
//! before the lease would have), so PostgreSQL rewrites the row in place, with no new index
//! entries; a record still kept when its `purge_at` comes is filed again at the end of its
//! `keep` by that purge, off the calls' path. `idem purge` (the `idem-cli` crate) runs the
//! same drain by hand.
//!
//! ## Inspection
//!
//! [`PgStore`] implements [`idem_core::Inspect`], what the `idem` command and any page for
//! operators build on: find a key's records and who holds them, list stale claims, read a
//! key's journal, count what a purge would delete, and forget a completed record so the work
//! runs again. Releasing a stale claim is the store's own fenced
//! [`release`](idem_core::Store::release): it frees only the claim the operator saw.
//!
//! ```no_run
//! use idem_core::{Inspect, RecordFilter, RecordStatus, Store};
//! use idem_store_postgres::PgStore;
//!
//! # async fn run(store: PgStore) -> Result<(), Box<dyn std::error::Error>> {
//! let filter = RecordFilter { status: Some(RecordStatus::Stale), ..RecordFilter::default() };
//! for stale in store.list(&filter).await? {
//!     // Its run stopped (the holder names the process); the next delivery would take it over.
//!     println!("{} held by {:?}", stale.record.key, stale.holder);
//!     store.release(&stale.record.key, stale.record.fence).await?;
//! }
//! let due = store.count_expired().await?;
//! println!("{} records and {} journal entries await a purge", due.records, due.effects);
//! # Ok(()) }
//! ```
//!
//! ## Claim, then process, on your own table
//!
//! For batch jobs over a table of your own (rows with a status column),
//! [`ClaimBatch`](own_table::ClaimBatch) writes the claim-then-process statement from
//! validated names: each row is marked claimed in the same statement that selects it
//! (`FOR UPDATE SKIP LOCKED`), so overlapping runs get different rows and a re-run picks up
//! only what is left. See [`own_table`]; run each row's work through `#[idempotent]` keyed
//! by its id to make a repeat harmless.
//!
//! ## Building on the store
//!
//! The store's layers (its connections, batching, records statements, error classification and
//! migrations) live in `idem-postgres-core`, which this crate presents. A crate whose tables sit
//! beside the records and whose statements write records in the same statement as their own
//! rows, as the work queue (`idem-queue`) does, builds on that crate's `extend` module, pinned
//! to the exact version of this one: its layers make no promise of stability of their own, and
//! this crate's API does not include them. An application using the store needs none of it.
//!
//! ## Feature flags
//!
//! | feature | default | adds |
//! | --- | --- | --- |
//! | `testing` | off | hooks for idem's own tests and benchmarks (test stores in schemas of their own, a proxy that counts statements and round trips, plan checks, the exact statements); not part of the store's API: it may change in any release |
//!
//! ## Guarantees
//!
//! Of any number of concurrent claims of one key, exactly one acquires it. Each claim gets a
//! fence larger than every earlier one for that key, so a run that stalled past its lease and
//! was taken over cannot record its completion over the newer run's
//! ([`idem_core::Error::LostClaim`]). A claim whose answer was lost with its connection (a
//! restart, a failover) is sent again with its token, finds the record it made, and holds the
//! key with the same fence. A claim that cannot reach the database fails, and the body does not
//! run. A call whose caller goes away before its body returns has its claim released at once,
//! in the background, so the next delivery need not wait out the lease. Error handling looks at
//! SQLSTATE codes, never message text, and every store error keeps its sqlx error as its
//! source.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub use idem_postgres_core::own_table;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use idem_postgres_core::testing;
pub use idem_postgres_core::{
    sqlx, ClosingTransaction, PgStore, PgStoreBuilder, PgTransaction, DEFAULT_BATCHES_IN_FLIGHT,
    DEFAULT_LOCK_TIMEOUT, DEFAULT_SCHEMA, DEFAULT_TABLE, MAX_IDENT_LEN,
};

/// The README's example, compiled with the doc tests so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
