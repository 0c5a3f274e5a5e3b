//! What a page for operators reads of the queue: jobs a page at a time (keyset paging, so a
//! page deep into millions of jobs costs what the first does), counts per named queue, and
//! jobs finished per minute.

use std::time::SystemTime;

use idem_core::{Operation, StoreError};
use idem_postgres_core::extend::{from_micros, to_micros, SNAPSHOT};
use idem_store_postgres::ClosingTransaction;

use crate::db::browse::PageOf;
use crate::job::{JobFilter, JobInfo, QueueStats};
use crate::queue::{failed, Queue};

/// Which jobs [`Queue::jobs_page`] lists: every job by default, 50 at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobsQuery {
    /// Only jobs in this state. The finished states (`done`, `dead`, `cancelled`) are listed
    /// newest first; the others, and every job without a state, in key order.
    pub state: Option<JobFilter>,
    /// Only jobs of this named queue.
    pub queue: Option<String>,
    /// Only keys starting with this.
    pub key_prefix: Option<String>,
    /// At most this many.
    pub limit: usize,
    /// At most this many jobs read for one page, matching or not (default
    /// [`PAGE_SCAN`](idem_core::PAGE_SCAN)): a page of rare matches stops there, not full, and
    /// its [`next`](JobPage::next) goes on from the last job read.
    pub scan: usize,
}

impl JobsQuery {
    /// Whether `after` can be where a page of this query ends (a [`JobPage::next`]): a key, or
    /// for a finished state a finish time in epoch µs and a key (`micros:key`).
    pub fn takes_cursor(&self, after: &str) -> bool {
        !finished(self.state) || finished_cursor(after).is_ok()
    }
}

impl Default for JobsQuery {
    fn default() -> Self {
        JobsQuery {
            state: None,
            queue: None,
            key_prefix: None,
            limit: 50,
            scan: idem_core::PAGE_SCAN,
        }
    }
}

/// One page of [`Queue::jobs_page`].
#[derive(Debug, Clone, PartialEq)]
pub struct JobPage {
    /// The jobs.
    pub jobs: Vec<JobInfo>,
    /// Where the next page starts (pass it as `after`), or `None` on the last page: after a
    /// full page its last job; after a page that stopped at the query's `scan` before it was
    /// full, the last job read, so the next page goes on searching from there.
    pub next: Option<String>,
}

/// Jobs finished in one minute ([`Queue::finished_per_minute`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinishedInMinute {
    /// The minute's start.
    pub minute: SystemTime,
    /// Jobs done.
    pub done: u64,
    /// Jobs dead-lettered.
    pub dead: u64,
}

fn finished(state: Option<JobFilter>) -> bool {
    matches!(
        state,
        Some(JobFilter::Done | JobFilter::Dead | JobFilter::Cancelled)
    )
}

/// A page's end in the finished order: `MICROS:KEY`.
/// Where the page after a full one starts: its last job; `None` for a page that is not full
/// (it reached the end, or stopped at its scan).
fn full_page_next(jobs: &[JobInfo], query: &JobsQuery, finished: bool) -> Option<String> {
    let last = jobs
        .last()
        .filter(|_| query.limit > 0 && jobs.len() >= query.limit)?;
    Some(match (finished, last.finished_at) {
        (true, Some(at)) => format!("{}:{}", to_micros(at), last.key),
        _ => last.key.clone(),
    })
}

/// A page of finished jobs ends at a finish time (epoch µs) and a key; a time outside what a
/// job can have finished at (before the epoch, past the double-precision range the statement
/// converts it through) is no page's end.
fn finished_cursor(after: &str) -> Result<(i64, &str), StoreError> {
    after
        .split_once(':')
        .and_then(|(micros, key)| Some((micros.parse().ok()?, key)))
        .filter(|(micros, _)| (0..=1_i64 << 53).contains(micros))
        .ok_or_else(|| StoreError::msg(format!("{after:?} is not where a page of jobs ends")))
}

