//! A caller that goes away never makes work run twice, on the in-memory store: options that
//! would overflow after the body are refused before the claim, a detached call finishes its
//! work after its caller left, and a renewal on the wire is answered before the claim is
//! settled. (The store-specific points run in the conformance suite and the PostgreSQL tests.)

use async_trait::async_trait;
use idem_core::{
    Call, Claim, ClaimRequest, Completion, Error, Fence, Fenced, Key, MemoryStore, Outcome, Record,
    Store, StoreError, MAX_DURATION,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify, Semaphore};

#[tokio::test]
async fn a_lease_or_keep_over_the_maximum_is_refused_before_the_claim() {
    let store = MemoryStore::new();
    let runs = AtomicUsize::new(0);
    for (lease, keep) in [
        (Duration::MAX, Duration::from_secs(1)),
        (
            Duration::from_secs(1),
            MAX_DURATION + Duration::from_secs(1),
        ),
    ] {
        let refused = Call::new(&store, "huge")
            .lease(lease)
            .keep(keep)
            .run(async {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>(())
            })
            .await;
        let Err(Error::InvalidOption { option, .. }) = refused else {
            panic!("refused before the claim: {refused:?}")
        };
        assert!(option == "lease" || option == "keep");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the body never ran");
    let key = Key::new("huge")
        .unwrap()
        .with_scope(idem_core::DEFAULT_SCOPE)
        .unwrap();
    assert!(
        store.get(&key).await.unwrap().is_none(),
        "nothing was claimed"
    );
}

/// A detached call's caller gives up while its work runs: the work goes on, completes, and the
/// next delivery finds it done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_call_finishes_its_work_after_its_caller_left() {
    let store = MemoryStore::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let (started, started_rx) = oneshot::channel();
    let (finish, finish_rx) = oneshot::channel::<()>();
    let call = {
        let runs = runs.clone();
        Call::new(&store, "detached").run_detached(async move {
            let _ = started.send(());
            finish_rx.await.unwrap();
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        })
    };
    let caller = tokio::spawn(call);
    started_rx.await.unwrap();
    caller.abort(); // the caller goes away mid-body
    assert!(caller.await.unwrap_err().is_cancelled());
    finish.send(()).unwrap();
    let retry = Call::new(&store, "detached")
        .wait(Duration::from_secs(20))
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(retry.is_duplicate(), "{retry:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// The same call not detached: dropped mid-body, its work stops there and its claim is freed,
/// so the next delivery runs the body again (what `run_detached` is for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_call_dropped_mid_body_is_run_again() {
    let store = Arc::new(MemoryStore::new());
    let (started, started_rx) = oneshot::channel();
    let caller = {
        let store = store.clone();
        tokio::spawn(async move {
            Call::new(&*store, "attached")
                .run(async move {
                    let _ = started.send(());
                    std::future::pending::<()>().await;
                    Ok::<_, std::io::Error>(())
                })
                .await
        })
    };
    started_rx.await.unwrap();
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    let again = Call::new(&*store, "attached")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert_eq!(again, Outcome::Executed(()));
}

/// A store whose renewals wait at a gate, and that logs renewals and completions in order.
#[derive(Debug, Clone)]
struct GatedRenewals {
    inner: Arc<MemoryStore>,
    log: Arc<Mutex<Vec<&'static str>>>,
    entered: Arc<Notify>,
    open: Arc<Semaphore>,
}

#[async_trait]
impl Store for GatedRenewals {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.inner.claim(request).await
    }
    async fn complete(
        &self,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, StoreError> {
        self.log.lock().unwrap().push("complete");
        self.inner.complete(key, fence, completion).await
    }
    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, StoreError> {
        self.inner.release(key, fence).await
    }
    async fn renew(&self, key: &Key, fence: Fence, lease: Duration) -> Result<Fenced, StoreError> {
        self.log.lock().unwrap().push("renewal sent");
        self.entered.notify_one();
        let _open = self.open.acquire().await.unwrap();
        let renewed = self.inner.renew(key, fence, lease).await;
        self.log.lock().unwrap().push("renewal answered");
        renewed
    }
    async fn get(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        self.inner.get(key).await
    }
    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }
}

/// A renewal on the wire when the body ends is answered before the claim is completed: one
/// that reached a store after the completion could write to a settled key (a queue job's
/// renewal writes the call's record when it has none). On one thread the test lets the call
/// run as far as it can once its body returned (every task yields until none can go on), and
/// only then opens the renewal's gate: a call that did not wait has completed by then.
#[tokio::test(flavor = "current_thread")]
async fn a_renewal_on_the_wire_is_answered_before_the_completion() {
    let store = GatedRenewals {
        inner: Arc::new(MemoryStore::new()),
        log: Arc::default(),
        entered: Arc::default(),
        open: Arc::new(Semaphore::new(0)),
    };
    let (returned, body_returned) = tokio::sync::oneshot::channel();
    let call = {
        let (store, entered) = (store.clone(), store.entered.clone());
        tokio::spawn(async move {
            Call::new(&store, "renewed")
                .lease(Duration::from_secs(3)) // renewed every second
                .run(async move {
                    entered.notified().await; // a renewal is on the wire
                    let _ = returned.send(());
                    Ok::<_, std::io::Error>(())
                })
                .await
        })
    };
    body_returned.await.unwrap();
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        store.log.lock().unwrap().clone(),
        ["renewal sent"],
        "the completion waits for the renewal on the wire"
    );
    store.open.add_permits(Semaphore::MAX_PERMITS / 2);
    assert_eq!(call.await.unwrap().unwrap(), Outcome::Executed(()));
    let log = store.log.lock().unwrap().clone();
    assert_eq!(&log[..3], ["renewal sent", "renewal answered", "complete"]);
}

/// A renewal that never comes back does not hold the completion up for longer than a lease:
/// past it the lease has lapsed anyway, and waiting longer would only let another run take
/// the key over while the finished work goes unrecorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_never_returns_holds_the_completion_for_a_lease_at_most() {
    const LEASE: Duration = Duration::from_millis(300);
    let store = GatedRenewals {
        inner: Arc::new(MemoryStore::new()),
        log: Arc::default(),
        entered: Arc::default(),
        open: Arc::new(Semaphore::new(0)), // never opened
    };
    let entered = store.entered.clone();
    let returned_at = Arc::new(Mutex::new(None));
    let body_returned_at = returned_at.clone();
    let call = Call::new(&store, "stuck-renewal")
        .lease(LEASE)
        .run(async move {
            entered.notified().await; // a renewal is on the wire, and stays there
            *body_returned_at.lock().unwrap() = Some(std::time::Instant::now());
            Ok::<_, std::io::Error>(())
        });
    let outcome = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the completion is not held up for ever")
        .unwrap();
    let waited = returned_at
        .lock()
        .unwrap()
        .expect("the body returned")
        .elapsed();
    assert_eq!(outcome, Outcome::Executed(()));
    let log = store.log.lock().unwrap().clone();
    assert_eq!(log, ["renewal sent", "complete"]);
    assert!(
        waited >= LEASE / 2,
        "the completion waited for the renewal on the wire ({waited:?})"
    );
    assert!(
        waited < LEASE * 10,
        "but not much past a lease ({waited:?}; the bound is {LEASE:?})"
    );
}
