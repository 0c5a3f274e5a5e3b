//! The store's own connections: a small set of connections that PgStore keeps checked out and
//! runs its statements on, instead of checking one out of the pool for every statement.
//!
//! sqlx 0.8's pool tests every connection with a round trip when it is returned, so a one-statement
//! store operation through the pool costs two round trips, and the client CPU of both. On
//! connections of its own a store operation is one round trip. They are either held from the pool
//! (the default: taken from it once and kept, so the store never makes the server hold more
//! connections than the pool allows) or opened apart from the pool with its connect options
//! (`dedicated_connections`). A connection whose operation failed or was cancelled mid-way is
//! closed rather than reused, since its state is unknown.
//!
//! By concern, as sqlx splits its pool: `idle.rs` (the idle list and the connections in it),
//! `setup.rs` (a connection's session settings), `lend.rs` (connections lent to open
//! transactions), `retry.rs` (running a statement on a connection, and moving on from a dead
//! one), `direct.rs` (checking connections out and opening them).

mod direct;
mod idle;
mod lend;
mod retry;
mod setup;

pub(crate) use direct::{Direct, Source};
pub(crate) use lend::Lent;
pub(crate) use retry::{on_conn, retry_budget};
pub use retry::{Attempts, Resend, StoreConnection};
pub(crate) use setup::Tuning;
