//! Reading the queue for dashboards: keyset pages of jobs from an index range and where
//! each read stopped, states of many jobs, counts per named queue, jobs finished per minute.

use sqlx::{PgExecutor, Row};

use crate::db::fragments::{from_micros_sql, job_columns, job_info, Table, LAPSED_SQL};
use crate::job::{JobInfo, QueueStats};
use idem_postgres_core::extend::micros_sql;

/// The dashboards' statements.
#[derive(Debug)]
pub struct BrowseSql {
    /// `$1` state filter or NULL, `$2` queue or NULL, `$3` key prefix or NULL, `$4` the key the
    /// page starts at (inclusive), `$5` limit, `$6` the most rows read: a page in key order (the
    /// primary key).
    page_from: String,
    /// As `page_from`, starting just after the key `$4`.
    page_after: String,
    /// `$1` key, `$2` rows to pass: the key a page that started at `$1` read last when it read
    /// `$2 + 1` rows (none: it reached the end).
    scan_end_from: String,
    /// As `scan_end_from`, starting just after `$1`.
    scan_end_after: String,
    /// `$1` a finished state, `$2` queue or NULL, `$3` key prefix or NULL, `$4` finished at
    /// (epoch µs) and `$5` key of the previous page's last job, `$6` limit, `$7` the most rows
    /// read: a page of one finished state, newest first, from the finished jobs' index.
    page_finished: String,
    /// `$1` a finished state, `$2` finished at (epoch µs) and `$3` key of the previous page's
    /// last job, `$4` rows to pass: as `scan_end_from`, for `page_finished` (finished at, key).
    scan_end_finished: String,
    /// `$1` keys: each job's key and state (`stale` for a lapsed claim).
    states_of: String,
    /// `$1` the most finished jobs read: counts by queue and state (a queue's rows to add up).
    queue_counts: String,
    /// `$1` since (epoch µs): jobs done and dead per minute (epoch µs of the minute, done,
    /// dead), from the finished jobs' index.
    finished_per_minute: String,
}

/// Which jobs a page holds, and how far its read may go.
#[derive(Debug, Clone, Copy)]
pub struct PageOf<'a> {
    /// The state filter (`stale` too), or every state.
    pub state: Option<&'a str>,
    /// The named queue, or every one.
    pub queue: Option<&'a str>,
    /// The key prefix, or none.
    pub prefix: Option<&'a str>,
    /// The most jobs on the page.
    pub limit: i64,
    /// The most rows read.
    pub scan: i64,
}

