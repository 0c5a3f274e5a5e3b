//! The work queue's metrics, through the [`metrics`](https://docs.rs/metrics) facade (next to
//! idem-core's per-call ones, [`idem_core::metrics`]: each job also counts as a call of the
//! handler `idem::queue::run`).
//!
//! | name | kind | labels | what |
//! | --- | --- | --- | --- |
//! | `idem_queue_jobs_total` | counter | `outcome` | attempts, by how they ended: `done`, `retried` (a failure with attempts left), `dead` (dead-lettered), `released` (given back without counting: another run held the key, or the store failed), `snoozed`, `cancelled` |
//! | `idem_queue_job_seconds` | histogram | | one attempt, from claim to settlement |
//! | `idem_schedule_missed_total` | counter | `schedule`, `reason` | ticks missed: `not_enqueued` (older than the catch-up window when a scheduler came back) or `not_completed` (their job had not completed within the grace period) |
//! | `idem_schedule_missed` | gauge | `schedule` | every tick missed so far, from the schedules' table (set by [`Queue::record_schedule_metrics`](super::Queue::record_schedule_metrics), which [`Queue::spawn_metrics`](super::Queue::spawn_metrics) calls): the same on every replica |
//! | `idem_schedule_last_success_timestamp` | gauge | `schedule` | when the latest tick verified as completed finished (Unix seconds): alert when it is older than the schedule's period |
//! | `idem_queue_jobs` | gauge | `queue` (the table, `schema.table`), `state` | jobs `queued`, `running` (lease live), `stale` (lease lapsed), `done`, `dead`, `cancelled`, as of the last [`Queue::stats`](super::Queue::stats) (which [`Queue::spawn_metrics`](super::Queue::spawn_metrics) reads periodically) |

/// Counter: attempts by outcome.
pub const JOBS: &str = "idem_queue_jobs_total";
/// Histogram (seconds): one attempt.
pub const JOB_SECONDS: &str = "idem_queue_job_seconds";
/// Gauge: jobs by state.
pub const JOBS_IN_STATE: &str = "idem_queue_jobs";
/// Counter: a schedule's missed ticks, by reason.
pub const SCHEDULE_MISSED: &str = "idem_schedule_missed_total";
/// Gauge (Unix seconds): when a schedule's latest verified tick finished.
pub const SCHEDULE_LAST_SUCCESS: &str = "idem_schedule_last_success_timestamp";
/// Gauge: a schedule's missed ticks so far, from its table.
pub const SCHEDULE_MISSED_NOW: &str = "idem_schedule_missed";
