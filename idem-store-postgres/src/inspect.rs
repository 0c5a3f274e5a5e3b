//! [`Inspect`] for [`PgStore`]: the operator's statements (`records/sql.rs`'s `InspectSql`),
//! run through the application's pool.

use async_trait::async_trait;
use idem_core::{
    EffectEntry, EffectState, ExpiredCounts, Fence, Fenced, Fingerprint, Inspect, InspectedEffect,
    InspectedRecord, Key, Operation, Record, RecordCursor, RecordFilter, RecordPage, RecordState,
    RecordStatus, RecordSummary, ScopeCounts, StoreError, SUMMARY_ROWS,
};
use sqlx::postgres::PgRow;
use sqlx::Row;
use std::time::SystemTime;

use crate::closing::{ClosingTransaction, SNAPSHOT};
use crate::error::store_error;
use crate::records::fence;
use crate::time::{from_micros, to_micros};
use crate::PgStore;

/// A row of `InspectSql::find` or `list`.
fn inspected(row: &PgRow) -> Result<InspectedRecord, sqlx::Error> {
    let key: String = row.try_get(0)?;
    let scope: String = row.try_get(1)?;
    // The legacy scope '' (records from before scopes) is listed like any other.
    let key = Key::new(key)
        .and_then(|key| key.with_stored_scope(&scope))
        .map_err(|e| sqlx::Error::Protocol(format!("a stored key is not valid: {e}")))?;
    let completed_at: Option<i64> = row.try_get(5)?;
    let expires_at = from_micros(row.try_get(6)?);
    Ok(InspectedRecord {
        record: Record {
            key,
            fence: fence(row.try_get(2)?),
            fingerprint: row
                .try_get::<Option<String>, _>(3)?
                .map(Fingerprint::from_stored),
            state: RecordState::from_stored(completed_at.map(from_micros), expires_at, None),
        },
        holder: row.try_get(4)?,
        output_bytes: row.try_get::<Option<i64>, _>(7)?.map(i64::unsigned_abs),
    })
}

/// The rows of `find` or `list`, as records.
fn inspected_all(rows: &[PgRow]) -> Result<Vec<InspectedRecord>, StoreError> {
    rows.iter()
        .map(inspected)
        .collect::<Result<_, _>>()
        .map_err(failed(Operation::Get))
}

fn failed(operation: Operation) -> impl Fn(sqlx::Error) -> StoreError {
    move |e| store_error(e).during(operation)
}

