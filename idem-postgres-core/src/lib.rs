//! # idem-postgres-core: the layers of idem's PostgreSQL store
//!
//! The implementation behind [`idem-store-postgres`](https://docs.rs/idem-store-postgres),
//! which presents its API ([`PgStore`] and what comes with it), and the lower layer that crates
//! building on the store use ([`extend`]): the records table's statements to compose with, the
//! store's connections ([`on_connection!`]), its batching, its error classification, the wire
//! encodings and versioned migrations ([`extend::Migrations`]). Those crates (`idem-queue`)
//! depend on this one at the exact version of the store: the layers make no promise of
//! stability beyond it. Applications use `idem-store-postgres`, whose guide is the manual.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod batch;
mod closing;
mod connections;
mod duplicate_rate;
mod error;
pub mod extend;
mod fences;
mod fresh_claim;
mod ident;
mod inspect;
mod lease_ops;
mod migrate;
pub mod own_table;
mod records;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod time;
mod transaction;
mod tx_conn;
mod unseen;

pub use closing::ClosingTransaction;
pub use ident::MAX_IDENT_LEN;
pub use sqlx;
pub use store::{
    PgStore, PgStoreBuilder, DEFAULT_BATCHES_IN_FLIGHT, DEFAULT_LOCK_TIMEOUT, DEFAULT_SCHEMA,
    DEFAULT_TABLE,
};
pub use transaction::PgTransaction;
