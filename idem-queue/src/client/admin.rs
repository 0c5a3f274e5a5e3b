//! The operator's side: counts, one job's state, dead letters, purging finished jobs.

use std::sync::Mutex;
use std::time::Duration;

use idem_core::{Operation, StoreError};

use crate::job::{Cancel, DeadJob, JobFilter, JobInfo, JobResult, JobState, JobStatus, QueueStats};
use crate::queue::{failed, Queue};
use idem_postgres_core::extend::Resend;

impl Queue {
    /// Counts of jobs by state (one statement, counting the table).
    pub async fn stats(&self) -> Result<QueueStats, StoreError> {
        let stats = self
            .sql
            .admin
            .stats(self.store.pool())
            .await
            .map_err(failed(Operation::Get))?;
        for (state, n) in [
            ("queued", stats.queued),
            ("running", stats.running),
            ("stale", stats.stale),
            ("done", stats.done),
            ("dead", stats.dead),
            ("cancelled", stats.cancelled),
        ] {
            metrics::gauge!(crate::metrics::JOBS_IN_STATE, "queue" => self.sql.name.clone(), "state" => state)
                .set(n as f64);
        }
        Ok(stats)
    }

    /// Every `every`, reads [`stats`](Self::stats) and
    /// [`record_schedule_metrics`](Self::record_schedule_metrics) on the current Tokio runtime,
    /// which set the `idem_queue_jobs` and `idem_schedule_*` gauges (see
    /// [`metrics`](crate::metrics)), until the returned handle is aborted. Failures are logged
    /// and retried at the next tick.
    pub fn spawn_metrics(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let queue = self.clone();
        idem_core::purge::spawn_every(every, "the queue's gauges", move || {
            let queue = queue.clone();
            async move {
                queue.stats().await?;
                queue.record_schedule_metrics().await.map(|_| 0)
            }
        })
    }

    /// Sets each schedule's gauges from the schedules' table: `idem_schedule_missed` (every
    /// tick missed so far) and `idem_schedule_last_success_timestamp`. Read from the table, they
    /// agree on every replica and hold whatever a scheduler's counter increments missed (one
    /// that died right after its update, say): alert on these.
    pub async fn record_schedule_metrics(&self) -> Result<(), StoreError> {
        for state in self.schedules().await? {
            metrics::gauge!(crate::metrics::SCHEDULE_MISSED_NOW, "schedule" => state.name.clone())
                .set(state.missed as f64);
            if let Some(at) = state.last_success_at {
                let secs = at
                    .duration_since(std::time::SystemTime::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                metrics::gauge!(crate::metrics::SCHEDULE_LAST_SUCCESS, "schedule" => state.name)
                    .set(secs);
            }
        }
        Ok(())
    }

    /// One job's state, or `None` if no job has this key (never enqueued, discarded or purged).
    pub async fn status(&self, key: &str) -> Result<Option<JobStatus>, StoreError> {
        if unstorable(key) {
            return Ok(None);
        }
        self.sql
            .admin
            .status(self.store.pool(), key)
            .await
            .map_err(failed(Operation::Get))
    }

    /// The job `key` as operators see it (what `idem jobs show` prints), or `None`.
    pub async fn job(&self, key: &str) -> Result<Option<JobInfo>, StoreError> {
        if unstorable(key) {
            return Ok(None);
        }
        self.sql
            .admin
            .job(self.store.pool(), key)
            .await
            .map_err(failed(Operation::Get))
    }

    /// Up to `limit` jobs, newest first, in the state `filter` names (every job without one):
    /// what `idem jobs list` prints.
    pub async fn jobs(
        &self,
        filter: Option<JobFilter>,
        limit: usize,
    ) -> Result<Vec<JobInfo>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.sql
            .admin
            .jobs(self.store.pool(), filter.map(JobFilter::as_str), limit)
            .await
            .map_err(failed(Operation::Get))
    }

