//! The scheduler: a loop that, on every replica, enqueues each schedule's due ticks (the
//! enqueue dedupes, so each tick runs once with no leader), counts the ticks it cannot catch up
//! as missed, and checks that each tick's job completed within its grace period.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use idem_core::{Operation, StoreError};
use tokio::sync::watch;

use super::schedule::{Schedule, ScheduleError};
use super::tick::tick_key;
use crate::job::{EnqueueError, NewJob};
use crate::queue::{failed, Queue};

/// How often a scheduler looks at its schedules when no tick falls due sooner, by default: a
/// paused or resumed schedule, and a tick's grace running out, are seen within this.
pub const DEFAULT_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The most ticks one pass walks for one schedule: a schedule that ticks every second and a
/// scheduler down for weeks count their missed ticks in bounded steps.
const MAX_TICKS_PER_PASS: usize = 10_000;

/// Schedules that fire on the queue; [`start`](Scheduler::start) it on every replica.
///
/// ```no_run
/// use idem_queue::{Queue, Schedule};
///
/// # async fn run(queue: Queue) -> Result<(), Box<dyn std::error::Error>> {
/// let scheduler = queue.scheduler(vec![
///     Schedule::cron("daily-report", "0 6 * * *")?.time_zone("Europe/Paris")?,
/// ])?;
/// let running = scheduler.start().await?;
/// // The queue's workers run the ticks' jobs: `job.tick()` names the schedule and its time.
/// // ... on SIGTERM:
/// running.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Scheduler {
    queue: Queue,
    schedules: Vec<Schedule>,
    check_every: Duration,
}

/// A running scheduler; [`shutdown`](SchedulerHandle::shutdown) stops it. Dropped, it leaves
/// the scheduler running for the rest of the runtime's life.
#[derive(Debug)]
#[must_use = "keep the handle to stop the scheduler at shutdown (dropping it leaves it running)"]
pub struct SchedulerHandle {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl SchedulerHandle {
    /// Stops the loop after its current pass and waits for it.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

impl Queue {
    /// A scheduler of `schedules` on this queue. Fails for two schedules with one name, and
    /// for a schedule that would fail at every tick (a payload no job can carry, a catch-up
    /// window under a second).
    pub fn scheduler(&self, schedules: Vec<Schedule>) -> Result<Scheduler, ScheduleError> {
        let mut names = HashSet::new();
        for schedule in &schedules {
            schedule.check()?;
            if !names.insert(schedule.name()) {
                return Err(ScheduleError(format!(
                    "two schedules are named {:?}",
                    schedule.name()
                )));
            }
        }
        Ok(Scheduler {
            queue: self.clone(),
            schedules,
            check_every: DEFAULT_CHECK_EVERY,
        })
    }
}

/// How one pass went for one schedule ([`Scheduler::pass_at`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    /// The schedule's name.
    pub schedule: String,
    /// Ticks enqueued by this pass (or found already enqueued by another replica).
    pub enqueued: usize,
    /// Of those, the ticks this pass stored (the rest another replica had stored first):
    /// across replicas, each tick is stored by one pass.
    pub stored: usize,
    /// Ticks counted as missed: older than the catch-up window.
    pub not_enqueued: u64,
    /// Ticks counted as missed: their job had not completed within the grace period.
    pub not_completed: u64,
}

impl Scheduler {
    /// How often the loop looks when no tick falls due sooner (default
    /// [`DEFAULT_CHECK_EVERY`]).
    pub fn check_every(mut self, every: Duration) -> Scheduler {
        self.check_every = every.max(Duration::from_millis(10));
        self
    }

