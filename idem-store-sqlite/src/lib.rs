//! # idem-store-sqlite: a durable, embedded idem store
//!
//! [`SqliteStore`] keeps idem's records in one SQLite database file: no server to run, and the
//! records survive a restart. Several processes on one machine can open the same file (cron
//! jobs, CLI tools, an edge service with workers): SQLite lets one writer in at a time, and
//! every claim is one `BEGIN IMMEDIATE` transaction, so of any number of concurrent deliveries
//! exactly one runs. Pick it over `MemoryStore` when the work must not repeat after a restart;
//! pick PostgreSQL (`idem-store-postgres`) when several machines share the work.
//!
//! - **WAL mode** ([`SqliteStore::open`] sets it): readers (duplicates) never wait for the
//!   writer.
//! - **Busy timeout** ([`DEFAULT_BUSY_TIMEOUT`], 5 s): a claim waits that long for another
//!   writer's lock, then fails with `StoreError` and the body does not run (fail closed).
//! - **`synchronous = FULL`**: a claim is on disk before the body runs, so not even a power
//!   cut turns a claimed run into one that can run again while its lease lives.
//!
//! Transactional mode (`#[idempotent(transaction = tx)]`, [`idem_core::TransactionalStore`])
//! runs the claim, the handler's writes and the completion in one SQLite transaction; it holds
//! the file's write lock from claim to commit, so keep those bodies short.
//!
//! Times are the processes' wall clock in microseconds (the processes share a machine); a
//! lease therefore moves with a step of that clock.

#![warn(missing_docs)]

mod inspect;
mod migrate;
mod sql;
mod store;

pub use store::{SqliteStore, DEFAULT_BUSY_TIMEOUT, DEFAULT_CONNECTIONS, DEFAULT_TABLE};

/// The sqlx this store is built on, for building your own pool or running your own statements.
pub use sqlx;
