//! The client side: what an application and its operators call on a [`Queue`](crate::Queue).
//! `enqueue.rs` stores work (idempotent on the key, many in one statement, replace),
//! `admin.rs` reads and changes single jobs (status, results, cancel, dead letters, purge,
//! stats), `browse.rs` pages through the queue for dashboards (keyset pages, counts per named
//! queue, jobs finished per minute). Each binds its statements through [`db`](crate::db).

pub(crate) mod admin;
pub(crate) mod browse;
pub(crate) mod enqueue;
