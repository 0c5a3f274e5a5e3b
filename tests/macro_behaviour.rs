//! What `#[idempotent]` does at run time, proved through the macro on `MemoryStore`.

mod support;

use idem_core::clock::ManualClock;
use idem_core::{idempotent, Error, Key, MemoryStore, Operation, Outcome, Store};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{until, FlakyStore, Gate};
use tokio::sync::Notify;

#[derive(Debug, Default)]
struct App {
    store: MemoryStore,
    emails_sent: AtomicU32,
}

#[derive(Debug, PartialEq)]
struct MailError(&'static str);

impl std::fmt::Display for MailError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for MailError {}

#[idempotent(key = "reminder:{user_id}", store = app.store, wait = "10s")]
async fn send_reminder(app: &App, user_id: u64) -> Result<(), MailError> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    app.emails_sent.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[idempotent(key = "reminder-nowait:{user_id}", store = app.store)]
async fn send_reminder_no_wait(app: &App, user_id: u64) -> Result<(), MailError> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    app.emails_sent.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Two parallel deliveries of one key, one sends and one is a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_parallel_deliveries_send_once() {
    let app = Arc::new(App::default());
    let (a, b) = tokio::join!(
        tokio::spawn({
            let app = app.clone();
            async move { send_reminder(&app, 42).await }
        }),
        tokio::spawn({
            let app = app.clone();
            async move { send_reminder(&app, 42).await }
        }),
    );
    let mut outcomes = [a.unwrap().unwrap(), b.unwrap().unwrap()];
    outcomes.sort_by_key(|o| o.kind());
    assert!(outcomes[0].is_duplicate(), "{outcomes:?}");
    assert!(outcomes[1].is_executed(), "{outcomes:?}");
    assert_eq!(app.emails_sent.load(Ordering::SeqCst), 1);
}

/// Fifty parallel deliveries of one key run the body once; with `wait` every other delivery
/// is a duplicate, without it each is a duplicate or sees the run in progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_parallel_deliveries_run_the_body_once() {
    for waiting in [true, false] {
        let app = Arc::new(App::default());
        let barrier = Arc::new(tokio::sync::Barrier::new(50));
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let (app, barrier) = (app.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    if waiting {
                        send_reminder(&app, 7).await
                    } else {
                        send_reminder_no_wait(&app, 7).await
                    }
                })
            })
            .collect();
        let mut executed = 0;
        let mut duplicates = 0;
        let mut in_progress = 0;
        for task in tasks {
            match task.await.unwrap().unwrap() {
                Outcome::Executed(()) => executed += 1,
                Outcome::Duplicate { .. } => duplicates += 1,
                Outcome::InProgress { .. } => in_progress += 1,
            }
        }
        assert_eq!(executed, 1);
        assert_eq!(app.emails_sent.load(Ordering::SeqCst), 1);
        if waiting {
            assert_eq!(duplicates, 49);
        } else {
            assert_eq!(duplicates + in_progress, 49);
        }
    }
}

#[idempotent(key = "flaky:{id}", store = store)]
async fn fails_first(store: &MemoryStore, id: u32, runs: &AtomicU32) -> Result<u32, MailError> {
    if runs.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(MailError("smtp timeout"));
    }
    Ok(id)
}