impl Queue {
    /// A page of the jobs `query` selects, starting after `after` (a previous page's
    /// [`next`](JobPage::next); at the start without one). Every page is read from an index
    /// range: the primary key in key order, or the finished jobs' index, newest first, for a
    /// finished state. A filter on another column (the queue, a key prefix, a state other than
    /// the order's) is checked row by row on that range, so a rare match among many jobs reads
    /// further, up to the query's [`scan`](JobsQuery::scan). The page and where its read
    /// stopped are read in one snapshot.
    pub async fn jobs_page(
        &self,
        query: &JobsQuery,
        after: Option<&str>,
    ) -> Result<JobPage, StoreError> {
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let scan = i64::try_from(query.scan.max(1)).unwrap_or(i64::MAX);
        let of = PageOf {
            state: query.state.map(JobFilter::as_str),
            queue: query.queue.as_deref(),
            prefix: query.key_prefix.as_deref(),
            limit,
            scan,
        };
        let browse = &self.sql.browse;
        // One snapshot for the page and for where its read stopped: a job deleted between two
        // would move the stop past jobs nobody read.
        let mut tx = ClosingTransaction::begin(self.store.pool(), Some(SNAPSHOT))
            .await
            .map_err(failed(Operation::Get))?;
        let page = async {
            if finished(query.state) {
                let (micros, key) = match after {
                    Some(after) => finished_cursor(after)?,
                    // After every job: the end of the range the double-precision product holds
                    // exactly is far beyond any job's finish.
                    None => (1_i64 << 53, ""),
                };
                let jobs = browse
                    .page_finished(&mut *tx, &of, micros, key)
                    .await
                    .map_err(failed(Operation::Get))?;
                if let Some(next) = full_page_next(&jobs, query, true) {
                    return Ok(JobPage {
                        jobs,
                        next: Some(next),
                    });
                }
                let last_read = browse
                    .scan_end_finished(&mut *tx, of.state, micros, key, scan - 1)
                    .await
                    .map_err(failed(Operation::Get))?
                    .map(|(micros, key)| format!("{micros}:{key}"));
                return Ok(JobPage {
                    jobs,
                    next: last_read,
                });
            }
            let (from, past) = match after {
                Some(key) => (key, true),
                // The first page starts at the prefix: keys below it cannot match.
                None => (query.key_prefix.as_deref().unwrap_or(""), false),
            };
            let jobs = browse
                .page(&mut *tx, &of, from, past)
                .await
                .map_err(failed(Operation::Get))?;
            if let Some(next) = full_page_next(&jobs, query, false) {
                return Ok(JobPage {
                    jobs,
                    next: Some(next),
                });
            }
            let last_read = browse
                .scan_end(&mut *tx, from, past, scan - 1)
                .await
                .map_err(failed(Operation::Get))?;
            Ok(JobPage {
                jobs,
                next: last_read,
            })
        }
        .await;
        // Read only: ending it either way is the same, and it goes back to the pool. The
        // page's own error, if any, is the one to report.
        let ended = tx.end(false).await;
        let page = page?;
        ended.map_err(failed(Operation::Get))?;
        Ok(page)
    }

    /// The state of each job of `keys` that exists (`stale` for a running job whose lease
    /// lapsed), in one statement: the last tick's outcome of many schedules, say.
    pub async fn states_of(
        &self,
        keys: &[String],
    ) -> Result<std::collections::HashMap<String, JobFilter>, StoreError> {
        let keys: Vec<&String> = keys
            .iter()
            .filter(|key| !crate::client::admin::unstorable(key))
            .collect();
        let rows = self
            .sql
            .browse
            .states_of(self.store.pool(), &keys)
            .await
            .map_err(failed(Operation::Get))?;
        Ok(rows
            .into_iter()
            .filter_map(|(key, state)| Some((key, JobFilter::parse(&state)?)))
            .collect())
    }

    /// Counts of jobs by state in each named queue, by name, in one statement: every waiting
    /// and running job (from their own indexes), and of the finished ones (done, dead,
    /// cancelled: the bulk of a big table) at most [`COUNTS_FINISHED`], so that the cost stays
    /// bounded; [`QueueCounts::partial`] says when there were more.
    pub async fn queue_counts(&self) -> Result<QueueCounts, StoreError> {
        let rows = self
            .sql
            .browse
            .queue_counts(
                self.store.pool(),
                i64::try_from(COUNTS_FINISHED).unwrap_or(i64::MAX),
            )
            .await
            .map_err(failed(Operation::Get))?;
        let mut queues = std::collections::BTreeMap::<String, QueueStats>::new();
        for (queue, part) in rows {
            let stats = queues.entry(queue).or_default();
            stats.queued += part.queued;
            stats.running += part.running;
            stats.stale += part.stale;
            stats.done += part.done;
            stats.dead += part.dead;
            stats.cancelled += part.cancelled;
        }
        let finished: u64 = queues.values().map(|s| s.done + s.dead + s.cancelled).sum();
        Ok(QueueCounts {
            queues: queues.into_iter().collect(),
            partial: finished >= COUNTS_FINISHED,
        })
    }

    /// Jobs done and dead-lettered in each minute since `since`, oldest first; minutes with
    /// neither are left out. Read from the finished jobs' index: the rows of the window only.
    /// Jobs purged since they finished are not counted.
    pub async fn finished_per_minute(
        &self,
        since: SystemTime,
    ) -> Result<Vec<FinishedInMinute>, StoreError> {
        let rows = self
            .sql
            .browse
            .finished_per_minute(self.store.pool(), to_micros(since))
            .await
            .map_err(failed(Operation::Get))?;
        Ok(rows
            .into_iter()
            .map(|(minute, done, dead)| FinishedInMinute {
                minute: from_micros(minute),
                done,
                dead,
            })
            .collect())
    }
}

/// The most finished jobs [`Queue::queue_counts`] reads.
pub const COUNTS_FINISHED: u64 = 100_000;

/// Counts of jobs by state in each named queue ([`Queue::queue_counts`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Each named queue's counts, by name: every waiting and running job, and the finished
    /// ones read.
    pub queues: Vec<(String, QueueStats)>,
    /// There were more than [`COUNTS_FINISHED`] finished jobs: their counts cover those read.
    pub partial: bool,
}