    /// Declares the schedules (a new one starts at its next tick: there is nothing to catch up
    /// from before it existed) and runs the loop on the current Tokio runtime until
    /// [`shutdown`](SchedulerHandle::shutdown). Needs the queue's tables
    /// ([`Queue::migrate`]).
    pub async fn start(self) -> Result<SchedulerHandle, StoreError> {
        let now = self.database_now().await?;
        self.declare_at(now).await?;
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            // Whether the handle was dropped: the loop then runs on, unstoppable.
            let mut detached = false;
            loop {
                let next = match self.database_now().await {
                    Ok(now) => {
                        self.pass(now).await;
                        self.schedules
                            .iter()
                            .filter_map(|s| s.next_after(now))
                            .min()
                            .and_then(|next| next.duration_since(now).ok())
                            .unwrap_or(self.check_every)
                            .min(self.check_every)
                    }
                    // No pass on another clock: a fast local clock would count ticks as late
                    // before their grace ran out. The next pass catches up.
                    Err(e) => {
                        tracing::warn!(error = %e, "the scheduler cannot read the database's clock; no pass");
                        self.check_every
                    }
                };
                if detached {
                    tokio::time::sleep(next).await;
                    continue;
                }
                tokio::select! {
                    _ = tokio::time::sleep(next) => {}
                    changed = stopped.changed() => match changed {
                        Ok(()) => break,
                        Err(_) => detached = true,
                    },
                }
            }
        });
        Ok(SchedulerHandle { stop, task })
    }

    /// Declares the schedules as of `now`, as [`start`](Self::start) does with the database's
    /// clock: for tests with a manual clock, with [`pass_at`](Self::pass_at).
    pub async fn declare_at(&self, now: SystemTime) -> Result<(), StoreError> {
        for schedule in &self.schedules {
            self.declare_one(schedule, now).await?;
        }
        Ok(())
    }

    /// One pass over every schedule as of `now`; failures are logged and retried next pass.
    async fn pass(&self, now: SystemTime) -> Vec<PassReport> {
        let mut passes = Vec::with_capacity(self.schedules.len());
        for schedule in &self.schedules {
            match self.fire(schedule, now).await {
                Ok(pass) => passes.push(pass),
                Err(e) => {
                    tracing::warn!(schedule = schedule.name(), error = %e, "schedule pass failed");
                    passes.push(PassReport::default());
                }
            }
        }
        passes
    }

    /// One pass over every schedule as if the clock read `now`, as the loop makes one with the
    /// database's clock: enqueues the due ticks, counts the missed ones, checks those whose
    /// grace ran out. For tests with a manual clock, and for callers that drive the scheduler
    /// from a clock of their own. Stops at the first schedule whose statements fail.
    pub async fn pass_at(&self, now: SystemTime) -> Result<Vec<PassReport>, StoreError> {
        let mut passes = Vec::with_capacity(self.schedules.len());
        for schedule in &self.schedules {
            passes.push(self.fire(schedule, now).await?);
        }
        Ok(passes)
    }

    async fn database_now(&self) -> Result<SystemTime, StoreError> {
        self.queue
            .sql
            .schedules
            .now(self.queue.store.pool())
            .await
            .map_err(failed(Operation::Get))
    }

    /// Enqueues `schedule`'s due ticks as of `now`, counts those past its catch-up window as
    /// missed, then checks the ticks whose grace has run out.
    async fn fire(&self, schedule: &Schedule, now: SystemTime) -> Result<PassReport, StoreError> {
        let sql = &self.queue.sql.schedules;
        let pool = self.queue.store.pool();
        let loaded = sql
            .load(pool, schedule.name())
            .await
            .map_err(failed(Operation::Get))?;
        let Some(loaded) = loaded else {
            if schedule.is_stored() {
                // A stored schedule removed by an operator: it stops here (its scheduler is
                // about to be rebuilt without it), and its row is not written again.
                return Ok(PassReport::default());
            }
            // Removed by an operator while still declared in code: declared again, from now.
            self.declare_one(schedule, now).await?;
            return Ok(PassReport::default());
        };
        let (paused, last_tick, verified_through, paused_at, resumed_at) = (
            loaded.paused,
            loaded.last_tick,
            loaded.verified_through,
            loaded.paused_at,
            loaded.resumed_at,
        );
        // The ticks of the latest pause are passed over: after it began, and until it ended.
        let passed_over = |at: SystemTime| match (paused_at, resumed_at) {
            (Some(from), _) if paused => at > from,
            (Some(from), Some(until)) => at > from && at <= until,
            _ => false,
        };
        let mut pass = PassReport {
            schedule: schedule.name().to_owned(),
            ..PassReport::default()
        };

        let ticks = schedule.ticks(last_tick, now, MAX_TICKS_PER_PASS);
        let cutoff = now
            .checked_sub(schedule.catch_up_window())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        // Ticks past the window that were enqueued after all (a pass that enqueued them
        // failed before it could move the schedule on) are not missed.
        let enqueued_before = self.in_queue(schedule, &ticks, cutoff).await?;
        // In order, so that a failure stops the pass at the last tick handled: the next pass
        // goes on from there, and no tick is passed over uncounted.
        let mut latest = last_tick;
        let mut failure = None;
        for &at in &ticks {
            if passed_over(at) {
                // Paused: neither run nor missed.
            } else if at <= cutoff && !enqueued_before.contains(&at) {
                pass.not_enqueued += 1;
            } else if at <= cutoff {
                pass.enqueued += 1;
            } else {
                match self.enqueue_tick(schedule, at).await {
                    Ok(Some(stored)) => {
                        pass.enqueued += 1;
                        pass.stored += usize::from(stored);
                    }
                    Ok(None) => pass.not_enqueued += 1,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            latest = at;
        }
        let next = schedule.next_after(latest.max(now));
        let advanced = sql
            .advance(
                pool,
                schedule.name(),
                last_tick,
                latest,
                pass.not_enqueued as i64,
                next,
            )
            .await
            .map_err(failed(Operation::Schedule))?;
        if !advanced {
            // Another replica moved it on first: its pass counted what was missed.
            pass.not_enqueued = 0;
        } else if pass.not_enqueued > 0 {
            tracing::warn!(
                schedule = schedule.name(),
                missed = pass.not_enqueued,
                catch_up = ?schedule.catch_up_window(),
                "ticks older than the catch-up window were not enqueued: counted as missed"
            );
            metrics::counter!(crate::metrics::SCHEDULE_MISSED, "schedule" => schedule.name().to_owned(), "reason" => "not_enqueued")
                .increment(pass.not_enqueued);
        }
        if let Some(e) = failure {
            return Err(e);
        }
        pass.not_completed = self.verify(schedule, now, verified_through, latest).await?;
        Ok(pass)
    }

    /// Which of `ticks` at or before `cutoff` have a job in the queue.
    async fn in_queue(
        &self,
        schedule: &Schedule,
        ticks: &[SystemTime],
        cutoff: SystemTime,
    ) -> Result<Vec<SystemTime>, StoreError> {
        let old: Vec<SystemTime> = ticks.iter().copied().filter(|&at| at <= cutoff).collect();
        if old.is_empty() {
            return Ok(old);
        }
        let keys: Vec<String> = old.iter().map(|&at| schedule.tick_key(at)).collect();
        let rows = self
            .queue
            .sql
            .schedules
            .jobs(self.queue.store.pool(), &keys)
            .await
            .map_err(failed(Operation::Get))?;
        let found: Vec<String> = rows.into_iter().map(|(key, ..)| key).collect();
        Ok(old
            .into_iter()
            .zip(keys)
            .filter(|(_, key)| found.contains(key))
            .map(|(at, _)| at)
            .collect())
    }

    async fn declare_one(&self, schedule: &Schedule, now: SystemTime) -> Result<(), StoreError> {
        self.queue
            .sql
            .schedules
            .register(
                self.queue.store.pool(),
                schedule.name(),
                &schedule.spec(),
                now,
            )
            .await
            .map_err(failed(Operation::Schedule))
    }

    /// Enqueues the tick at `at`: `Some(stored now)` when it is in the queue (stored by this
    /// call, or before), `None` when it can never be (its job refused: counted as missed), or
    /// the store's error.
    async fn enqueue_tick(
        &self,
        schedule: &Schedule,
        at: SystemTime,
    ) -> Result<Option<bool>, StoreError> {
        let key = tick_key(schedule.name(), at);
        let job = match NewJob::new(key.as_str(), schedule.payload_value()) {
            Ok(job) => job
                .run_at(at)
                .max_attempts(schedule.attempts())
                .queue(schedule.queue_name()),
            Err(e) => {
                tracing::warn!(%key, error = %e, "the tick's job cannot be enqueued: counted as missed");
                return Ok(None);
            }
        };
        match self.queue.enqueue(job).await {
            Ok(enqueued) => Ok(Some(enqueued == crate::job::Enqueued::Queued)),
            // The tick is there with another payload (a deploy changed it meanwhile): it runs
            // as first enqueued.
            Err(EnqueueError::KeyReused { .. }) => {
                tracing::warn!(%key, "the tick was enqueued with another payload; it runs with that one");
                Ok(Some(false))
            }
            Err(EnqueueError::Store(e)) => Err(e),
            Err(e) => {
                tracing::warn!(%key, error = %e, "the tick's job was refused: counted as missed");
                Ok(None)
            }
        }
    }

    /// Checks the ticks in `(verified_through, min(now - grace, latest)]`: a tick whose job is
    /// there and not done is missed (its job did not complete in time); a done one moves the
    /// last success on. A tick with no job was either counted when it could not be enqueued
    /// or purged after it ran. Returns the ticks counted as missed.
    async fn verify(
        &self,
        schedule: &Schedule,
        now: SystemTime,
        verified_through: SystemTime,
        latest: SystemTime,
    ) -> Result<u64, StoreError> {
        let Some(due) = now.checked_sub(schedule.grace_period()) else {
            return Ok(0);
        };
        let upto = due.min(latest);
        let ticks = schedule.ticks(verified_through, upto, MAX_TICKS_PER_PASS);
        let Some(&last) = ticks.last() else {
            return Ok(0);
        };
        let keys: Vec<String> = ticks.iter().map(|&at| schedule.tick_key(at)).collect();
        let pool = self.queue.store.pool();
        let sql = &self.queue.sql.schedules;
        let rows = sql
            .jobs(pool, &keys)
            .await
            .map_err(failed(Operation::Get))?;
        let mut late = Vec::new();
        let mut success: Option<i64> = None;
        for (key, state, finished) in rows {
            if state == "done" {
                success = success.max(finished);
            } else {
                late.push((key, state));
            }
        }
        let verified = sql
            .verify(
                pool,
                schedule.name(),
                verified_through,
                last,
                late.len() as i64,
                success,
            )
            .await
            .map_err(failed(Operation::Schedule))?;
        if !verified {
            return Ok(0);
        }
        for (key, state) in &late {
            tracing::warn!(
                schedule = schedule.name(),
                %key,
                %state,
                grace = ?schedule.grace_period(),
                "a scheduled job did not complete within its grace period: counted as missed"
            );
        }
        if !late.is_empty() {
            metrics::counter!(crate::metrics::SCHEDULE_MISSED, "schedule" => schedule.name().to_owned(), "reason" => "not_completed")
                .increment(late.len() as u64);
        }
        if let Some(success) = success {
            metrics::gauge!(crate::metrics::SCHEDULE_LAST_SUCCESS, "schedule" => schedule.name().to_owned())
                .set(success as f64 / 1e6);
        }
        Ok(late.len() as u64)
    }
}
