//! The operator's reads and edits of a records table and its journal: the statements a store
//! writes ([`InspectSql`]) and what runs them ([`Inspector`]).

use std::marker::PhantomData;
use std::time::{Duration, SystemTime};

use idem_core::{
    EffectEntry, EffectState, ExpiredCounts, Fence, Fenced, Fingerprint, InspectedEffect,
    InspectedRecord, Key, Record, RecordCursor, RecordFilter, RecordPage, RecordState,
    RecordStatus, RecordSummary, ScopeCounts, SUMMARY_ROWS,
};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type};

/// The operator's statements on a records table and its journal, in one store's dialect, each
/// taking its parameters in the order given here. A statement that reads the clock takes the
/// time (epoch µs) as its last parameter, marked *now* below, where the store's
/// [`Inspector`] passes one (SQLite); one that reads the server's clock takes none
/// (PostgreSQL). Times in rows are epoch µs.
///
/// A record's row is (key, scope, fence, fingerprint, holder, completed at or NULL, expires
/// at, output length or NULL).
#[derive(Debug, Clone)]
pub struct InspectSql {
    /// `$1` key, `$2` scope or NULL: a key's records, by scope.
    pub find: String,
    /// `$1` status or NULL, `$2` scope or NULL, `$3` key prefix or NULL, `$4` limit, *now*: the
    /// records newest first.
    pub list: String,
    /// `list`'s `$1` to `$4`, then `$5` and `$6` the key and scope the page starts at
    /// (inclusive; a prefix, or `''`, on the first page), `$7` the most rows read, *now*: a
    /// page in primary-key order.
    pub page_from: String,
    /// As `page_from`, starting just after `$5`, `$6` (the previous page's last record).
    pub page_after: String,
    /// `$1` key, `$2` scope, `$3` rows to pass: (key, scope) of the record a page that started
    /// at `$1`, `$2` read last when it read `$3 + 1` rows (no row: it reached the end).
    pub scan_end_from: String,
    /// As `scan_end_from`, starting just after `$1`, `$2`.
    pub scan_end_after: String,
    /// `$1` the most records read, *now*: (scope, status, count).
    pub counts: String,
    /// `$1` since: (the minute, completions in it).
    pub completed_per_minute: String,
    /// `$1` key, `$2` scope, `$3` fence, *now*: deletes an unfinished claim whose lease has
    /// lapsed, returning a row if it did.
    pub release_lapsed: String,
    /// `$1` key, `$2` scope: deletes a completed record, returning a row if it did.
    pub forget: String,
    /// `$1` key, `$2` scope or NULL: a key's journal entries, as (scope, effect, state: 1 done,
    /// fence, output, recorded at or NULL, expires at).
    pub journal: String,
    /// *now*: (expired records, expired journal entries).
    pub count_expired: String,
}

/// Runs a store's [`InspectSql`] on a connection of database `DB` and reads its rows into
/// what [`idem_core::Inspect`] answers. Errors are sqlx's, for the store to classify.
#[derive(Debug)]
pub struct Inspector<'a, DB> {
    sql: &'a InspectSql,
    now: Option<i64>,
    db: PhantomData<fn() -> DB>,
}

impl<'a, DB> Inspector<'a, DB> {
    /// Runs `sql`, binding `now` (epoch µs) last to the statements that read the clock, or
    /// nothing where they read the server's (`None`).
    pub fn new(sql: &'a InspectSql, now: Option<SystemTime>) -> Inspector<'a, DB> {
        Inspector {
            sql,
            now: now.map(micros),
            db: PhantomData,
        }
    }
}

/// Epoch µs (negative before 1970), as the statements take times.
fn micros(at: SystemTime) -> i64 {
    let us = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => us(after),
        Err(before) => -us(before.duration()),
    }
}

/// The time of epoch µs `us`, as rows give times.
fn at(us: i64) -> SystemTime {
    let d = Duration::from_micros(us.unsigned_abs());
    if us >= 0 {
        SystemTime::UNIX_EPOCH + d
    } else {
        SystemTime::UNIX_EPOCH - d
    }
}

