//! The store a job's idempotent call runs on: the queue's [`PgStore`], except that completing
//! the call also marks the job done, in the same statement.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use idem_core::{
    Claim, ClaimRequest, Completion, EffectEntry, EffectRecord, Fence, Fenced, Key, Operation,
    Record, Store, StoreError,
};
use sqlx::Row;

use super::Queue;
use crate::direct::on_conn;
use crate::error::store_error;
use crate::time::duration_micros;
use crate::PgStore;

/// One claimed job's view of the store.
#[derive(Debug)]
pub(crate) struct JobStore<'a> {
    queue: &'a Queue,
    attempt: i32,
    /// The record the queue's claim statement took for this job's key, if it had none: the
    /// call's first claim is answered with it, without a statement.
    claimed: Mutex<Option<Claim>>,
    marked_done: AtomicBool,
}

impl<'a> JobStore<'a> {
    pub(crate) fn new(queue: &'a Queue, attempt: i32, claimed: Option<Claim>) -> JobStore<'a> {
        JobStore {
            queue,
            attempt,
            claimed: Mutex::new(claimed),
            marked_done: AtomicBool::new(false),
        }
    }

    /// Whether the call's completion marked the job done.
    pub(crate) fn marked_done(&self) -> bool {
        self.marked_done.load(Ordering::SeqCst)
    }

    fn inner(&self) -> &PgStore {
        &self.queue.store
    }
}

#[async_trait]
impl Store for JobStore<'_> {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let claimed = self
            .claimed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match claimed {
            // Taken with no fingerprint and the call's lease; queue calls declare neither.
            Some(claim) if request.fingerprint.is_none() => Ok(claim),
            _ => self.inner().claim(request).await,
        }
    }

    async fn complete(
        &self,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, StoreError> {
        let sql = &self.queue.sql.complete_and_done;
        let row = on_conn!(self.inner(), conn => sqlx::query(sql)
            .bind(key.as_str())
            .bind(i64::try_from(fence.0).unwrap_or(i64::MAX))
            .bind(completion.output)
            .bind(duration_micros(completion.keep))
            .bind(self.attempt)
            .fetch_one(&mut *conn))
        .map_err(|e| store_error(e).during(Operation::Complete))?;
        let (completed, done): (i64, i64) = (row.get(0), row.get(1));
        self.marked_done.store(done == 1, Ordering::SeqCst);
        Ok(if completed == 1 {
            Fenced::Applied
        } else {
            Fenced::Lost
        })
    }

    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        self.inner().release(key, fence).await
    }

    async fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Result<Fenced, StoreError> {
        self.inner().renew(key, fence, lease).await
    }

    async fn get(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        self.inner().get(key).await
    }

    async fn purge_expired(&self, limit: usize) -> Result<u64, StoreError> {
        self.inner().purge_expired(limit).await
    }

    async fn effect(&self, key: &Key, effect: &str) -> Result<Option<EffectEntry>, StoreError> {
        self.inner().effect(key, effect).await
    }

    async fn record_effect(
        &self,
        key: &Key,
        fence: Fence,
        record: EffectRecord<'_>,
    ) -> Result<Fenced, StoreError> {
        self.inner().record_effect(key, fence, record).await
    }

    fn abandon(&self, key: &Key, fence: Fence) {
        self.inner().abandon(key, fence)
    }
}