/// An `Err` releases the claim, so the retry runs the body again; after success it is done.
#[tokio::test]
async fn error_then_retry_runs_again() {
    let store = MemoryStore::new();
    let runs = AtomicU32::new(0);
    match fails_first(&store, 1, &runs).await {
        Err(Error::Handler(MailError("smtp timeout"))) => {}
        other => panic!("expected the handler's error, got {other:?}"),
    }
    assert_eq!(
        fails_first(&store, 1, &runs).await.unwrap(),
        Outcome::Executed(1)
    );
    assert!(fails_first(&store, 1, &runs).await.unwrap().is_duplicate());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[idempotent(key = "panics:{id}", store = store)]
async fn panics_first(store: &MemoryStore, id: u32, runs: &AtomicU32) -> Result<(), MailError> {
    if runs.fetch_add(1, Ordering::SeqCst) == 0 {
        panic!("handler bug");
    }
    let _ = id;
    Ok(())
}

/// A panic releases the claim and keeps unwinding; the retry runs.
#[tokio::test]
async fn panic_releases_the_claim_and_propagates() {
    let store = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicU32::new(0));
    let joined = tokio::spawn({
        let (store, runs) = (store.clone(), runs.clone());
        async move { panics_first(&store, 3, &runs).await }
    })
    .await;
    let panic = joined.expect_err("the panic must propagate");
    assert!(panic.is_panic());
    assert!(
        store
            .get(&Key::new("panics:3").unwrap())
            .await
            .unwrap()
            .is_none(),
        "the claim was released"
    );
    assert!(panics_first(&store, 3, &runs).await.unwrap().is_executed());
}

#[idempotent(key = "slow:{id}", store = store, lease = "600ms")]
async fn slow_job(store: &FlakyStore, id: u32, runs: &AtomicU32) -> Result<(), MailError> {
    runs.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(2400)).await;
    let _ = id;
    Ok(())
}

/// A 35-second job with a 30-second lease, compressed: a body that runs four
/// leases long is renewed and never taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_body_outlives_its_lease_without_takeover() {
    let store = Arc::new(FlakyStore::default());
    let runs = Arc::new(AtomicU32::new(0));
    let first = tokio::spawn({
        let (store, runs) = (store.clone(), runs.clone());
        async move { slow_job(&store, 1, &runs).await }
    });
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let again = slow_job(&store, 1, &runs).await.unwrap();
        assert!(again.is_in_progress(), "got {again:?}");
    }
    assert!(first.await.unwrap().unwrap().is_executed());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let renewed = store.renews.load(Ordering::SeqCst);
    assert!(renewed >= 3, "the lease was renewed");
    // Once the call has settled its claim, renewal stops: no renewal in three more intervals.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        store.renews.load(Ordering::SeqCst),
        renewed,
        "renewed after the call ended"
    );
}

/// On a `current_thread` runtime too: the lease watch spawns the renewal from its own thread,
/// and the runtime's one thread runs it while the body awaits.
#[tokio::test(flavor = "current_thread")]
async fn slow_body_is_renewed_on_a_current_thread_runtime() {
    let store = Arc::new(FlakyStore::default());
    let runs = Arc::new(AtomicU32::new(0));
    let first = tokio::spawn({
        let (store, runs) = (store.clone(), runs.clone());
        async move { slow_job(&store, 2, &runs).await }
    });
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let again = slow_job(&store, 2, &runs).await.unwrap();
        assert!(again.is_in_progress(), "got {again:?}");
    }
    assert!(first.await.unwrap().unwrap().is_executed());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(
        store.renews.load(Ordering::SeqCst) >= 3,
        "the lease was renewed"
    );
}

#[idempotent(key = "quick:{id}", store = store, lease = "300ms")]
async fn quick_job(store: &FlakyStore, id: u32) -> Result<u32, MailError> {
    Ok(id)
}

/// Calls that end before their first renewal falls due are never renewed, even when the
/// renewal would have fallen due since (each is taken off the lease watch as it ends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_end_before_their_first_renewal_are_never_renewed() {
    let store = FlakyStore::default();
    for id in 0..200 {
        assert!(quick_job(&store, id).await.unwrap().is_executed());
    }
    tokio::time::sleep(Duration::from_millis(400)).await; // past every call's first renewal
    assert_eq!(store.renews.load(Ordering::SeqCst), 0);
    assert_eq!(store.completes.load(Ordering::SeqCst), 200);
}

#[idempotent(key = "stall:{id}", store = store)]
async fn stalls(
    store: &MemoryStore,
    id: u32,
    gate: &Notify,
    runs: &AtomicU32,
) -> Result<u32, MailError> {
    let run = runs.fetch_add(1, Ordering::SeqCst);
    if run == 0 {
        gate.notified().await;
    }
    Ok(id * 10 + run)
}

