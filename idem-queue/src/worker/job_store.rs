//! One claimed job's view of the store its call runs on: the queue's [`PgStore`], except that
//!
//! - the call's first claim is answered with the fence the queue's claim statement reserved for
//!   the job's record (no statement of its own). That statement writes no record, and neither
//!   does a completion that finds none: the job's row is the record (its claim holds the key,
//!   its `done` state is the completion, and nothing else claims a job's record), until the
//!   call's first renewal or journal entry writes one, or [`Queue::purge_done`] deletes the
//!   done row and writes the record for the rest of its keep. So a job that runs once, briefly,
//!   writes its row twice and no record, as the hand-written loop does,
//! - renewing the call's lease also extends the job's claim, in the same statement (so a
//!   running job is renewed by one loop: idem-core's, on its one policy), and
//! - completing the call also marks the job done, in the same statement; when the store batches,
//!   the completions of concurrent jobs share one statement (`completer/completion.rs`), and
//! - that statement also claims the next job for the slot the finished job frees (unless the
//!   workers are stopping, or prefetching): the job's task runs it next, so a job costs one
//!   statement where there is work waiting (its share of a completion that claims), and no job
//!   is claimed before a slot is free to run it. A next job found tells the producer that the
//!   queue is backlogged, which turns an adaptive prefetch on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use idem_core::{
    Claim, ClaimRequest, Completion, EffectEntry, EffectRecord, Fence, Fenced, Key, Operation,
    Record, Store, StoreError,
};

use crate::completer::completion::{JobCompleteOp, JobCompletion};
use crate::queue::Queue;
use crate::worker::claimed::Claimed;
use crate::worker::held::Holder;
use idem_postgres_core::extend::duration_micros;
use idem_postgres_core::extend::fence_param;
use idem_postgres_core::extend::store_error;
use idem_postgres_core::extend::Resend;
use idem_postgres_core::extend::{self as batch, Op};
use idem_store_postgres::PgStore;

/// The store a job's call runs on. Clones share the job's state.
#[derive(Clone)]
pub(crate) struct JobStore {
    queue: Queue,
    attempt: i32,
    state: Arc<JobState>,
}

impl std::fmt::Debug for JobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobStore")
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

struct JobState {
    /// The claim of the record the queue's claim statement reserved for this job's key, if it
    /// had none: the call's first claim is answered with it.
    claimed: Mutex<Option<Claim>>,
    /// Whether the call's record is written: not while its fence is only reserved (see the
    /// module docs), until a renewal writes it.
    written: AtomicBool,
    marked_done: AtomicBool,
    /// Whether a completion was sent (only the first claims the next job).
    completion_sent: AtomicBool,
    /// The workers whose slot this job holds, for the completion to claim the next job for.
    workers: Option<Arc<Holder>>,
    /// Whether the job's task holds its slot for as long as it runs (a job claimed for a free
    /// slot, or one such a job's completion claimed): only then may its completion claim the
    /// next job, which runs in the same task. A prefetched job's slot frees when its handler
    /// ends; a next job run after it would run in no slot.
    whole_slot: bool,
    /// The job the completion claimed for this slot.
    next: Mutex<Option<Claimed>>,
    /// Set when a renewal hears that an operator cancelled the job.
    cancel: tokio::sync::watch::Sender<bool>,
}

impl JobStore {
    /// The store of a job with `attempt`, with the record its claim took (if any), running in
    /// a slot of `workers` (`None`: its completion claims nothing), that slot held by its task
    /// throughout when `whole_slot` (else its completion claims nothing either).
    pub(crate) fn new(
        queue: Queue,
        attempt: i32,
        claimed: Option<Claim>,
        workers: Option<Arc<Holder>>,
        whole_slot: bool,
        cancel: tokio::sync::watch::Sender<bool>,
    ) -> JobStore {
        JobStore {
            queue,
            attempt,
            state: Arc::new(JobState {
                written: AtomicBool::new(claimed.is_none()),
                claimed: Mutex::new(claimed),
                marked_done: AtomicBool::new(false),
                completion_sent: AtomicBool::new(false),
                workers,
                whole_slot,
                next: Mutex::new(None),
                cancel,
            }),
        }
    }

    /// The job the completion claimed for this job's slot, to run next.
    pub(crate) fn take_next(&self) -> Option<Claimed> {
        self.state
            .next
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
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
        let request = JobCompletion {
            sql: self.queue.sql.clone(),
            key: key.as_str().to_owned(),
            fence: fence_param(fence),
            output: completion.output.map(<[u8]>::to_vec),
            keep: duration_micros(completion.keep),
            attempt: self.attempt,
            // Only the first completion claims: one sent again (the first failed, or its
            // caller went away) may follow a first that claimed a job whose answer was lost,
            // and a second claim would take another.
            // A queue with a global limit claims under its lock only (see `ClaimSql::claim_limited`).
            next: self.state.workers.clone().filter(|workers| {
                workers.global_limit.is_none()
                    && self.state.whole_slot
                    && !workers.prefetching.load(Ordering::SeqCst)
                    && !workers.stopping.load(Ordering::SeqCst)
                    && !self.state.completion_sent.swap(true, Ordering::SeqCst)
            }),
        };
        let store = self.inner();
        let (completed, done, next) = match &self.queue.completions {
            Some(batcher) => batch::submit(store, batcher, request).await?,
            None => JobCompleteOp::one(store, &request).await?,
        };
        self.state.marked_done.store(done, Ordering::SeqCst);
        if let Some(next) = next {
            if let Some(workers) = &self.state.workers {
                workers.backlog.seen();
            }
            *self.state.next.lock().unwrap_or_else(|e| e.into_inner()) = Some(next);
        }
        Ok(if completed {
            Fenced::Applied
        } else {
            Fenced::Lost
        })
    }

    async fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Result<Fenced, StoreError> {
        let sql = &self.queue.sql.complete;
        let holder = self.state.workers.as_ref().map(|w| w.worker.as_str());
        let renewed = idem_postgres_core::on_connection!(self.inner(), Resend::OnLostConnection, conn => sql.renew(&mut *conn, key.as_str(), fence, lease, self.attempt, holder))
            .map_err(|e| store_error(e).during(Operation::Renew))?;
        if renewed.jobs == 0 {
            tracing::debug!("the job's claim was settled or taken over before its renewal");
        }
        if renewed.cancel && !self.state.cancel.send_replace(true) {
            tracing::info!("the job was cancelled while it runs; its handler is told");
        }
        Ok(if renewed.records == 1 {
            self.state.written.store(true, Ordering::SeqCst);
            Fenced::Applied
        } else {
            Fenced::Lost
        })
    }

    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        match self.inner().release(key, fence).await? {
            // Nothing written to release: the job's settlement gives its claim back.
            Fenced::Lost if !self.state.written.load(Ordering::SeqCst) => Ok(Fenced::Applied),
            released => Ok(released),
        }
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

    fn abandon_claim(&self, request: ClaimRequest<'_>) {
        self.inner().abandon_claim(request)
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
        // A journal entry is written only under the call's record (it checks the fence there),
        // so a record whose fence is only reserved is written first, as a renewal does.
        if !self.state.written.load(Ordering::SeqCst) {
            let lease = self
                .state
                .workers
                .as_ref()
                .map_or(idem_core::DEFAULT_LEASE, |workers| workers.lease);
            if self.renew(key, fence, lease).await? == Fenced::Lost {
                return Ok(Fenced::Lost);
            }
        }
        self.inner().record_effect(key, fence, record).await
    }
}