impl BrowseSql {
    /// The statements of `t`'s queue.
    pub(crate) fn new(t: &Table) -> BrowseSql {
        let q = &t.q;
        // Keyset paging: `key > ..` is a range of the primary key, so the plan walks the index
        // from there and stops when the page is full.
        // The inner range reads at most `$6` rows of the primary key; the outer filter stops it
        // as soon as the page is full (the executor pulls rows one by one).
        let page = |from: &str| {
            format!(
                "SELECT {} FROM (SELECT * FROM {q} WHERE key {from} $4::text
                                 ORDER BY key LIMIT $6) AS scan
                 WHERE ($1::text IS NULL OR (state = $1 AND NOT ({LAPSED_SQL}))
                        OR ($1 = 'stale' AND {LAPSED_SQL}))
                   AND ($2::text IS NULL OR queue = $2)
                   AND ($3::text IS NULL OR starts_with(key, $3))
                 ORDER BY key LIMIT $5",
                job_columns()
            )
        };
        let scan_end = |from: &str| {
            format!("SELECT key FROM {q} WHERE key {from} $1::text ORDER BY key OFFSET $2 LIMIT 1")
        };
        BrowseSql {
            page_from: page(">="),
            page_after: page(">"),
            scan_end_from: scan_end(">="),
            scan_end_after: scan_end(">"),
            // The literal `state IN (..)` lets every plan, generic ones too, use the finished
            // jobs' partial index; `(finished_at, key) < (..)` is that index's range from the
            // previous page on (`tests/plans.rs`).
            page_finished: format!(
                "SELECT {} FROM (SELECT * FROM {q}
                                 WHERE state IN ('done', 'dead', 'cancelled') AND state = $1
                                   AND (finished_at, key) < ({at}, $5::text)
                                 ORDER BY finished_at DESC, key DESC LIMIT $7) AS scan
                 WHERE ($2::text IS NULL OR queue = $2)
                   AND ($3::text IS NULL OR starts_with(key, $3))
                 ORDER BY finished_at DESC, key DESC LIMIT $6",
                job_columns(),
                at = from_micros_sql("$4"),
            ),
            scan_end_finished: format!(
                "SELECT {}, key FROM {q}
                 WHERE state IN ('done', 'dead', 'cancelled') AND state = $1
                   AND (finished_at, key) < ({at}, $3::text)
                 ORDER BY finished_at DESC, key DESC OFFSET $4 LIMIT 1",
                micros_sql("finished_at"),
                at = from_micros_sql("$2"),
            ),
            states_of: format!(
                "SELECT key, CASE WHEN {LAPSED_SQL} THEN 'stale' ELSE state END
                 FROM {q} WHERE key = ANY($1::text[])"
            ),
            // Waiting and running jobs from their own indexes, every one; finished jobs (the
            // bulk of a big table) only as many as `$1`, so the cost stays bounded.
            queue_counts: format!(
                "SELECT queue, count(*), 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint
                 FROM {q} WHERE state = 'queued' GROUP BY queue
                 UNION ALL
                 SELECT queue, 0, count(*) FILTER (WHERE NOT {LAPSED_SQL}),
                        count(*) FILTER (WHERE {LAPSED_SQL}), 0, 0, 0
                 FROM {q} WHERE state = 'running' GROUP BY queue
                 UNION ALL
                 SELECT queue, 0, 0, 0, count(*) FILTER (WHERE state = 'done'),
                        count(*) FILTER (WHERE state = 'dead'),
                        count(*) FILTER (WHERE state = 'cancelled')
                 FROM (SELECT queue, state FROM {q}
                       WHERE state IN ('done', 'dead', 'cancelled') LIMIT $1) AS finished
                 GROUP BY queue"
            ),
            finished_per_minute: format!(
                "SELECT {}, count(*) FILTER (WHERE state = 'done'),
                        count(*) FILTER (WHERE state = 'dead')
                 FROM {q}
                 WHERE state IN ('done', 'dead') AND finished_at >= {since}
                 GROUP BY 1 ORDER BY 1",
                micros_sql("date_trunc('minute', finished_at)"),
                since = from_micros_sql("$1"),
            ),
        }
    }

    /// Every statement, by name: what the plan tests read.
    #[cfg(feature = "testing")]
    pub fn named(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("page_from", &self.page_from),
            ("page_after", &self.page_after),
            ("scan_end_from", &self.scan_end_from),
            ("scan_end_after", &self.scan_end_after),
            ("page_finished", &self.page_finished),
            ("scan_end_finished", &self.scan_end_finished),
            ("states_of", &self.states_of),
            ("queue_counts", &self.queue_counts),
            ("finished_per_minute", &self.finished_per_minute),
        ]
    }

    /// A page in key order from the key `from` (just after it when `after`).
    pub async fn page<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        page: &PageOf<'_>,
        from: &str,
        after: bool,
    ) -> Result<Vec<JobInfo>, sqlx::Error> {
        let statement = if after {
            &self.page_after
        } else {
            &self.page_from
        };
        let rows = sqlx::query(statement)
            .bind(page.state)
            .bind(page.queue)
            .bind(page.prefix)
            .bind(from)
            .bind(page.limit)
            .bind(page.scan)
            .fetch_all(executor)
            .await?;
        Ok(rows.iter().map(job_info).collect())
    }

    /// The key a page from `from` (just after it when `after`) read last when it read
    /// `passed + 1` rows; `None`: it reached the end.
    pub async fn scan_end<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        from: &str,
        after: bool,
        passed: i64,
    ) -> Result<Option<String>, sqlx::Error> {
        let statement = if after {
            &self.scan_end_after
        } else {
            &self.scan_end_from
        };
        sqlx::query_scalar(statement)
            .bind(from)
            .bind(passed)
            .fetch_optional(executor)
            .await
    }

    /// A page of one finished state (`page.state`), newest first, after the job finished at
    /// `micros` (epoch µs) with `key`.
    pub async fn page_finished<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        page: &PageOf<'_>,
        micros: i64,
        key: &str,
    ) -> Result<Vec<JobInfo>, sqlx::Error> {
        let rows = sqlx::query(&self.page_finished)
            .bind(page.state)
            .bind(page.queue)
            .bind(page.prefix)
            .bind(micros)
            .bind(key)
            .bind(page.limit)
            .bind(page.scan)
            .fetch_all(executor)
            .await?;
        Ok(rows.iter().map(job_info).collect())
    }

    /// As [`scan_end`](Self::scan_end) for [`page_finished`](Self::page_finished): the
    /// (finished at, key) its read stopped at.
    pub async fn scan_end_finished<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        state: Option<&str>,
        micros: i64,
        key: &str,
        passed: i64,
    ) -> Result<Option<(i64, String)>, sqlx::Error> {
        let row = sqlx::query(&self.scan_end_finished)
            .bind(state)
            .bind(micros)
            .bind(key)
            .bind(passed)
            .fetch_optional(executor)
            .await?;
        row.map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .transpose()
    }

    /// Each existing job of `keys`: its key and state (`stale` for a lapsed claim).
    pub async fn states_of<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        keys: &[&String],
    ) -> Result<Vec<(String, String)>, sqlx::Error> {
        let rows = sqlx::query(&self.states_of)
            .bind(keys)
            .fetch_all(executor)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
            .collect()
    }

    /// Counts by named queue and state, reading at most `finished` finished jobs: rows to add
    /// up per queue.
    pub async fn queue_counts<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        finished: i64,
    ) -> Result<Vec<(String, QueueStats)>, sqlx::Error> {
        let rows = sqlx::query(&self.queue_counts)
            .bind(finished)
            .fetch_all(executor)
            .await?;
        rows.iter()
            .map(|row| {
                let count = |i: usize| row.try_get::<i64, _>(i).map(i64::unsigned_abs);
                Ok((
                    row.try_get(0)?,
                    QueueStats {
                        queued: count(1)?,
                        running: count(2)?,
                        stale: count(3)?,
                        done: count(4)?,
                        dead: count(5)?,
                        cancelled: count(6)?,
                    },
                ))
            })
            .collect()
    }

    /// Jobs done and dead per minute since `since` (epoch µs): (the minute, epoch µs, done,
    /// dead).
    pub async fn finished_per_minute<'e>(
        &self,
        executor: impl PgExecutor<'e>,
        since: i64,
    ) -> Result<Vec<(i64, u64, u64)>, sqlx::Error> {
        let rows = sqlx::query(&self.finished_per_minute)
            .bind(since)
            .fetch_all(executor)
            .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get(0)?,
                    row.try_get::<i64, _>(1)?.unsigned_abs(),
                    row.try_get::<i64, _>(2)?.unsigned_abs(),
                ))
            })
            .collect()
    }
}