fn count(n: i64) -> u64 {
    n.unsigned_abs()
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl<DB> Inspector<'_, DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'r> i64: Decode<'r, DB>,
    i64: Type<DB>,
    for<'r> i32: Decode<'r, DB>,
    i32: Type<DB>,
    for<'r> String: Decode<'r, DB>,
    String: Type<DB>,
    for<'r> Vec<u8>: Decode<'r, DB>,
    Vec<u8>: Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    /// `statement` with its parameters, and *now* last where the store passes one.
    fn query<'q>(
        &self,
        statement: &'q str,
        bind: impl FnOnce(
            sqlx::query::Query<'q, DB, DB::Arguments<'q>>,
        ) -> sqlx::query::Query<'q, DB, DB::Arguments<'q>>,
    ) -> sqlx::query::Query<'q, DB, DB::Arguments<'q>> {
        let query = bind(sqlx::query(statement));
        match self.now {
            Some(now) => query.bind(now),
            None => query,
        }
    }

    /// A key's records, by scope ([`idem_core::Inspect::find`]).
    pub async fn find(
        &self,
        conn: &mut DB::Connection,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Vec<InspectedRecord>, sqlx::Error> {
        let rows = sqlx::query(&self.sql.find)
            .bind(key)
            .bind(scope)
            .fetch_all(conn)
            .await?;
        rows.iter().map(record).collect()
    }

    /// Records newest first ([`idem_core::Inspect::list`]).
    pub async fn list(
        &self,
        conn: &mut DB::Connection,
        filter: &RecordFilter,
    ) -> Result<Vec<InspectedRecord>, sqlx::Error> {
        let rows = self
            .query(&self.sql.list, |q| {
                q.bind(filter.status.map(RecordStatus::as_str))
                    .bind(filter.scope.as_deref())
                    .bind(filter.key_prefix.as_deref())
                    .bind(limit(filter.limit))
            })
            .fetch_all(conn)
            .await?;
        rows.iter().map(record).collect()
    }

    /// A page of records in key order after `after` ([`idem_core::Inspect::page`]), read on
    /// `conn`, which the store keeps in one snapshot for the page and where its read stopped:
    /// a record deleted between the two would move the stop past records nobody read.
    pub async fn page(
        &self,
        conn: &mut DB::Connection,
        filter: &RecordFilter,
        after: Option<&RecordCursor>,
    ) -> Result<RecordPage, sqlx::Error> {
        // The first page starts at the prefix (keys below it cannot match).
        let (statement, end, key, scope) = match after {
            Some(cursor) => (
                &self.sql.page_after,
                &self.sql.scan_end_after,
                cursor.key.as_str(),
                cursor.scope.as_str(),
            ),
            None => (
                &self.sql.page_from,
                &self.sql.scan_end_from,
                filter.key_prefix.as_deref().unwrap_or(""),
                "",
            ),
        };
        let scan = limit(filter.scan.max(1));
        let rows = self
            .query(statement, |q| {
                q.bind(filter.status.map(RecordStatus::as_str))
                    .bind(filter.scope.as_deref())
                    .bind(filter.key_prefix.as_deref())
                    .bind(limit(filter.limit))
                    .bind(key)
                    .bind(scope)
                    .bind(scan)
            })
            .fetch_all(&mut *conn)
            .await?;
        let records = rows.iter().map(record).collect::<Result<Vec<_>, _>>()?;
        if filter.limit > 0 && records.len() >= filter.limit {
            return Ok(RecordPage::new(records, filter, None));
        }
        // Not full: the read reached the end, or stopped at `scan` rows (then the next page
        // goes on from the last row read).
        let last_read = sqlx::query(end)
            .bind(key)
            .bind(scope)
            .bind(scan - 1)
            .fetch_optional(&mut *conn)
            .await?
            .map(|row| {
                Ok::<_, sqlx::Error>(RecordCursor {
                    key: row.try_get(0)?,
                    scope: row.try_get(1)?,
                })
            })
            .transpose()?;
        Ok(RecordPage::new(records, filter, last_read))
    }

    /// Counts by scope and status, and completions per minute since `since`
    /// ([`idem_core::Inspect::summary`]).
    pub async fn summary(
        &self,
        conn: &mut DB::Connection,
        since: SystemTime,
    ) -> Result<RecordSummary, sqlx::Error> {
        let rows = self
            .query(&self.sql.counts, |q| {
                q.bind(i64::try_from(SUMMARY_ROWS).unwrap_or(i64::MAX))
            })
            .fetch_all(&mut *conn)
            .await?;
        let mut counted = Vec::with_capacity(rows.len());
        let mut read = 0;
        for row in &rows {
            let (scope, status, n): (String, String, i64) =
                (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
            read += count(n);
            if let Some(status) = RecordStatus::parse(&status) {
                counted.push((scope, status, count(n)));
            }
        }
        let rows = sqlx::query(&self.sql.completed_per_minute)
            .bind(micros(since))
            .fetch_all(&mut *conn)
            .await?;
        let completed_per_minute = rows
            .iter()
            .map(|row| Ok((at(row.try_get(0)?), count(row.try_get(1)?))))
            .collect::<Result<_, sqlx::Error>>()?;
        Ok(RecordSummary {
            scopes: ScopeCounts::group(counted),
            partial: read >= SUMMARY_ROWS,
            completed_per_minute,
        })
    }

    /// Deletes `key`'s unfinished claim by `fence` if its lease has lapsed
    /// ([`idem_core::Inspect::release_lapsed`]).
    pub async fn release_lapsed(
        &self,
        conn: &mut DB::Connection,
        key: &Key,
        fence: Fence,
    ) -> Result<Fenced, sqlx::Error> {
        let deleted = self
            .query(&self.sql.release_lapsed, |q| {
                q.bind(key.as_str())
                    .bind(key.scope())
                    .bind(i64::try_from(fence.0).unwrap_or(i64::MAX))
            })
            .fetch_optional(conn)
            .await?;
        Ok(if deleted.is_some() {
            Fenced::Applied
        } else {
            Fenced::Lost
        })
    }

    /// Deletes `key`'s completed record ([`idem_core::Inspect::forget`]).
    pub async fn forget(&self, conn: &mut DB::Connection, key: &Key) -> Result<bool, sqlx::Error> {
        let deleted = sqlx::query(&self.sql.forget)
            .bind(key.as_str())
            .bind(key.scope())
            .fetch_optional(conn)
            .await?;
        Ok(deleted.is_some())
    }

    /// A key's journal entries ([`idem_core::Inspect::journal`]).
    pub async fn journal(
        &self,
        conn: &mut DB::Connection,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Vec<InspectedEffect>, sqlx::Error> {
        let rows = sqlx::query(&self.sql.journal)
            .bind(key)
            .bind(scope)
            .fetch_all(conn)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(InspectedEffect {
                    scope: row.try_get(0)?,
                    effect: row.try_get(1)?,
                    entry: EffectEntry {
                        state: if row.try_get::<i32, _>(2)? == 1 {
                            EffectState::Done
                        } else {
                            EffectState::Started
                        },
                        fence: Fence(row.try_get::<i64, _>(3)?.unsigned_abs()),
                        output: row.try_get(4)?,
                    },
                    recorded_at: row.try_get::<Option<i64>, _>(5)?.map(at),
                    expires_at: Some(at(row.try_get(6)?)),
                })
            })
            .collect()
    }

    /// The expired records and journal entries, counted
    /// ([`idem_core::Inspect::count_expired`]).
    pub async fn count_expired(
        &self,
        conn: &mut DB::Connection,
    ) -> Result<ExpiredCounts, sqlx::Error> {
        let row = self
            .query(&self.sql.count_expired, |q| q)
            .fetch_one(conn)
            .await?;
        Ok(ExpiredCounts {
            records: count(row.try_get(0)?),
            effects: count(row.try_get(1)?),
        })
    }
}

/// A record's row (see [`InspectSql`]).
fn record<R>(row: &R) -> Result<InspectedRecord, sqlx::Error>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let key: String = row.try_get(0)?;
    let scope: String = row.try_get(1)?;
    // The legacy scope '' (records from before scopes) is listed like any other.
    let key = Key::new(key)
        .and_then(|key| key.with_stored_scope(&scope))
        .map_err(|e| sqlx::Error::Protocol(format!("a stored key is not valid: {e}")))?;
    let completed_at = row.try_get::<Option<i64>, _>(5)?.map(at);
    Ok(InspectedRecord {
        record: Record {
            key,
            fence: Fence(row.try_get::<i64, _>(2)?.unsigned_abs()),
            fingerprint: row
                .try_get::<Option<String>, _>(3)?
                .map(Fingerprint::from_stored),
            state: RecordState::from_stored(completed_at, at(row.try_get(6)?), None),
        },
        holder: row.try_get(4)?,
        output_bytes: row.try_get::<Option<i64>, _>(7)?.map(count),
    })
}
