//! The current call's context from nested code and spawned tasks, effect sub-keys, and period
//! keys computed from the scheduled time.

use idem_core::{context, idempotent, period, Error, MemoryStore, Outcome};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, UNIX_EPOCH};

/// Nested code, far from the handler's parameters, asks for its provider key.
async fn provider_key(effect: &str) -> String {
    context::current()
        .expect("inside an idempotent call")
        .sub_key(effect)
        .unwrap()
        .into_string()
}

#[idempotent(key = "invoice-run:{period}", store = store)]
async fn invoice_run(
    store: &MemoryStore,
    period: &str,
    seen: &Mutex<Vec<String>>,
    fail_once: &AtomicU32,
) -> Result<(), std::io::Error> {
    for customer in ["cust_42", "cust_7"] {
        let key = provider_key(&format!("charge:{customer}")).await;
        seen.lock().unwrap().push(key);
    }
    if fail_once.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(std::io::Error::other("provider timeout after the charges"));
    }
    Ok(())
}

/// Two charges in one run get different sub-keys; the retry of the same run gets the same
/// ones, so the provider recognises the repeated charges.
#[tokio::test]
async fn sub_keys_differ_per_effect_and_repeat_per_retry() {
    let store = MemoryStore::new();
    let seen = Mutex::new(Vec::new());
    let fail_once = AtomicU32::new(0);
    assert!(matches!(
        invoice_run(&store, "2026-11", &seen, &fail_once).await,
        Err(Error::Handler(_))
    ));
    assert!(invoice_run(&store, "2026-11", &seen, &fail_once)
        .await
        .unwrap()
        .is_executed());
    let seen = seen.into_inner().unwrap();
    assert_eq!(
        seen,
        [
            "invoice-run:2026-11/charge:cust_42",
            "invoice-run:2026-11/charge:cust_7",
            "invoice-run:2026-11/charge:cust_42",
            "invoice-run:2026-11/charge:cust_7",
        ]
    );
}

#[idempotent(key = "spawner:{id}", store = store)]
async fn spawns(
    store: &MemoryStore,
    id: u32,
) -> Result<(Option<String>, Option<String>), std::io::Error> {
    let bare = tokio::spawn(async { context::current().map(|c| c.key().to_string()) });
    let carried = tokio::spawn(context::propagate(async {
        context::current().map(|c| c.key().to_string())
    }));
    Ok((bare.await.unwrap(), carried.await.unwrap()))
}

/// A spawned task has no context unless it is wrapped with `context::propagate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_tasks_get_the_context_only_when_propagated() {
    assert!(context::current().is_none(), "no context outside a call");
    let (bare, carried) = spawns(&MemoryStore::new(), 1)
        .await
        .unwrap()
        .into_value()
        .unwrap();
    assert_eq!(bare, None);
    assert_eq!(carried.as_deref(), Some("spawner:1"));
}

/// A daily job keyed by the day the delivery *arrived* runs twice when a retry crosses
/// midnight; keyed by the day it was *scheduled for*, the retry is a duplicate.
#[tokio::test]
async fn period_keys_come_from_the_scheduled_time_not_the_arrival() {
    #[idempotent(key = "daily-report:{day}", store = store)]
    async fn daily_report(
        store: &MemoryStore,
        day: &str,
        runs: &AtomicU32,
    ) -> Result<(), std::io::Error> {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    let scheduled_for = UNIX_EPOCH + Duration::from_secs(1_793_577_590); // 2026-11-01T23:59:50Z
    let first_arrival = scheduled_for + Duration::from_secs(5); // 23:59:55
    let retry_arrival = scheduled_for + Duration::from_secs(15); // 00:00:05 on the 2nd

    // The pitfall: the key from the arrival time.
    let store = MemoryStore::new();
    let runs = AtomicU32::new(0);
    for arrival in [first_arrival, retry_arrival] {
        let outcome = daily_report(&store, &period::day(arrival), &runs)
            .await
            .unwrap();
        assert!(
            outcome.is_executed(),
            "each arrival day looks like new work"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2, "the report ran twice");

    // The fix: the key from the time the job is for, carried in the payload.
    let store = MemoryStore::new();
    let runs = AtomicU32::new(0);
    let mut outcomes = Vec::new();
    for _arrival in [first_arrival, retry_arrival] {
        outcomes.push(
            daily_report(&store, &period::day(scheduled_for), &runs)
                .await
                .unwrap(),
        );
    }
    assert!(matches!(
        outcomes[..],
        [Outcome::Executed(()), Outcome::Duplicate { .. }]
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(period::day(scheduled_for), "2026-11-01");
}
