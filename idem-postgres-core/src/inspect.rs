//! [`Inspect`] for [`PgStore`]: the operator's statements (`records/sql.rs`'s `inspect`), read
//! by `idem_sql`'s [`Inspector`] through the application's pool. The statements read the
//! server's clock, so none is bound.

use async_trait::async_trait;
use idem_core::{
    ExpiredCounts, Fence, Fenced, Inspect, InspectedEffect, InspectedRecord, Key, Operation,
    RecordCursor, RecordFilter, RecordPage, RecordSummary, StoreError,
};
use idem_sql::Inspector;
use sqlx::pool::PoolConnection;
use sqlx::Postgres;
use std::time::SystemTime;

use crate::closing::{ClosingTransaction, SNAPSHOT};
use crate::error::store_error;
use crate::PgStore;

fn failed(operation: Operation) -> impl Fn(sqlx::Error) -> StoreError {
    move |e| store_error(e).during(operation)
}

impl PgStore {
    /// The operator's statements, read on the server's clock.
    fn inspector(&self) -> Inspector<'_, Postgres> {
        Inspector::new(&self.records().inspect, None)
    }

    /// A connection of the pool, for one of the operator's reads or edits.
    async fn operator(&self, operation: Operation) -> Result<PoolConnection<Postgres>, StoreError> {
        self.pool().acquire().await.map_err(failed(operation))
    }
}

#[async_trait]
impl Inspect for PgStore {
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
        // One snapshot for the page and for where its read stopped.
        let mut tx = ClosingTransaction::begin(self.pool(), Some(SNAPSHOT))
            .await
            .map_err(failed(Operation::Get))?;
        let page = self.inspector().page(&mut tx, filter, after).await;
        // Read only: ending it either way is the same, and it goes back to the pool. The
        // page's own error, if any, is the one to report.
        let ended = tx.end(false).await;
        let page = page.map_err(failed(Operation::Get))?;
        ended.map_err(failed(Operation::Get))?;
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
