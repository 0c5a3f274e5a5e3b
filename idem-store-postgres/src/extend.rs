//! Building on the store: for a crate whose tables sit beside the records and whose statements
//! write records in the same statement as its own rows, as `idem-queue` does (a job's claim
//! reserves its call's fence; its completion marks the job done and completes the record).
//!
//! This is the store's lower layer, as River's `riverdriver` is its client's: the records
//! table's statements to compose with ([`RecordsSql`], from
//! [`PgStore::records`](crate::PgStore::records)), the store's connections
//! ([`on_connection!`](crate::on_connection), [`Attempts`]), its batching ([`Batcher`],
//! [`Op`], [`submit`]), the classification of errors ([`store_error`]), the wire encodings of
//! fences and times, and versioned migrations for the new tables ([`Migrations`]). An
//! application using the store needs none of it.

pub use crate::batch::{hash_record, submit, Batcher, Op};
pub use crate::connections::{Attempts, StoreConnection};
pub use crate::error::store_error;
pub use crate::migrate::Migrations;
pub use crate::records::{batch_rows, fence_param, RecordsSql};
pub use crate::time::{batch_start_sql, duration_micros, from_micros, micros_sql};
pub use crate::unseen::unseen;

/// Whether [`on_connection!`](crate::on_connection) may send a statement again when its connection turns
/// out dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// Never: for a statement that must not be applied twice once it may have been applied
    /// (one that takes whatever rows are free, such as a queue's claim: a second sending would
    /// take a second set while the first sits taken). A lost connection is the call's error.
    Never,
    /// On another connection, while connections the store had kept idle turn out dead: for a
    /// statement that is safe to apply twice (fenced, or keyed so a repeat finds its own
    /// effect).
    OnLostConnection,
}
