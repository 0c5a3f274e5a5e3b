//! [`Inspect`] for [`SqliteStore`]: the operator's statements (`sql.rs`'s `inspect`), read by
//! `idem_sql`'s [`Inspector`] through the store's pool. SQLite has no server clock: the
//! statements that read the time are given this process's (the processes sharing a database
//! file share a machine, and so a clock).

use async_trait::async_trait;
use idem_core::{
    ExpiredCounts, Fence, Fenced, Inspect, InspectedEffect, InspectedRecord, Key, Operation,
    RecordCursor, RecordFilter, RecordPage, RecordSummary, StoreError,
};
use idem_sql::Inspector;
use sqlx::pool::PoolConnection;
use sqlx::Sqlite;
use std::time::SystemTime;

use crate::record::store_error;
use crate::SqliteStore;

fn failed(operation: Operation) -> impl Fn(sqlx::Error) -> StoreError {
    move |e| store_error(e).during(operation)
}

impl SqliteStore {
    /// The operator's statements, read on this process's clock.
    fn inspector(&self) -> Inspector<'_, Sqlite> {
        Inspector::new(&self.inner.sql.inspect, Some(SystemTime::now()))
    }

    /// A connection of the pool, for one of the operator's reads or edits.
    async fn operator(&self, operation: Operation) -> Result<PoolConnection<Sqlite>, StoreError> {
        self.pool().acquire().await.map_err(failed(operation))
    }
}

#[async_trait]
impl Inspect for SqliteStore {
    async fn find(
        &self,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Vec<InspectedRecord>, StoreError> {
        let mut conn = self.operator(Operation::Get).await?;
        self.inspector()
            .find(&mut conn, key, scope)
            .await
            .map_err(failed(Operation::Get))
    }

    async fn list(&self, filter: &RecordFilter) -> Result<Vec<InspectedRecord>, StoreError> {
        let mut conn = self.operator(Operation::Get).await?;
        self.inspector()
            .list(&mut conn, filter)
            .await
            .map_err(failed(Operation::Get))
    }

    async fn page(
        &self,
        filter: &RecordFilter,
        after: Option<&RecordCursor>,
    ) -> Result<RecordPage, StoreError> {
        // One snapshot for the page and for where its read stopped (a read transaction, which
        // sqlx rolls back wherever it is dropped).
        let mut tx = self.pool().begin().await.map_err(failed(Operation::Get))?;
        let page = self
            .inspector()
            .page(&mut tx, filter, after)
            .await
            .map_err(failed(Operation::Get))?;
        tx.commit().await.map_err(failed(Operation::Get))?;
        Ok(page)
    }

    async fn summary(&self, since: SystemTime) -> Result<RecordSummary, StoreError> {
        let mut conn = self.operator(Operation::Get).await?;
        self.inspector()
            .summary(&mut conn, since)
            .await
            .map_err(failed(Operation::Get))
    }

    async fn release_lapsed(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        let mut conn = self.operator(Operation::Release).await?;
        self.inspector()
            .release_lapsed(&mut conn, key, fence)
            .await
            .map_err(failed(Operation::Release))
    }

    async fn forget(&self, key: &Key) -> Result<bool, StoreError> {
        let mut conn = self.operator(Operation::Release).await?;
        self.inspector()
            .forget(&mut conn, key)
            .await
            .map_err(failed(Operation::Release))
    }

    async fn journal(
        &self,
        key: &str,
        scope: Option<&str>,
    ) -> Result<Vec<InspectedEffect>, StoreError> {
        let mut conn = self.operator(Operation::JournalRead).await?;
        self.inspector()
            .journal(&mut conn, key, scope)
            .await
            .map_err(failed(Operation::JournalRead))
    }

    async fn count_expired(&self) -> Result<ExpiredCounts, StoreError> {
        let mut conn = self.operator(Operation::Purge).await?;
        self.inspector()
            .count_expired(&mut conn)
            .await
            .map_err(failed(Operation::Purge))
    }
}
