//! Schedules: cron expressions (or fixed intervals) whose every tick is an idempotent enqueue.
//!
//! Every replica runs the same [`Scheduler`]; each computes the same ticks and enqueues each as
//! a job keyed by the schedule's name and the tick's time, so the enqueue dedupes and each tick
//! runs once, with no leader. A table beside the queue's (`<table>_schedules`) keeps, per
//! schedule, the last tick considered, so that after downtime the ticks within
//! [`catch_up`](Schedule::catch_up) are enqueued once each and the older ones are counted as
//! missed, never silently dropped; and whether each tick's job completed within
//! [`grace`](Schedule::grace), the heartbeat check that says when a scheduled job did not run.
//!
//! `schedule.rs` is the schedule itself (parse, validate, compute ticks), `tick.rs` a tick as
//! a job's key, `scheduler.rs` the loop that fires them, `state.rs` a schedule's state as its table keeps it,
//! `operate.rs` what operators read and change there (the table's statements are the queue's
//! `db/schedules.rs`).

mod operate;
mod schedule;
mod scheduler;
pub(crate) mod state;
pub(crate) mod tick;

pub use schedule::{Schedule, ScheduleError, DEFAULT_CATCH_UP, DEFAULT_GRACE, MAX_NAME_LEN};
pub use scheduler::{PassReport, Scheduler, SchedulerHandle, DEFAULT_CHECK_EVERY};
pub use state::ScheduleState;
pub use tick::Tick;
