//! The campaign's workloads: what runs, on which store, and which faults reach it.

use std::time::Duration;

use super::plan::Target;

/// The PostgreSQL schema of the campaign's store, queue and transactional effects.
pub const SCHEMA: &str = "faults";

/// The lease of every call and job: short, so that stalls and kills outlast it and work is
/// taken over within the run.
pub const LEASE: Duration = Duration::from_secs(2);

/// What a group of worker processes runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Workload {
    /// `#[idempotent]` calls in lease mode on PostgreSQL.
    PgLease,
    /// `#[idempotent]` calls in transactional mode on PostgreSQL: the effect is a row of the
    /// call's transaction.
    PgTransaction,
    /// `#[idempotent]` calls in lease mode on Redis (an append-only file synced at every write).
    RedisLease,
    /// `#[idempotent]` calls in lease mode on SQLite (a file the processes share).
    SqliteLease,
    /// The work queue, jobs claimed as slots free up.
    Queue,
    /// The work queue with prefetching.
    QueuePrefetch,
    /// `idem-http`'s `Idempotency-Key` layer on PostgreSQL, in server processes that clients
    /// (the campaign's own) retry against.
    Http,
    /// A schedule firing every second, its scheduler and workers in every process.
    Schedules,
}

/// The schedule the `Schedules` workload fires: every second, on a named queue of its own, its
/// catch-up window and grace far longer than any fault lasts.
pub fn tick_schedule() -> idem_queue::Schedule {
    idem_queue::Schedule::every("tick", Duration::from_secs(1))
        .expect("a valid schedule")
        .queue("ticks")
        .catch_up(Duration::from_secs(60))
        .grace(Duration::from_secs(30))
}

impl Workload {
    /// Every workload, in the report's order.
    pub const ALL: [Workload; 8] = [
        Workload::PgLease,
        Workload::PgTransaction,
        Workload::Queue,
        Workload::QueuePrefetch,
        Workload::Http,
        Workload::Schedules,
        Workload::RedisLease,
        Workload::SqliteLease,
    ];

    /// The report's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Workload::PgLease => "PostgreSQL, attribute, lease",
            Workload::PgTransaction => "PostgreSQL, attribute, transaction",
            Workload::RedisLease => "Redis, attribute, lease",
            Workload::SqliteLease => "SQLite, attribute, lease",
            Workload::Queue => "PostgreSQL, queue",
            Workload::QueuePrefetch => "PostgreSQL, queue, prefetch 16",
            Workload::Http => "PostgreSQL, HTTP layer",
            Workload::Schedules => "PostgreSQL, schedule every second",
        }
    }

    /// The server whose network and restarts reach it (none for SQLite, a local file).
    pub fn server(self) -> Option<Target> {
        match self {
            Workload::RedisLease => Some(Target::Redis),
            Workload::SqliteLease => None,
            _ => Some(Target::Postgres),
        }
    }

    /// Whether its work is the queue's jobs (enqueued by the campaign, or by schedules).
    pub fn is_queue(self) -> bool {
        matches!(
            self,
            Workload::Queue | Workload::QueuePrefetch | Workload::Schedules
        )
    }

    /// The named queue of a queue workload.
    pub fn queue_name(self) -> &'static str {
        match self {
            Workload::QueuePrefetch => "prefetch",
            Workload::Schedules => "ticks",
            _ => "plain",
        }
    }

    /// Jobs claimed past the free slots.
    pub fn prefetch(self) -> usize {
        match self {
            Workload::QueuePrefetch => 16,
            _ => 0,
        }
    }

    /// How many in-flight effects a fault can catch at once in a process it reaches: the work
    /// that may be running there (with prefetching, the jobs held too, as each slot starts the
    /// next while the last one's outcome is still on the wire); none in transactional mode,
    /// whose effect commits with the key.
    pub fn repeatable_per_process(self, tasks: usize) -> u64 {
        match self {
            Workload::PgTransaction => 0,
            _ => (tasks + self.prefetch()) as u64,
        }
    }

    /// Its ledger's file name.
    pub fn ledger(self) -> String {
        format!("{self:?}.ledger")
    }
}
