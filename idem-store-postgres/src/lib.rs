//! # idem-store-postgres: idem's records in PostgreSQL
//!
//! [`PgStore`] keeps idempotency records in one table, shared by every app server that uses the
//! same database: the store to use when "two servers fire the same cron". It takes the
//! application's existing [`sqlx::PgPool`].
//!
//! - **Lease mode** (the default `#[idempotent]`): the claim is committed at once and renewed
//!   while the handler runs; completion is a second statement. Right for long jobs and for side
//!   effects outside the database (emails, payment APIs).
//! - **Transactional mode** (`#[idempotent(.., transaction = tx)]`): the claim, the handler's own
//!   writes and the completion commit in one transaction, or roll back together. Exactly once for
//!   effects in this database; right for short jobs whose effects are database writes.
//!
//! See [`PgStore`] for an example and the repository README for the schema and tuning.

#![warn(missing_docs)]

mod batch;
pub mod claim_batch;
mod connections;
mod duplicate_rate;
mod error;
pub mod extend;
mod fresh_claim;
mod ident;
mod inspect;
mod lease_ops;
mod migrate;
mod records;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod time;
mod transaction;
mod unseen;

pub use ident::MAX_IDENT_LEN;
pub use sqlx;
pub use store::{
    PgStore, PgStoreBuilder, DEFAULT_BATCHES_IN_FLIGHT, DEFAULT_LOCK_TIMEOUT, DEFAULT_SCHEMA,
    DEFAULT_TABLE,
};
pub use transaction::PgTransaction;
