//! The worker side: what runs jobs. `builder.rs` configures and starts a set of workers,
//! `workers.rs` is the running handle and its shutdown, `producer.rs` claims jobs into free
//! slots (one producer per named queue, prefetching under a backlog), `tasks.rs` its job tasks
//! and the slots they hold, `listen.rs` wakes idle
//! producers on new work, `executor.rs` runs one claimed job as an idempotent call,
//! `job_store.rs` is that call's view of the store (its first claim answered by the queue's
//! claim, its renewal and completion extended to the job's row), `held.rs` the claims a set of
//! workers holds (given back at shutdown), `claimed.rs` a claimed job, `started.rs` the start
//! times of prefetched jobs, `shared.rs` what the roles of one set of workers share. How a
//! claim ends is the [`completer`](crate::completer)'s.

pub(crate) mod builder;
pub(crate) mod claimed;
pub(crate) mod executor;
pub(crate) mod held;
pub(crate) mod job_store;
pub(crate) mod listen;
pub(crate) mod producer;
pub(crate) mod shared;
pub(crate) mod started;
pub(crate) mod tasks;
pub(crate) mod workers;
