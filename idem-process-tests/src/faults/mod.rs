//! The fault campaign (`idem-faults`): a workload run through idem, by worker processes, while
//! faults are injected between them and their servers and into the processes themselves, and
//! an independent ledger counts each key's effects.
//!
//! - [`workload`]: what runs: the attribute in lease and transactional mode, the queue with
//!   and without prefetching, the HTTP layer; on PostgreSQL, Redis and SQLite.
//! - [`plan`]: the faults, drawn from a seed: latency spikes, connection resets, half-open
//!   connections and partitions (through [`proxy`]), server restarts, SIGKILL and SIGSTOP.
//! - [`worker`]: a worker process; [`http`]: the HTTP workload's clients.
//! - [`ledger`] and [`tally`]: what the work did, and what that says about the promise.
//! - [`campaign`]: the coordinator and its report.

pub mod campaign;
pub mod http;
pub mod ledger;
pub mod plan;
pub mod proxy;
pub mod tally;
pub mod worker;
pub mod workload;
