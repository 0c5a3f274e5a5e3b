//! Hooks for tests and benchmarks, with the `testing` feature: not part of the store's API.
//!
//! - [`TestStore`] and friends build the store a test runs on, in a schema of its own on the
//!   server `DATABASE_URL` names: idem's own tests, test worker processes and benchmarks share
//!   them.
//! - [`PoolProbe`] finds a pooled connection left inside a transaction.
//! - [`CountingProxy`] counts the statements and round trips a pool sends.
//! - The plan helpers read the plans the store's connections keep, for the tests that hold
//!   every statement to reading its rows by key.

mod open_transactions;
mod plans;
mod store;
mod wire;

pub use open_transactions::PoolProbe;
pub use plans::{
    arrays_scanned_per_row, custom_plan, fresh_claim, generic_plan, generic_plan_json,
    page_statements, statements, whole_reads, whole_reads_bounded, RECORDS_INDEXES,
};
pub use store::{
    database_url, lock_row, lock_row_where, named_pool, pg_store, pool, unique_schema,
    until_lock_waits, TestStore,
};
pub use wire::CountingProxy;