/// A run that stalls past its lease (no renewal reached the store) is taken over by the next
/// delivery, and its late completion is fenced out with `LostClaim`.
#[tokio::test]
async fn stalled_run_is_taken_over_and_then_fenced_out() {
    let clock = ManualClock::new();
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let gate = Arc::new(Notify::new());
    let runs = Arc::new(AtomicU32::new(0));
    let stalled = tokio::spawn({
        let (store, gate, runs) = (store.clone(), gate.clone(), runs.clone());
        async move { stalls(&store, 5, &gate, &runs).await }
    });
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    clock.advance(Duration::from_secs(31)); // past the default 30s lease, no renewal yet
    assert_eq!(
        stalls(&store, 5, &gate, &runs).await.unwrap(),
        Outcome::Executed(51)
    );
    gate.notify_one();
    match stalled.await.unwrap() {
        Err(Error::LostClaim { key }) => assert_eq!(key, "stall:5"),
        other => panic!("the stalled run must be fenced out, got {other:?}"),
    }
    assert!(stalls(&store, 5, &gate, &runs)
        .await
        .unwrap()
        .is_duplicate());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[idempotent(key = "cancel:{id}", store = store)]
async fn long_job(store: &MemoryStore, id: u32, runs: &AtomicU32) -> Result<(), MailError> {
    runs.fetch_add(1, Ordering::SeqCst);
    if id == 1 && runs.load(Ordering::SeqCst) == 1 {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    Ok(())
}

/// A caller that gives up (drops the future) leaves no completion, and the key is free at once.
#[tokio::test]
async fn cancellation_frees_the_key() {
    let store = MemoryStore::new();
    let runs = AtomicU32::new(0);
    let cut = tokio::time::timeout(Duration::from_millis(50), long_job(&store, 1, &runs)).await;
    assert!(cut.is_err(), "the caller timed out");
    assert!(store
        .get(&Key::new("cancel:1").unwrap())
        .await
        .unwrap()
        .is_none());
    assert!(long_job(&store, 1, &runs).await.unwrap().is_executed());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[idempotent(key = "detached:{id}", store = app.store, wait = "10s", detach)]
async fn detached_send(app: Arc<App>, id: u32, first: Arc<Gate>) -> Result<(), MailError> {
    first.pass().await;
    app.emails_sent.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// With `detach`, a caller that goes away mid-body does not cut the body: it finishes, its
/// completion is recorded, and the next delivery (which waits for the run it finds in progress)
/// is a duplicate. The body ran once.
#[tokio::test]
async fn a_detached_body_finishes_after_its_caller_went_away() {
    let (app, gate) = (Arc::new(App::default()), Arc::new(Gate::default()));
    let caller = tokio::spawn(detached_send(app.clone(), 1, gate.clone()));
    gate.entered().await; // the body runs and holds the key
    caller.abort();
    assert!(
        caller.await.unwrap_err().is_cancelled(),
        "the caller went away"
    );
    gate.open();
    let retry = detached_send(app.clone(), 1, gate.clone()).await.unwrap();
    assert!(retry.is_duplicate(), "{retry:?}");
    assert_eq!(gate.passes(), 1, "the body ran once");
    assert_eq!(app.emails_sent.load(Ordering::SeqCst), 1);
}

#[idempotent(key = "detached-receipt:{order}", store = store, replay, detach)]
async fn detached_receipt(store: Arc<MemoryStore>, order: u32) -> Result<String, MailError> {
    if order == 0 {
        return Err(MailError("no order 0"));
    }
    Ok(format!("receipt-{order}"))
}

/// A detached call that its caller waits for answers as any call does: the value, the stored
/// value for a duplicate under `replay`, and the body's error.
#[tokio::test]
async fn a_detached_call_returns_its_outcome() {
    let store = Arc::new(MemoryStore::new());
    assert_eq!(
        detached_receipt(store.clone(), 3).await.unwrap(),
        Outcome::Executed("receipt-3".to_owned())
    );
    match detached_receipt(store.clone(), 3).await.unwrap() {
        Outcome::Duplicate { value, .. } => assert_eq!(value.as_deref(), Some("receipt-3")),
        other => panic!("expected a duplicate with the stored value, got {other:?}"),
    }
    match detached_receipt(store, 0).await {
        Err(Error::Handler(MailError(message))) => assert_eq!(message, "no order 0"),
        other => panic!("expected the body's error, got {other:?}"),
    }
}

#[idempotent(key = "receipt:{order}", store = store, replay, wait = "5s")]
async fn make_receipt(store: &FlakyStore, order: u32, first: &Gate) -> Result<String, MailError> {
    first.pass().await;
    Ok(format!("receipt-{order}"))
}

/// A duplicate that arrives while the first run is in flight waits for it and gets its value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_returns_the_first_runs_outcome() {
    let (store, gate) = (FlakyStore::default(), Arc::new(Gate::default()));
    let first = tokio::spawn({
        let (store, gate) = (store.clone(), gate.clone());
        async move { make_receipt(&store, 9, &gate).await }
    });
    gate.entered().await; // the first run holds the key
    let second = tokio::spawn({
        let (store, gate) = (store.clone(), gate.clone());
        async move { make_receipt(&store, 9, &gate).await }
    });
    // The second delivery found the run in progress (its claim was the store's second)...
    until(|| store.claims.load(Ordering::SeqCst) >= 2).await;
    // ...and waits for it: once the first run finishes, it gets the first run's value.
    gate.open();
    match second.await.unwrap().unwrap() {
        Outcome::Duplicate { value, .. } => assert_eq!(value.as_deref(), Some("receipt-9")),
        other => panic!("expected the first run's outcome, got {other:?}"),
    }
    assert_eq!(
        first.await.unwrap().unwrap(),
        Outcome::Executed("receipt-9".to_owned())
    );
    assert_eq!(gate.passes(), 1, "the body ran once");
}

#[idempotent(key = "short-wait:{id}", store = store, wait = "100ms")]
async fn short_wait(store: &MemoryStore, id: u32, first: &Gate) -> Result<(), MailError> {
    let _ = id;
    first.pass().await;
    Ok(())
}

/// `wait` is bounded: past it, the delivery reports the run in progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_gives_up_with_in_progress() {
    let (store, gate) = (Arc::new(MemoryStore::new()), Arc::new(Gate::default()));
    let first = tokio::spawn({
        let (store, gate) = (store.clone(), gate.clone());
        async move { short_wait(&store, 1, &gate).await }
    });
    gate.entered().await; // the first run holds the key, and keeps it until the gate opens

    // The gate stays shut until after this call, so an unbounded wait would never return: the
    // timeout turns that hang into a failure. The lower bound shows it did wait first (a lower
    // bound on elapsed time cannot flake on a slow machine; an upper one could).
    let started = std::time::Instant::now();
    let second = tokio::time::timeout(Duration::from_secs(60), short_wait(&store, 1, &gate))
        .await
        .expect("wait = \"100ms\" gives up instead of waiting for the first run");
    assert!(second.unwrap().is_in_progress());
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "it waited first"
    );
    gate.open();
    assert!(first.await.unwrap().unwrap().is_executed());
}

#[idempotent(key = "takeover:{id}", store = store, wait = "5s")]
async fn fails_slowly(store: &FlakyStore, id: u32, first: &Gate) -> Result<u32, MailError> {
    if first.pass().await == 0 {
        return Err(MailError("first run failed"));
    }
    Ok(id)
}

/// A waiting delivery takes the key over when the run it waits for fails and releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_takes_over_a_released_key() {
    let (store, gate) = (FlakyStore::default(), Arc::new(Gate::default()));
    let first = tokio::spawn({
        let (store, gate) = (store.clone(), gate.clone());
        async move { fails_slowly(&store, 4, &gate).await }
    });
    gate.entered().await;
    let second = tokio::spawn({
        let (store, gate) = (store.clone(), gate.clone());
        async move { fails_slowly(&store, 4, &gate).await }
    });
    until(|| store.claims.load(Ordering::SeqCst) >= 2).await; // the second one is waiting
    gate.open();
    assert!(matches!(first.await.unwrap(), Err(Error::Handler(_))));
    assert_eq!(second.await.unwrap().unwrap(), Outcome::Executed(4));
}

