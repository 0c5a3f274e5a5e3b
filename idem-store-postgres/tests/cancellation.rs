//! A caller that goes away never makes work run twice, nor holds a key for nobody: calls and
//! claims dropped at each point where they wait, on the default store (`PgStore::new`: claims
//! and completions batched, one statement of each kind on the wire).
//!
//! Waits are made deterministic with row locks: a record another transaction has inserted (or
//! locked) and not committed holds the statement that touches it on the wire, while the test
//! queues or drops what it needs behind it.

mod support;

use idem_core::{Call, Claim, ClaimRequest, ClaimToken, Error, Key, Outcome, Store};
use idem_store_postgres::sqlx::{self, Postgres, Transaction};
use idem_store_postgres::testing::until_lock_waits;
use idem_store_postgres::PgStore;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::TestStore;

const LONG: Duration = Duration::from_secs(600);

fn key(name: &str) -> Key {
    Key::new(name).unwrap()
}

async fn claim(store: &PgStore, key: &Key, lease: Duration) -> Claim {
    store
        .claim(ClaimRequest {
            key,
            fingerprint: None,
            lease,
            token: Some(ClaimToken::random()),
        })
        .await
        .unwrap()
}

/// A claim of `name` that waits on the wire for a record another transaction inserted and has
/// not committed; the returned transaction ends the wait, and the task gives the claim's answer.
async fn claim_held_by(
    test: &TestStore,
    name: &str,
) -> (
    Transaction<'static, Postgres>,
    tokio::task::JoinHandle<Claim>,
) {
    let holder = support::hold_insert(test, name).await;
    let store = test.store.clone();
    let name = key(name);
    let claim = tokio::spawn(async move { claim(&store, &name, LONG).await });
    (holder, claim)
}

/// Waits until `(claims, completions)` wait behind the statements on the wire.
async fn until_queued(store: &PgStore, queued: (usize, usize)) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.queued() != queued {
        assert!(
            Instant::now() < deadline,
            "queued {:?}, expected {queued:?}",
            store.queued()
        );
        tokio::task::yield_now().await;
    }
}

/// Waits for `condition` to hold, for at most 20 s.
async fn until<F: Future<Output = bool>>(what: &str, mut condition: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !condition().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A call of `name` whose body counts its runs in `runs` and returns `Ok` at once.
fn counted_call(
    store: &PgStore,
    name: &str,
    runs: &Arc<AtomicUsize>,
) -> impl Future<Output = Result<Outcome<()>, Error<std::io::Error>>> + Send + 'static {
    let (store, name, runs) = (store.clone(), name.to_owned(), runs.clone());
    async move {
        Call::new(&store, name.as_str())
            .run(async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .await
    }
}

async fn is_completed(store: &PgStore, name: &str) -> bool {
    matches!(
        store.get(&key(name)).await.unwrap(),
        Some(idem_core::Record {
            state: idem_core::RecordState::Completed { .. },
            ..
        })
    )
}

/// A call whose body succeeded and whose completion waits behind another statement is dropped
/// (its task aborted). The completion still goes through, so the next delivery is a duplicate:
/// the work is never undone, and never run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_while_its_completion_waits_still_completes() {
    let test = TestStore::new("cancel_complete", 4).await;
    let store = &test.store;
    // A completion held on the wire: `blocker`'s row is locked by another transaction.
    let blocker = key("blocker");
    let Claim::Acquired { fence, .. } = claim(store, &blocker, LONG).await else {
        panic!("fresh")
    };
    let lock = support::lock_row(&test, store.table(), "blocker").await;
    let held = {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .complete(
                    &blocker,
                    fence,
                    idem_core::Completion {
                        output: None,
                        keep: LONG,
                    },
                )
                .await
        })
    };
    until_lock_waits(&test, 1).await;

    let runs = Arc::new(AtomicUsize::new(0));
    let call = tokio::spawn(counted_call(store, "charge", &runs));
    until_queued(store, (0, 1)).await; // the body ran; its completion waits
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());

    lock.rollback().await.unwrap();
    assert_eq!(held.await.unwrap().unwrap(), idem_core::Fenced::Applied);
    until("the dropped call's completion is recorded", || {
        is_completed(store, "charge")
    })
    .await;
    let again = counted_call(store, "charge", &runs).await.unwrap();
    assert!(again.is_duplicate(), "{again:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the work ran once");
}

