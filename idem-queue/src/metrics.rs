//! The work queue's metrics, through the [`metrics`](https://docs.rs/metrics) facade (next to
//! idem-core's per-call ones, [`idem_core::metrics`]: each job also counts as a call of the
//! handler `idem::queue::run`).
//!
//! | name | kind | labels | what |
//! | --- | --- | --- | --- |
//! | `idem_queue_jobs_total` | counter | `outcome` | attempts, by how they ended: `done`, `retried` (a failure with attempts left), `dead` (dead-lettered), `released` (given back without counting: another run held the key, or the store failed) |
//! | `idem_queue_job_seconds` | histogram | | one attempt, from claim to settlement |
//! | `idem_queue_jobs` | gauge | `queue`, `state` | jobs `queued`, `running` (lease live), `stale` (lease lapsed), `done`, `dead`, as of the last [`Queue::stats`](super::Queue::stats) (which [`Queue::spawn_metrics`](super::Queue::spawn_metrics) reads periodically) |

/// Counter: attempts by outcome.
pub const JOBS: &str = "idem_queue_jobs_total";
/// Histogram (seconds): one attempt.
pub const JOB_SECONDS: &str = "idem_queue_job_seconds";
/// Gauge: jobs by state.
pub const JOBS_IN_STATE: &str = "idem_queue_jobs";
