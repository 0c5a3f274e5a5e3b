//! The store as one invocation sees it: its claim never outlives the invocation's deadline.
//!
//! idem-core renews a running claim every third of its lease, each time to a full lease from
//! then. An invocation's lease is the time left to its deadline, so unbounded renewals would
//! carry the claim up to two thirds of that past the deadline, when Lambda has already stopped
//! the invocation: the retry Lambda sends after a timeout would find the event in progress.
//! Here a renewal extends the claim to the deadline at most, and past it not at all.

use async_trait::async_trait;
use idem_core::{
    Claim, ClaimRequest, Completion, EffectEntry, EffectRecord, Fence, Fenced, Key, Record, Store,
    StoreError,
};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// `inner`, its renewals ending at `deadline`.
#[derive(Debug, Clone)]
pub(crate) struct UntilDeadline {
    pub(crate) inner: Arc<dyn Store>,
    pub(crate) deadline: Option<SystemTime>,
}

#[async_trait]
impl Store for UntilDeadline {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.inner.claim(request).await
    }

    async fn complete(
        &self,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, StoreError> {
        self.inner.complete(key, fence, completion).await
    }

    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        self.inner.release(key, fence).await
    }

    /// A renewal up to the deadline; past it, none (the claim lapses at the deadline, as the
    /// invocation ends there). The run is told it still holds the key: if it goes on past its
    /// deadline (only outside Lambda) and another run takes the key over, its completion is
    /// refused, as any lapsed run's is.
    async fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Result<Fenced, StoreError> {
        let Some(deadline) = self.deadline else {
            return self.inner.renew(key, fence, lease).await;
        };
        let left = deadline
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        if left.is_zero() {
            return Ok(Fenced::Applied);
        }
        self.inner.renew(key, fence, lease.min(left)).await
    }

    async fn get(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        self.inner.get(key).await
    }

    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }

    fn abandon(&self, key: &Key, fence: Fence) {
        self.inner.abandon(key, fence)
    }

    fn abandon_claim(&self, request: ClaimRequest<'_>) {
        self.inner.abandon_claim(request)
    }

    async fn effect(&self, key: &Key, effect: &str) -> Result<Option<EffectEntry>, StoreError> {
        self.inner.effect(key, effect).await
    }

    async fn record_effect(
        &self,
        key: &Key,
        fence: Fence,
        record: EffectRecord<'_>,
    ) -> Result<Fenced, StoreError> {
        self.inner.record_effect(key, fence, record).await
    }
}
