//! # idem-store-sqlite: a durable, embedded idem store
//!
//! [`SqliteStore`] keeps idem's records in one SQLite database file: no server to run, and the
//! records survive a restart. Several processes on one machine can open the same file (cron
//! jobs, CLI tools, an edge service with workers): SQLite lets one writer in at a time, and
//! every claim that writes is one transaction that holds the write lock from its start (a
//! duplicate is answered from a plain read), so of any number of concurrent deliveries
//! exactly one runs. Pick it over [`MemoryStore`](idem_core::MemoryStore) when the work must
//! not repeat after a restart; pick PostgreSQL (`idem-store-postgres`) when several machines
//! share the work.
//!
//! ## Setup
//!
//! [`SqliteStore::open`] opens the file (creating it if missing) with the settings below;
//! [`SqliteStore::migrate`] creates the tables, once at start-up (safe from several processes
//! at once: they take turns on the write lock).
//!
//! ```
//! use idem_core::idempotent;
//! use idem_store_sqlite::SqliteStore;
//!
//! struct App { store: SqliteStore }
//!
//! #[idempotent(key = "invoice-run:{month}", store = app.store)]
//! async fn invoice_run(app: &App, month: &str) -> Result<u32, std::io::Error> {
//!     Ok(12) // invoices sent
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("idem-doc-setup-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! # std::fs::create_dir_all(&dir)?;
//! # let path = dir.join("idem.db");
//! let store = SqliteStore::open(&path).await?; // e.g. "/var/lib/myapp/idem.db"
//! store.migrate().await?;
//! let app = App { store };
//! assert!(invoice_run(&app, "2026-11").await?.is_executed());
//! assert!(invoice_run(&app, "2026-11").await?.is_duplicate()); // also after a restart
//! # std::fs::remove_dir_all(dir)?;
//! # Ok(()) }
//! ```
//!
//! ## Settings
//!
//! | setting | [`open`](SqliteStore::open) uses | why |
//! | --- | --- | --- |
//! | journal mode | WAL | readers (duplicates) never wait for the writer |
//! | busy timeout | [`DEFAULT_BUSY_TIMEOUT`], 5 s | a claim waits that long for another writer's lock, then fails with [`StoreError`](idem_core::StoreError) and the body does not run (fail closed) |
//! | `synchronous` | `FULL` | a claim is on disk before the body runs, so not even a power cut turns a claimed run into one that can run again while its lease lives |
//! | connections | [`DEFAULT_CONNECTIONS`], 4 | SQLite writes one at a time, so more only serve concurrent reads |
//! | table | [`DEFAULT_TABLE`], `idem_records` | [`with_table`](SqliteStore::with_table) for another, so several stores share one file |
//!
//! [`SqliteStore::new`] and [`SqliteStore::with_table`] take a pool of your own instead (its
//! connect options are yours: set WAL mode and a busy timeout as `open` does). The tables are
//! `<table>`, `<table>_effects` (the journal), `<table>_fence` (the fence counter: a key
//! released or purged and claimed again still gets a larger fence) and `<table>_migrations`.
//!
//! ## Transactional mode
//!
//! `#[idempotent(.., transaction = tx)]` runs the claim, the handler's writes (on
//! `&mut **tx`) and the completion in one SQLite transaction: they commit together, or roll
//! back together. It holds the file's single write lock from the claim to the commit, so every
//! other writer on the file (any key, any process) waits for it, up to its busy timeout: keep
//! those bodies short, or use lease mode.
//!
//! ```
//! use idem_core::idempotent;
//! use idem_store_sqlite::{sqlx, SqliteStore};
//!
//! #[idempotent(key = "credit:{order}", store = store, transaction = tx)]
//! async fn credit(store: &SqliteStore, order: u32) -> Result<(), sqlx::Error> {
//!     sqlx::query("UPDATE accounts SET credits = credits + 100 WHERE id = 42")
//!         .execute(&mut **tx)
//!         .await?;
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("idem-doc-tx-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! # std::fs::create_dir_all(&dir)?;
//! let store = SqliteStore::open(dir.join("idem.db")).await?;
//! store.migrate().await?;
//! sqlx::raw_sql("CREATE TABLE accounts (id INTEGER PRIMARY KEY, credits INTEGER NOT NULL);
//!                INSERT INTO accounts VALUES (42, 0);")
//!     .execute(store.pool())
//!     .await?;
//! credit(&store, 7).await?;
//! credit(&store, 7).await?; // a duplicate: no second credit
//! let credits: i64 = sqlx::query_scalar("SELECT credits FROM accounts WHERE id = 42")
//!     .fetch_one(store.pool())
//!     .await?;
//! assert_eq!(credits, 100);
//! # std::fs::remove_dir_all(dir)?;
//! # Ok(()) }
//! ```
//!
//! ## Purging and inspection
//!
//! Expired records and journal entries stay in the file until deleted:
//! [`Purge::spawn_purger`](idem_core::Purge::spawn_purger)`(every, batch)` deletes them
//! periodically, in short batches. [`SqliteStore`] also implements
//! [`idem_core::Inspect`] (find, list, journal, forget, count what a purge would delete), as
//! the `idem` command does with `--database-url sqlite://PATH`.
//!
//! ## Limits
//!
//! - **One machine.** Every process that opens the file must run on the machine that holds
//!   it: WAL mode shares memory between them, and does not work over a network file system.
//!   Use PostgreSQL when more than one machine handles the same work.
//! - **One writer at a time.** Claims, completions and renewals of every key and every
//!   process take turns on the file's write lock; duplicates are answered from plain reads,
//!   without it. A transactional body holds the lock for its whole length.
//! - **The wall clock.** Times are the processes' wall clock in microseconds (the processes
//!   share a machine, and so a clock); a lease therefore moves with a step of that clock (NTP,
//!   a resumed VM).
//!
//! ## Group commit
//!
//! With `synchronous = FULL` every write transaction waits for the disk, so a store that gave
//! each claim and each completion a transaction of its own would run at most half as many
//! fresh calls as the disk syncs transactions. Instead one writer per store takes every
//! claim that must write (the key fresh or lapsed) and every completion that has queued,
//! writes them in one transaction, commits, and only then answers each caller: a claim is on
//! disk before its body runs, a completion before its caller hears it applied, exactly as with
//! a transaction each. Concurrent callers share syncs, so fresh calls from 16 tasks run at
//! about the rate of one writer committing a bare `INSERT` per transaction (see the
//! repository's BENCHMARKS.md); a single caller waits for its sync as before. A write that
//! fails is answered with its error and the others of its batch are written again without it;
//! a commit that fails fails every call of its batch (fail closed: none of them is known to be
//! on disk). The writer is a thread of the store's own, started on the first write; it stops
//! when the store's last clone is dropped.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod group_commit;
mod inspect;
mod migrate;
mod record;
mod sql;
mod store;
mod write_transaction;

pub use store::{SqliteStore, DEFAULT_BUSY_TIMEOUT, DEFAULT_CONNECTIONS, DEFAULT_TABLE};

/// The sqlx this store is built on, for building your own pool or running your own statements.
pub use sqlx;

/// The README's example, compiled with the doc tests so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