/// A claim whose caller went away while it waited behind another statement is never sent: the
/// next delivery claims the key at once instead of finding it held for nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_caller_left_while_queued_is_never_sent() {
    let test = TestStore::new("cancel_queued", 4).await;
    let store = &test.store;
    let (blocker, held) = claim_held_by(&test, "blocker").await;
    until_lock_waits(&test, 1).await;

    let runs = Arc::new(AtomicUsize::new(0));
    let call = tokio::spawn(counted_call(store, "charge", &runs));
    until_queued(store, (1, 0)).await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    blocker.rollback().await.unwrap();
    held.await.unwrap();

    let again = counted_call(store, "charge", &runs).await.unwrap();
    assert_eq!(
        again,
        Outcome::Executed(()),
        "the key was not held for nobody"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A claim acquired for a caller that went away while its statement was on the wire is
/// released at once: the next delivery claims the key instead of waiting out a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_acquired_for_a_caller_that_left_is_released() {
    let test = TestStore::new("cancel_acquired", 4).await;
    let store = &test.store;
    // First a statement on the wire, so the next batch forms behind it: the call's claim and
    // a claim that will wait on `second`'s uncommitted record.
    let (first, held) = claim_held_by(&test, "first").await;
    until_lock_waits(&test, 1).await;
    let (second, waits) = claim_held_by(&test, "second").await;
    let runs = Arc::new(AtomicUsize::new(0));
    let call = tokio::spawn(counted_call(store, "charge", &runs));
    until_queued(store, (2, 0)).await;
    first.rollback().await.unwrap();
    held.await.unwrap();
    // The batch of the call's claim and `second`'s is on the wire, held by `second`.
    until_queued(store, (0, 0)).await;
    until_lock_waits(&test, 1).await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    second.rollback().await.unwrap();
    waits.await.unwrap();

    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "the call went away before its body"
    );
    until("the orphaned claim is released", || async {
        store.get(&key("charge")).await.unwrap().is_none()
    })
    .await;
    let again = counted_call(store, "charge", &runs).await.unwrap();
    assert_eq!(again, Outcome::Executed(()));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A batch waits on a lock past the lease of a claim it carries; another process takes the
