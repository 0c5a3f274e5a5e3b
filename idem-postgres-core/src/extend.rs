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
pub use crate::closing::SNAPSHOT;
pub use crate::connections::{Attempts, Resend, StoreConnection};
pub use crate::error::store_error;
pub use crate::migrate::Migrations;
pub use crate::records::{batch_rows, fence_param, RecordsSql};
pub use crate::time::{batch_start_sql, duration_micros, from_micros, micros_sql, to_micros};
pub use crate::unseen::unseen;
