//! One claimed job's view of the store its call runs on: the queue's [`PgStore`], except that
//!
//! - the call's first claim is answered with the record the queue's claim statement took for
//!   the job (no statement of its own),
//! - renewing the call's lease also extends the job's claim, in the same statement (so a
//!   running job is renewed by one loop: idem-core's, on its one policy), and
//! - completing the call also marks the job done, in the same statement.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
use crate::store::fence_param;
use crate::time::duration_micros;
use crate::PgStore;

/// The store a job's call runs on. Clones share the job's state.
#[derive(Debug, Clone)]
pub(crate) struct JobStore {
    queue: Queue,
    attempt: i32,
    state: Arc<JobState>,
}

#[derive(Debug)]
struct JobState {
    /// The record the queue's claim statement took for this job's key, if it had none: the
    /// call's first claim is answered with it.
    claimed: Mutex<Option<Claim>>,
    marked_done: AtomicBool,
}

impl JobStore {
    pub(crate) fn new(queue: Queue, attempt: i32, claimed: Option<Claim>) -> JobStore {
        JobStore {
            queue,
            attempt,
            state: Arc::new(JobState {
                claimed: Mutex::new(claimed),
                marked_done: AtomicBool::new(false),
            }),
        }
    }

    /// Whether the call's completion marked the job done.
    pub(crate) fn marked_done(&self) -> bool {
        self.state.marked_done.load(Ordering::SeqCst)
    }

    fn inner(&self) -> &PgStore {
        &self.queue.store
    }
}

#[async_trait]
impl Store for JobStore {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let claimed = self
            .state
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
            .bind(fence_param(fence))
            .bind(completion.output)
            .bind(duration_micros(completion.keep))
            .bind(self.attempt)
            .fetch_one(&mut *conn))
        .map_err(|e| store_error(e).during(Operation::Complete))?;
        let (completed, done): (i64, i64) = (row.get(0), row.get(1));
        self.state.marked_done.store(done == 1, Ordering::SeqCst);
        Ok(if completed == 1 {
            Fenced::Applied
        } else {
            Fenced::Lost
        })
    }

    async fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Result<Fenced, StoreError> {
        let sql = &self.queue.sql.renew;
        let row = on_conn!(self.inner(), conn => sqlx::query(sql)
            .bind(key.as_str())
            .bind(fence_param(fence))
            .bind(duration_micros(lease))
            .bind(self.attempt)
            .fetch_one(&mut *conn))
        .map_err(|e| store_error(e).during(Operation::Renew))?;
        let (renewed, job): (i64, i64) = (row.get(0), row.get(1));
        if renewed == 1 && job == 0 {
            tracing::debug!("the job's claim was settled or taken over before its renewal");
        }
        Ok(if renewed == 1 {
            Fenced::Applied
        } else {
            Fenced::Lost
        })
    }

    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        self.inner().release(key, fence).await
    }

    async fn get(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        self.inner().get(key).await
    }

    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }

    fn abandon(&self, key: &Key, fence: Fence) {
        self.inner().abandon(key, fence)
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
}