/// lapsed claim over the moment the batch commits. The late answer's caller must not run the
/// body as well: its claim is re-checked (renewed) first, found taken over, and answered as in
/// progress. One run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_answered_after_its_lease_lapsed_does_not_run_beside_the_takeover() {
    let test = TestStore::new("cancel_lapsed", 4).await;
    let store = &test.store;
    let other = idem_store_postgres::testing::named_pool(2, &test.schema).await;
    let lease = Duration::from_millis(300);

    let (first, held) = claim_held_by(&test, "first").await;
    until_lock_waits(&test, 1).await;
    let (second, waits) = claim_held_by(&test, "second").await;
    let runs = Arc::new(AtomicUsize::new(0));
    let late = {
        let (store, runs) = (store.clone(), runs.clone());
        tokio::spawn(async move {
            Call::new(&store, "charge")
                .lease(lease)
                .run(async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::io::Error>(())
                })
                .await
        })
    };
    until_queued(store, (2, 0)).await;
    first.rollback().await.unwrap();
    held.await.unwrap();
    until_queued(store, (0, 0)).await;
    until_lock_waits(&test, 1).await;
    // The batch writes `charge` and waits on `second`: let `charge`'s lease lapse, by the
    // database's clock, then have another process claim it (it waits on the uncommitted row).
    let batch_started: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM max(query_start))::float8 FROM pg_stat_activity
         WHERE application_name = $1 AND wait_event_type = 'Lock'",
    )
    .bind(&test.schema)
    .fetch_one(store.pool())
    .await
    .unwrap();
    until("the claim's lease lapsed", || async {
        let now: f64 = sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
            .fetch_one(store.pool())
            .await
            .unwrap();
        now > batch_started + 2.0 * lease.as_secs_f64()
    })
    .await;
    // Another process's takeover, in the one statement that waits on the uncommitted row and
    // takes the lapsed claim over the moment the batch commits (the store's own takeover
    // needs a round trip more, and would race the late answer's caller).
    let takeover = {
        let (pool, table) = (other.clone(), store.table().to_owned());
        tokio::spawn(async move {
            sqlx::query_scalar::<_, i64>(&format!(
                "INSERT INTO {table} AS t (key, scope, fence, expires_at)
                 VALUES ('charge', 'default', 1000000, now() + interval '10 minutes')
                 ON CONFLICT (key, scope) DO UPDATE
                 SET fence = excluded.fence, expires_at = excluded.expires_at, token = NULL
                 WHERE t.expires_at <= now()
                 RETURNING fence"
            ))
            .fetch_optional(&pool)
            .await
            .unwrap()
        })
    };
    until_lock_waits(&test, 2).await;
    second.rollback().await.unwrap();
    waits.await.unwrap();

    // The takeover, woken on the server as the batch commits, almost always wins; should the
    // late answer's re-check reach the row first, it renews the lease and the takeover finds
    // the claim live. Either way one run holds the key: never both.
    let taken = takeover.await.unwrap();
    let answered = late.await.unwrap().unwrap();
    if taken.is_some() {
        assert!(
            matches!(answered, Outcome::InProgress { .. }),
            "taken over, so the late answer is not run: {answered:?}"
        );
        assert_eq!(
            runs.load(Ordering::SeqCst),
            0,
            "only the takeover may run it"
        );
    } else {
        assert_eq!(answered, Outcome::Executed(()), "renewed in time, it runs");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}

/// A transactional body that makes a lease-mode call through the same store, while a
/// lease-mode claim of the transactional key waits on its lock, does not hang the process: the
/// waiting claim fails at the store's lock timeout with an error that says why, and everything
/// else goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_wait_behind_a_transactional_body_is_bounded() {
    let test = TestStore::new("cancel_lockwait", 4).await;
    let store = &PgStore::builder(test.store.pool().clone())
        .schema(test.schema.clone())
        .lock_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let (started, started_rx) = tokio::sync::oneshot::channel::<()>();
    let go = Arc::new(tokio::sync::Notify::new());
    let transactional = {
        let (store, go) = (store.clone(), go.clone());
        tokio::spawn(async move {
            let inner = store.clone();
            Call::new(&store, "shared")
                .scope("s")
                .run_in_transaction(move |_tx| {
                    Box::pin(async move {
                        let _ = started.send(());
                        go.notified().await;
                        // A lease-mode call through the same store, from inside the body.
                        let nested = Call::new(&inner, "nested")
                            .run(async { Ok::<_, std::io::Error>(()) })
                            .await
                            .map_err(|e| std::io::Error::other(e.to_string()))?;
                        assert!(nested.is_executed());
                        Ok::<_, std::io::Error>(())
                    })
                })
                .await
        })
    };
    started_rx.await.unwrap();
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move {
            Call::new(&store, "shared")
                .scope("s")
                .run(async { Ok::<_, std::io::Error>(()) })
                .await
        })
    };
    until_lock_waits(&test, 1).await;
    go.notify_one();

    let bounded = tokio::time::timeout(Duration::from_secs(120), async {
        (transactional.await.unwrap(), waiting.await.unwrap())
    })
    .await
    .expect("a lock wait hung the store");
    let (transactional, waiting) = bounded;
    assert!(transactional.unwrap().is_executed());
    match waiting {
        Err(Error::Store(e)) => assert!(
            e.to_string().contains("lock timeout"),
            "the error says why: {e}"
        ),
        // Served after the transaction committed: fine too, as long as it ended.
        Ok(outcome) => assert!(outcome.is_duplicate(), "{outcome:?}"),
        Err(other) => panic!("unexpected: {other}"),
    }
}