#[idempotent(key = "user:{name}", store = store)]
async fn by_name(store: &MemoryStore, name: &str, runs: &AtomicU32) -> Result<(), MailError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Empty, oversized and control-character keys are refused before anything is claimed.
#[tokio::test]
async fn invalid_keys_are_refused_and_nothing_runs() {
    let store = MemoryStore::new();
    let runs = AtomicU32::new(0);
    let long = "x".repeat(600);
    for name in [long.as_str(), "line\nbreak", "nul\0", "tab\t"] {
        match by_name(&store, name, &runs).await {
            Err(Error::InvalidKey(e)) => assert!(!e.to_string().is_empty()),
            other => panic!("key {name:?} must be refused, got {other:?}"),
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(store.is_empty());
}

#[idempotent(key = "{name}", store = store)]
async fn bare(store: &MemoryStore, name: &str) -> Result<(), MailError> {
    Ok(())
}

#[tokio::test]
async fn a_key_that_renders_empty_is_refused() {
    let store = MemoryStore::new();
    let err = bare(&store, "").await.unwrap_err();
    assert!(matches!(err, Error::InvalidKey(_)));
    assert!(err.to_string().contains("empty"), "{err}");
}

#[idempotent(key = "down:{id}", store = store)]
async fn guarded(store: &FlakyStore, id: u32, runs: &AtomicU32) -> Result<(), MailError> {
    let _ = id;
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// A store that is down fails the call closed: the body does not run.
#[tokio::test]
async fn store_down_fails_closed() {
    let store = FlakyStore::default();
    store.fail_claim.store(true, Ordering::SeqCst);
    let runs = AtomicU32::new(0);
    match guarded(&store, 1, &runs).await {
        Err(Error::Store(e)) => {
            assert_eq!(e.operation(), Some(Operation::Claim));
            assert!(e.to_string().contains("did not run"), "{e}");
            assert!(
                std::error::Error::source(&e).is_some(),
                "keeps the backend error"
            );
        }
        other => panic!("expected a store error, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    store.fail_claim.store(false, Ordering::SeqCst);
    assert!(guarded(&store, 1, &runs).await.unwrap().is_executed());
}

/// A completion that cannot be recorded is retried, then reported as a store error that says
/// the body ran; the claim is not left completed.
#[tokio::test]
async fn failed_completion_is_retried_then_reported() {
    let store = FlakyStore::default();
    store.fail_complete.store(true, Ordering::SeqCst);
    let runs = AtomicU32::new(0);
    match guarded(&store, 2, &runs).await {
        Err(Error::Store(e)) => {
            assert_eq!(e.operation(), Some(Operation::Complete));
            assert!(e.to_string().contains("ran"), "{e}");
        }
        other => panic!("expected a store error, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        store.completes.load(Ordering::SeqCst),
        4,
        "one try and three retries"
    );
}

#[idempotent(key = "charge:{order}", store = store, fingerprint(amount, currency))]
async fn charge(
    store: &MemoryStore,
    order: u32,
    amount: u64,
    currency: &str,
) -> Result<u64, MailError> {
    Ok(amount)
}

/// Reusing a key with other inputs is refused; the same inputs are a duplicate.
#[tokio::test]
async fn key_reused_with_other_inputs_is_refused() {
    let store = MemoryStore::new();
    assert!(charge(&store, 1, 100, "EUR").await.unwrap().is_executed());
    assert!(charge(&store, 1, 100, "EUR").await.unwrap().is_duplicate());
    for (amount, currency) in [(200, "EUR"), (100, "USD")] {
        match charge(&store, 1, amount, currency).await {
            Err(Error::KeyReused { key }) => assert_eq!(key, "charge:1"),
            other => panic!("expected KeyReused, got {other:?}"),
        }
    }
}

/// Without `replay`, a duplicate carries no value.
#[tokio::test]
async fn duplicate_without_replay_has_no_value() {
    let store = MemoryStore::new();
    assert_eq!(
        charge(&store, 2, 5, "EUR").await.unwrap(),
        Outcome::Executed(5)
    );
    match charge(&store, 2, 5, "EUR").await.unwrap() {
        Outcome::Duplicate { value, .. } => assert_eq!(value, None),
        other => panic!("{other:?}"),
    }
}

/// Error messages say what happened and what to do; sources are kept.
#[test]
fn errors_explain_themselves() {
    let reused: Error<MailError> = Error::KeyReused { key: "k".into() };
    assert!(reused.to_string().contains("different inputs"));
    let lost: Error<MailError> = Error::LostClaim { key: "k".into() };
    assert!(lost.to_string().contains("lease"));
    let handler: Error<MailError> = Error::Handler(MailError("boom"));
    let source = std::error::Error::source(&handler).expect("source");
    assert_eq!(source.to_string(), "boom");
    assert_eq!(handler.into_handler(), Some(MailError("boom")));
}

#[idempotent(key = "blocking:{id}", store = store, lease = "1s")]
async fn blocks_its_thread(
    store: &MemoryStore,
    id: u32,
    runs: &AtomicU32,
) -> Result<(), MailError> {
    let _ = id;
    runs.fetch_add(1, Ordering::SeqCst);
    // A synchronous client, or `std::thread::sleep`: the task is not polled for three leases.
    std::thread::sleep(Duration::from_secs(3));
    Ok(())
}

/// Regression: a body that blocked its thread for 3 s with a 1 s lease lost its lease (renewal
/// ran in the body's task) and a second delivery ran the body again. Renewal runs on a task of
/// its own, which another worker runs meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_blocks_its_thread_keeps_its_lease() {
    let store = Arc::new(MemoryStore::new());
    let runs = Arc::new(AtomicU32::new(0));
    let first = tokio::spawn({
        let (store, runs) = (store.clone(), runs.clone());
        async move { blocks_its_thread(&store, 1, &runs).await }
    });
    until(|| runs.load(Ordering::SeqCst) == 1).await;
    // Deliveries while the first run blocks its worker, each past another lease of real time.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let again = blocks_its_thread(&store, 1, &runs).await.unwrap();
        assert!(
            again.is_in_progress() || again.is_duplicate(),
            "got {again:?}"
        );
    }
    assert!(first.await.unwrap().unwrap().is_executed());
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the body ran once");
}

#[idempotent(key = "welcome:{user}", store = store)]
async fn welcome_email(store: &MemoryStore, user: u32, runs: &AtomicU32) -> Result<(), MailError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[idempotent(key = "welcome:{user}", store = store)]
async fn welcome_sms(store: &MemoryStore, user: u32, runs: &AtomicU32) -> Result<(), MailError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[idempotent(key = "welcome:{user}", store = store, scope = "welcome_email")]
async fn welcome_email_renamed(
    store: &MemoryStore,
    user: u32,
    runs: &AtomicU32,
) -> Result<(), MailError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Regression: two handlers with the same template shared one record, so the second was a
/// silent duplicate. Each handler's keys are in its own scope (its name by default); an explicit
/// `scope` names another's on purpose (a renamed function keeping its records).
#[tokio::test]
async fn handlers_with_one_template_keep_separate_records() {
    let store = MemoryStore::new();
    let runs = AtomicU32::new(0);
    assert!(welcome_email(&store, 1, &runs).await.unwrap().is_executed());
    assert!(welcome_sms(&store, 1, &runs).await.unwrap().is_executed());
    assert_eq!(runs.load(Ordering::SeqCst), 2, "both handlers ran");
    assert!(welcome_email(&store, 1, &runs)
        .await
        .unwrap()
        .is_duplicate());
    assert!(
        welcome_email_renamed(&store, 1, &runs)
            .await
            .unwrap()
            .is_duplicate(),
        "scope = \"welcome_email\" shares welcome_email's records"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
