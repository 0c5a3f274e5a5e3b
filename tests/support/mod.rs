//! Helpers shared by the behaviour tests: a store that fails on command, and gates that let a
//! test wait for a run to reach a point instead of sleeping.

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

/// Holds the first run of a body at a point until the test opens it: the test waits for
/// [`entered`](Gate::entered) (the run holds its claim), then [`open`](Gate::open)s it. Later
/// runs pass straight through.
#[derive(Debug, Default)]
pub struct Gate {
    passes: AtomicUsize,
    entered: tokio::sync::Notify,
    opened: tokio::sync::Notify,
}

impl Gate {
    /// Called by the body: the first run waits here until the gate opens. Returns how many runs
    /// passed before this one.
    pub async fn pass(&self) -> usize {
        let before = self.passes.fetch_add(1, Ordering::SeqCst);
        if before == 0 {
            self.entered.notify_one();
            self.opened.notified().await;
        }
        before
    }

    /// Waits until the first run reached the gate.
    pub async fn entered(&self) {
        self.entered.notified().await;
    }

    /// Lets the first run go on.
    pub fn open(&self) {
        self.opened.notify_one();
    }

    /// How many runs reached the gate.
    pub fn passes(&self) -> usize {
        self.passes.load(Ordering::SeqCst)
    }
}

/// Waits until `condition` holds, yielding to other tasks meanwhile (a condition, not a guess
/// at how long another task takes).
pub async fn until(mut condition: impl FnMut() -> bool) {
    while !condition() {
        tokio::task::yield_now().await;
    }
}