#[async_trait]
impl Inspect for PgStore {
    async fn find(
        &self,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Vec<InspectedRecord>, StoreError> {
        let rows = sqlx::query(&self.records().inspect.find)
            .bind(key)
            .bind(scope)
            .fetch_all(self.pool())
            .await
            .map_err(failed(Operation::Get))?;
        inspected_all(&rows)
    }

    async fn list(&self, filter: &RecordFilter) -> Result<Vec<InspectedRecord>, StoreError> {
        let rows = sqlx::query(&self.records().inspect.list)
            .bind(filter.status.map(|status| status.as_str()))
            .bind(filter.scope.as_deref())
            .bind(filter.key_prefix.as_deref())
            .bind(i64::try_from(filter.limit).unwrap_or(i64::MAX))
            .fetch_all(self.pool())
            .await
            .map_err(failed(Operation::Get))?;
        inspected_all(&rows)
    }

    async fn page(
        &self,
        filter: &RecordFilter,
        after: Option<&RecordCursor>,
    ) -> Result<RecordPage, StoreError> {
        let sql = &self.records().inspect;
        // The first page starts at the prefix (keys below it cannot match).
        let (statement, end, key, scope) = match after {
            Some(cursor) => (
                &sql.page_after,
                &sql.scan_end_after,
                cursor.key.as_str(),
                cursor.scope.as_str(),
            ),
            None => (
                &sql.page_from,
                &sql.scan_end_from,
                filter.key_prefix.as_deref().unwrap_or(""),
                "",
            ),
        };
        let scan = i64::try_from(filter.scan.max(1)).unwrap_or(i64::MAX);
        // One snapshot for the page and for where its read stopped: a record deleted between
        // two would move the stop past records nobody read.
        let mut tx = ClosingTransaction::begin(self.pool(), Some(SNAPSHOT))
            .await
            .map_err(failed(Operation::Get))?;
        let page = async {
            let rows = sqlx::query(statement)
                .bind(filter.status.map(|status| status.as_str()))
                .bind(filter.scope.as_deref())
                .bind(filter.key_prefix.as_deref())
                .bind(i64::try_from(filter.limit).unwrap_or(i64::MAX))
                .bind(key)
                .bind(scope)
                .bind(scan)
                .fetch_all(&mut *tx)
                .await
                .map_err(failed(Operation::Get))?;
            let records = inspected_all(&rows)?;
            if filter.limit > 0 && records.len() >= filter.limit {
                return Ok(RecordPage::new(records, filter, None));
            }
            // Not full: the read reached the end, or stopped at `scan` rows (then the next page
            // goes on from the last row read).
            let last_read = sqlx::query(end)
                .bind(key)
                .bind(scope)
                .bind(scan - 1)
                .fetch_optional(&mut *tx)
                .await
                .map_err(failed(Operation::Get))?
                .map(|row| RecordCursor {
                    key: row.get(0),
                    scope: row.get(1),
                });
            Ok(RecordPage::new(records, filter, last_read))
        }
        .await;
        // Read only: ending it either way is the same, and it goes back to the pool. The
        // page's own error, if any, is the one to report.
        let ended = tx.end(false).await;
        let page = page?;
        ended.map_err(failed(Operation::Get))?;
        Ok(page)
    }

    async fn summary(&self, since: SystemTime) -> Result<RecordSummary, StoreError> {
        let sql = &self.records().inspect;
        let rows = sqlx::query(&sql.counts)
            .bind(i64::try_from(SUMMARY_ROWS).unwrap_or(i64::MAX))
            .fetch_all(self.pool())
            .await
            .map_err(failed(Operation::Get))?;
        let read: u64 = rows
            .iter()
            .map(|row| row.get::<i64, _>(2).unsigned_abs())
            .sum();
        let mut summary = RecordSummary {
            scopes: ScopeCounts::group(rows.iter().filter_map(|row| {
                let status = RecordStatus::parse(row.get(1))?;
                Some((row.get(0), status, row.get::<i64, _>(2).unsigned_abs()))
            })),
            partial: read >= SUMMARY_ROWS,
            ..RecordSummary::default()
        };
        let rows = sqlx::query(&sql.completed_per_minute)
            .bind(to_micros(since))
            .fetch_all(self.pool())
            .await
            .map_err(failed(Operation::Get))?;
        summary.completed_per_minute = rows
            .iter()
            .map(|row| (from_micros(row.get(0)), row.get::<i64, _>(1).unsigned_abs()))
            .collect();
        Ok(summary)
    }

    async fn release_lapsed(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        let deleted = sqlx::query(&self.records().inspect.release_lapsed)
            .bind(key.as_str())
            .bind(crate::records::fence_param(fence))
            .execute(self.pool())
            .await
            .map_err(failed(Operation::Release))?;
        Ok(if deleted.rows_affected() > 0 {
            Fenced::Applied
        } else {
            Fenced::Lost
        })
    }

    async fn forget(&self, key: &Key) -> Result<bool, StoreError> {
        let deleted = sqlx::query(&self.records().inspect.forget)
            .bind(key.as_str())
            .bind(key.scope())
            .execute(self.pool())
            .await
            .map_err(failed(Operation::Release))?;
        Ok(deleted.rows_affected() > 0)
    }

    async fn journal(
        &self,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Vec<InspectedEffect>, StoreError> {
        let rows = sqlx::query(&self.records().inspect.journal)
            .bind(key)
            .bind(scope)
            .fetch_all(self.pool())
            .await
            .map_err(failed(Operation::JournalRead))?;
        let entry = |row: &PgRow| -> Result<InspectedEffect, sqlx::Error> {
            Ok(InspectedEffect {
                scope: row.try_get(0)?,
                effect: row.try_get(1)?,
                entry: EffectEntry {
                    state: if row.try_get::<i32, _>(2)? == 1 {
                        EffectState::Done
                    } else {
                        EffectState::Started
                    },
                    output: row.try_get(4)?,
                    fence: fence(row.try_get(3)?),
                },
                recorded_at: row.try_get::<Option<i64>, _>(5)?.map(from_micros),
                expires_at: Some(from_micros(row.try_get(6)?)),
            })
        };
        rows.iter()
            .map(entry)
            .collect::<Result<_, _>>()
            .map_err(failed(Operation::JournalRead))
    }

    async fn count_expired(&self) -> Result<ExpiredCounts, StoreError> {
        let row = sqlx::query(&self.records().inspect.count_expired)
            .fetch_one(self.pool())
            .await
            .map_err(failed(Operation::Purge))?;
        let count = |i| row.try_get::<i64, _>(i).map(i64::unsigned_abs);
        Ok(ExpiredCounts {
            records: count(0).map_err(failed(Operation::Purge))?,
            effects: count(1).map_err(failed(Operation::Purge))?,
        })
    }
}
