//! The effect journal through the macro: at-least-once and at-most-once effects, what a retry
//! sees after a failure, a cancellation or a store error, and fencing.

mod support;

use idem_core::clock::ManualClock;
use idem_core::journal::{Effect, Journal, JournalError};
use idem_core::{idempotent, Error, MemoryStore, Store};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::FlakyStore;
use tokio::sync::Notify;

#[derive(Debug)]
struct JobError(String);

impl<E: std::fmt::Display> From<JournalError<E>> for JobError {
    fn from(e: JournalError<E>) -> Self {
        JobError(e.to_string())
    }
}

/// Sends a receipt through an API without idempotency keys (journaled), then fails the first
/// time after it, as a later step of the job might.
#[idempotent(key = "order:{id}", store = store)]
async fn fulfil(
    store: &dyn Store,
    id: u32,
    sent: &AtomicU32,
    fail_after: &AtomicU32,
) -> Result<Effect<String>, JobError> {
    let receipt = Journal::new()
        .at_least_once("send-receipt", async {
            let n = sent.fetch_add(1, Ordering::SeqCst) + 1;
            Ok::<_, std::io::Error>(format!("receipt #{n}"))
        })
        .await?;
    if fail_after.fetch_sub(1, Ordering::SeqCst) > 0 {
        return Err(JobError("a later step failed".into()));
    }
    Ok(receipt)
}

#[tokio::test]
async fn a_retry_skips_an_effect_the_failed_run_recorded() {
    let store = MemoryStore::new();
    let (sent, fail_after) = (AtomicU32::new(0), AtomicU32::new(1));
    assert!(matches!(
        fulfil(&store, 1, &sent, &fail_after).await,
        Err(Error::Handler(_))
    ));
    let outcome = fulfil(&store, 1, &sent, &fail_after).await.unwrap();
    assert_eq!(
        outcome.into_value(),
        Some(Effect::Skipped("receipt #1".to_owned())),
        "the retry gets the recorded output"
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1, "the receipt went out once");
}

/// At-least-once: if the record cannot be written after the effect ran, the error says so and
/// the retry runs the effect again. This is the documented window, shown.
#[tokio::test]
async fn at_least_once_can_repeat_when_the_record_is_lost() {
    let store = FlakyStore::default();
    store.fail_record_effect.store(true, Ordering::SeqCst);
    let (sent, fail_after) = (AtomicU32::new(0), AtomicU32::new(0));
    match fulfil(&store, 2, &sent, &fail_after).await {
        Err(Error::Handler(JobError(message))) => {
            assert!(message.contains("ran but is not recorded"), "{message}")
        }
        other => panic!("expected the journal's store error, got {other:?}"),
    }
    store.fail_record_effect.store(false, Ordering::SeqCst);
    let outcome = fulfil(&store, 2, &sent, &fail_after).await.unwrap();
    assert!(matches!(outcome.into_value(), Some(Effect::Ran(_))));
    assert_eq!(sent.load(Ordering::SeqCst), 2, "at-least-once: sent twice");
}

#[idempotent(key = "payout:{id}", store = store)]
async fn payout(
    store: &MemoryStore,
    id: u32,
    paid: &AtomicU32,
    hang: bool,
) -> Result<Effect<u32>, JobError> {
    let paid_now = Journal::new()
        .at_most_once("transfer", async {
            paid.fetch_add(1, Ordering::SeqCst);
            if hang {
                // The transfer went out; the process is cut off before it is recorded done.
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            Ok::<_, std::io::Error>(100u32)
        })
        .await?;
    Ok(paid_now)
}

/// At-most-once: a run cut off between the intent and the completion leaves the effect
/// unknown; the retry does not run it again and says so.
#[tokio::test]
async fn at_most_once_never_repeats_and_reports_the_unknown() {
    let store = MemoryStore::new();
    let paid = AtomicU32::new(0);
    let cut = tokio::time::timeout(Duration::from_millis(50), payout(&store, 3, &paid, true)).await;
    assert!(cut.is_err(), "the caller gave up mid-transfer");
    let retry = payout(&store, 3, &paid, false).await.unwrap();
    assert_eq!(retry.into_value(), Some(Effect::Unknown));
    assert_eq!(paid.load(Ordering::SeqCst), 1, "never paid twice");

    let clean = payout(&store, 4, &paid, false).await.unwrap();
    assert_eq!(clean.into_value(), Some(Effect::Ran(100)));
}

#[tokio::test]
async fn outside_a_call_the_journal_refuses() {
    let result = Journal::new()
        .at_least_once("x", async { Ok::<_, std::io::Error>(1u8) })
        .await;
    assert!(matches!(result, Err(JournalError::NotInCall)));
}

#[idempotent(key = "stale:{id}", store = store)]
async fn stalls_then_records(
    store: &MemoryStore,
    id: u32,
    gate: &Notify,
    runs: &AtomicU32,
    seen: &std::sync::Mutex<Vec<String>>,
) -> Result<String, JobError> {
    let run = runs.fetch_add(1, Ordering::SeqCst);
    if run == 0 {
        gate.notified().await;
    }
    // An effect only this run has (were it shared, the stale run would find it done and skip).
    let done = Journal::new()
        .at_least_once(&format!("notify-{run}"), async {
            Ok::<_, std::io::Error>(id)
        })
        .await;
    let note = match done {
        Ok(_) => "recorded".to_owned(),
        Err(JournalError::LostClaim { effect_ran }) => format!("fenced out, ran={effect_ran}"),
        Err(e) => return Err(e.into()),
    };
    seen.lock().unwrap().push(note.clone());
    Ok(note)
}

/// A run that stalled past its lease and was taken over cannot write to the journal.
#[tokio::test]
async fn a_stale_run_cannot_record_effects() {
    let clock = ManualClock::new();
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let gate = Arc::new(Notify::new());
    let runs = Arc::new(AtomicU32::new(0));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stalled = tokio::spawn({
        let (store, gate, runs, seen) = (store.clone(), gate.clone(), runs.clone(), seen.clone());
        async move { stalls_then_records(&store, 5, &gate, &runs, &seen).await }
    });
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    clock.advance(Duration::from_secs(31));
    let newer = stalls_then_records(&store, 5, &gate, &runs, &seen)
        .await
        .unwrap();
    assert_eq!(newer.into_value().as_deref(), Some("recorded"));
    gate.notify_one();
    match stalled.await.unwrap() {
        Err(Error::LostClaim { .. }) => {}
        Ok(outcome) => panic!("the stale run must not complete: {outcome:?}"),
        Err(e) => panic!("{e:?}"),
    }
    assert_eq!(
        *seen.lock().unwrap(),
        ["recorded", "fenced out, ran=true"],
        "the newer run recorded; the stale run's write was refused"
    );
}