    /// Up to `limit` dead-lettered jobs, oldest first.
    pub async fn dead(&self, limit: usize) -> Result<Vec<DeadJob>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.sql
            .admin
            .dead(self.store.pool(), limit)
            .await
            .map_err(failed(Operation::Get))
    }

    /// Puts a dead-lettered job back in the queue with a fresh attempt count, to run now.
    /// Returns whether the key named a dead job. The claims before keep their fences: a worker
    /// that stalled on one of them and resumes cannot renew or settle the new run.
    pub async fn retry_dead(&self, key: &str) -> Result<bool, StoreError> {
        if unstorable(key) {
            return Ok(false);
        }
        let revived = self
            .sql
            .admin
            .retry_dead(self.store.pool(), key)
            .await
            .map_err(failed(Operation::RetryDead))?;
        if revived {
            self.wake_workers().await?;
        }
        Ok(revived)
    }

    /// Puts every dead-lettered job back in the queue ([`retry_dead`](Self::retry_dead) each,
    /// oldest first) and returns their keys. Each retry stands on its own: stopped midway, the
    /// jobs retried so far stay retried.
    pub async fn retry_all_dead(&self) -> Result<Vec<String>, StoreError> {
        let mut retried = Vec::new();
        for job in self.dead(usize::MAX >> 1).await? {
            if self.retry_dead(&job.key).await? {
                retried.push(job.key);
            }
        }
        Ok(retried)
    }

    /// Deletes a dead-lettered job; its key can then be enqueued again. Returns whether the key
    /// named a dead job.
    pub async fn discard(&self, key: &str) -> Result<bool, StoreError> {
        if unstorable(key) {
            return Ok(false);
        }
        self.sql
            .admin
            .discard(self.store.pool(), key)
            .await
            .map_err(failed(Operation::Discard))
    }

    /// Deletes up to `limit` jobs done, and up to `limit` cancelled before they ever started,
    /// more than `older_than` ago, and returns how many. Until then, enqueueing a finished
    /// job's key again is a duplicate. Dead jobs stay until discarded, and so do jobs cancelled
    /// while or after they ran (their key enqueued again must not run them again); a purged
    /// cancelled job leaves no record (it never ran, and its key may be enqueued again). A done
    /// job that finished less than a day ago (its call's keep) leaves its
    /// idempotency record, completed, for the rest of that day, so its key enqueued again is
    /// recognised as done and not run (the done row was the record until then: see the
    /// [crate docs](crate)).
    ///
    /// Purging also keeps claims fast: a claim reads past the index entries of every job run
    /// since the table was last vacuumed, and autovacuum comes once dead row versions reach a
    /// share of the table's rows (a hundredth: the queue's migrations set it), so the more
    /// finished jobs the table keeps, the longer between vacuums (see the crate's
    /// [tuning notes](crate#tuning)).
    pub async fn purge_done(&self, older_than: Duration, limit: usize) -> Result<u64, StoreError> {
        self.purge_done_from(older_than, limit, &Mutex::new(None))
            .await
    }

    /// Deletes every job that finished more than `older_than` ago, `batch` at a time, and
    /// returns how many. Each batch starts where the one before ended, in `finished_at` order,
    /// rather than at the start of the done jobs (past the index entries of the jobs the drain
    /// already deleted, which stay until VACUUM); a job passed over (locked when its batch
    /// came) is deleted by the next drain.
    pub async fn purge_all_done(
        &self,
        older_than: Duration,
        batch: usize,
    ) -> Result<u64, StoreError> {
        let from = Mutex::new(None);
        idem_core::purge::drain(batch, |limit| {
            self.purge_done_from(older_than, limit, &from)
        })
        .await
    }

    /// One purge batch of a drain that `from` follows: the last `finished_at` (epoch µs) the
    /// drain's previous batch took, `None` before its first.
    async fn purge_done_from(
        &self,
        older_than: Duration,
        limit: usize,
        from: &Mutex<Option<i64>>,
    ) -> Result<u64, StoreError> {
        let start = *from.lock().unwrap_or_else(|e| e.into_inner());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let admin = &self.sql.admin;
        let (deleted, end) = idem_postgres_core::on_connection!(self.store, Resend::OnLostConnection, conn => admin.purge_done(&mut *conn, older_than, limit, start))
            .map_err(failed(Operation::Purge))?;
        if end.is_some() {
            *from.lock().unwrap_or_else(|e| e.into_inner()) = end;
        }
        Ok(deleted)
    }

    /// Every `every`, deletes jobs finished more than `older_than` ago, `batch` at a time, on
    /// the current Tokio runtime until the returned handle is aborted (idem-core's one purge
    /// loop, [`idem_core::purge::spawn_every`]). Failures are logged and retried at the next
    /// tick. Dead jobs are kept.
    pub fn spawn_purger(
        &self,
        every: Duration,
        older_than: Duration,
        batch: usize,
    ) -> tokio::task::JoinHandle<()> {
        let queue = self.clone();
        idem_core::purge::spawn_every(every, "finished idem jobs", move || {
            let queue = queue.clone();
            async move { queue.purge_all_done(older_than, batch).await }
        })
    }

    /// Wakes this queue's idle workers in every process.
    async fn wake_workers(&self) -> Result<(), StoreError> {
        self.sql
            .admin
            .notify(self.store.pool())
            .await
            .map_err(failed(Operation::Notify))
    }
}

