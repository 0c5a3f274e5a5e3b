//! # idem-sql: what idem's SQL stores share
//!
//! The operator's inspection ([`idem_core::Inspect`]) of a records table and its journal,
//! written once over sqlx's [`Database`](sqlx::Database): each SQL store
//! (`idem-store-postgres`, `idem-store-sqlite`) writes its statements ([`InspectSql`]) in its
//! own dialect, in the parameter order this crate binds, and runs them through an
//! [`Inspector`] on its own connections. The reading, the keyset paging and the decoding of
//! rows live here, once. An application needs none of it: use a store.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod inspect;

pub use inspect::{InspectSql, Inspector};
