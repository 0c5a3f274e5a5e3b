//! Helpers shared by the behaviour tests: a store that fails on command.

#![allow(dead_code)]

use async_trait::async_trait;
use idem_core::{
    Claim, ClaimRequest, Completion, EffectEntry, EffectRecord, Fence, Fenced, Key, MemoryStore,
    Record, Store, StoreError,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A `MemoryStore` whose steps can be made to fail, counting the calls it gets. Clones share
/// the switches and counters (the runtime keeps a clone for the call's journal).
#[derive(Debug, Default, Clone)]
pub struct FlakyStore(Arc<Flaky>);

impl std::ops::Deref for FlakyStore {
    type Target = Flaky;
    fn deref(&self) -> &Flaky {
        &self.0
    }
}

/// The switches and counters of a [`FlakyStore`].
#[derive(Debug, Default)]
pub struct Flaky {
    pub inner: MemoryStore,
    pub fail_claim: AtomicBool,
    pub fail_complete: AtomicBool,
    pub fail_record_effect: AtomicBool,
    pub claims: AtomicUsize,
    pub completes: AtomicUsize,
    pub releases: AtomicUsize,
    pub renews: AtomicUsize,
}

fn down() -> StoreError {
    StoreError::new(
        "store unreachable",
        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused"),
    )
}

#[async_trait]
impl Store for FlakyStore {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        if self.fail_claim.load(Ordering::SeqCst) {
            return Err(down());
        }
        self.inner.claim(request).await
    }
    async fn complete(
        &self,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, StoreError> {
        self.completes.fetch_add(1, Ordering::SeqCst);
        if self.fail_complete.load(Ordering::SeqCst) {
            return Err(down());
        }
        self.inner.complete(key, fence, completion).await
    }
    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(key, fence).await
    }
    async fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Result<Fenced, StoreError> {
        self.renews.fetch_add(1, Ordering::SeqCst);
        self.inner.renew(key, fence, lease).await
    }
    async fn get(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        self.inner.get(key).await
    }
    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
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
        if self.fail_record_effect.load(Ordering::SeqCst) {
            return Err(down());
        }
        self.inner.record_effect(key, fence, record).await
    }
    fn abandon(&self, key: &Key, fence: Fence) {
        self.inner.abandon(key, fence)
    }
}