impl Queue {
    /// Cancels the job `key`: one waiting to run (or whose worker died) is `cancelled` at once
    /// and never runs; a running one is asked to stop (its handler hears it at the next lease
    /// renewal, and it ends `cancelled` unless it finishes first: finished work stays done).
    /// `reason` is kept as the job's last error. What `idem jobs cancel` does.
    pub async fn cancel(&self, key: &str, reason: &str) -> Result<Cancel, StoreError> {
        if unstorable(reason) {
            return Err(StoreError::msg(
                "the reason holds a NUL character, which PostgreSQL cannot store; nothing was \
                 cancelled",
            )
            .during(Operation::Cancel));
        }
        if unstorable(key) {
            return Ok(Cancel::NotFound);
        }
        loop {
            let (seen, now, asked) = self
                .sql
                .admin
                .cancel(self.store.pool(), key, reason)
                .await
                .map_err(failed(Operation::Cancel))?;
            return Ok(match (seen, now, asked) {
                (None, _, _) => Cancel::NotFound,
                (_, true, _) => Cancel::Cancelled,
                (_, _, true) => Cancel::Requested,
                (Some(state), false, false) => match JobState::parse(&state) {
                    // The job moved on while the statement waited for its row (a claim took
                    // it, or its attempt was settled): look again.
                    JobState::Queued | JobState::Running => continue,
                    ended => Cancel::Finished(ended),
                },
            });
        }
    }

    /// How the job `key` ended, or [`JobResult::Pending`]; `None` if no job has this key
    /// (never enqueued, discarded or purged). A done job's result is its handler's `Ok` value.
    pub async fn result(&self, key: &str) -> Result<Option<JobResult>, StoreError> {
        if unstorable(key) {
            return Ok(None);
        }
        self.sql
            .admin
            .result(self.store.pool(), key)
            .await
            .map_err(failed(Operation::Get))
    }

    /// Waits up to `timeout` for the job `key` to end, and says how ([`result`](Queue::result));
    /// [`JobResult::Pending`] if it had not by then. It reads the job's row at once, then after
    /// 5 ms, then at doubling intervals up to 250 ms: "respond fast, work later" that can also
    /// answer later, at one indexed read per look.
    pub async fn wait_result(
        &self,
        key: &str,
        timeout: std::time::Duration,
    ) -> Result<Option<JobResult>, StoreError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut pause = std::time::Duration::from_millis(5);
        loop {
            let result = self.result(key).await?;
            if !matches!(result, Some(JobResult::Pending)) {
                return Ok(result);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(result);
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(250));
        }
    }
}

/// Whether PostgreSQL cannot store `text`: it holds a NUL character. No job has such a key
/// (enqueue refuses one), so a lookup of one finds nothing without asking the server, which
/// would refuse the statement.
pub(crate) fn unstorable(text: &str) -> bool {
    text.contains('\0')
}
