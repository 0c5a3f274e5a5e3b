//! The records table, at the bottom of the store: its statements (`sql.rs`), its rows and
//! parameters (`rows.rs`), requests that travel to a batch (`requests.rs`), and its
//! operations on a given connection (`ops.rs`). The store, its batches, its transactions and
//! the work queue build on this layer, none of them on each other's helpers.

mod ops;
mod requests;
mod rows;
mod sql;

pub(crate) use ops::*;
pub(crate) use requests::{OwnedClaim, OwnedCompletion};
pub use rows::fence_param;
pub(crate) use rows::{fenced, judge, token_param, ClaimRow, Judged};
pub use sql::{batch_rows, RecordsSql};
