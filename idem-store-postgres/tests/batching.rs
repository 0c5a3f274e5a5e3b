//! Adaptive batching, counted on the wire: claims (and completions) queued while a statement is
//! on the wire go out together in one statement, each answered as if it had been alone; a batch
//! whose connection dies is sent again; a batch the database refuses is retried call by call, so
//! one bad call fails alone and no call is dropped; a batch that cannot reach the database fails
//! each of its calls at once.
//!
//! Batches are formed deterministically: the store has one connection, and its statement is held
//! on the wire by a row another transaction has inserted and not committed (a claim of that key
//! waits for it), while the test queues the calls that make the next batch.

mod support;

use idem_core::{
    Claim, ClaimRequest, Completion, Fence, Fenced, Key, Operation, Store, StoreError,
};
use idem_store_postgres::sqlx;
use idem_store_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use idem_store_postgres::PgStore;
use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::CountingProxy;
use support::TestStore;

const LEASE: Duration = Duration::from_secs(600);

fn key(name: &str) -> Key {
    Key::new(name).unwrap()
}

/// A store with one connection of its own, through a counting proxy, named `app` in
/// `pg_stat_activity`, with `lock_timeout` set when given.
async fn one_connection_store(
    test: &TestStore,
    app: &str,
    lock_timeout: Option<Duration>,
) -> (PgStore, CountingProxy) {
    let options = PgConnectOptions::from_str(&support::database_url()).unwrap();
    let proxy = CountingProxy::start(options.get_host().to_owned(), options.get_port()).await;
    let options = options
        .host("127.0.0.1")
        .port(proxy.port)
        .ssl_mode(PgSslMode::Disable)
        .application_name(app);
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with(options);
    let store = PgStore::builder(pool)
        .schema(test.schema.clone())
        .dedicated_connections(1)
        .lock_timeout(lock_timeout.unwrap_or(Duration::from_secs(60)))
        .build()
        .unwrap();
    (store, proxy)
}

async fn claim(store: &PgStore, key: &Key) -> Result<Claim, StoreError> {
    store
        .claim(ClaimRequest {
            key,
            fingerprint: None,
            lease: LEASE,
            token: None,
        })
        .await
}

async fn complete(store: &PgStore, key: &Key, fence: Fence, output: &[u8]) -> Fenced {
    store
        .complete(
            key,
            fence,
            Completion {
                output: Some(output),
                keep: LEASE,
            },
        )
        .await
        .unwrap()
}

/// Waits until a backend named `app` waits for a lock: its statement is on the wire, held.
async fn until_lock_wait(test: &TestStore, app: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = $1 AND wait_event_type = 'Lock'",
        )
        .bind(app)
        .fetch_one(test.store.pool())
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{app}'s statement never waited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `claims` claims and `completions` completions are queued behind the statement on
/// the wire.
async fn until_queued(store: &PgStore, claims: usize, completions: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.queued() != (claims, completions) {
        assert!(
            Instant::now() < deadline,
            "queued {:?}, expected ({claims}, {completions})",
            store.queued()
        );
        tokio::task::yield_now().await;
    }
}

/// The keys of one batch: fresh ones, ones completed beforehand (with their name as output) and
/// ones held by a live claim.
struct Mix {
    fresh: Vec<Key>,
    done: Vec<Key>,
    held: Vec<Key>,
}

async fn prepare_mix(store: &PgStore, prefix: &str) -> Mix {
    let names = |kind: &str| -> Vec<Key> {
        (0..10)
            .map(|i| key(&format!("{prefix}-{kind}-{i}")))
            .collect()
    };
    let mix = Mix {
        fresh: names("fresh"),
        done: names("done"),
        held: names("held"),
    };
    for k in &mix.done {
        let Claim::Acquired { fence, .. } = claim(store, k).await.unwrap() else {
            panic!("acquire {k}")
        };
        assert_eq!(
            complete(store, k, fence, k.as_str().as_bytes()).await,
            Fenced::Applied
        );
    }
    for k in &mix.held {
        assert!(matches!(
            claim(store, k).await.unwrap(),
            Claim::Acquired { .. }
        ));
    }
    mix
}

/// Claims every key of `mix` in a task of its own; returns the tasks, in `mix`'s order.
fn claim_all(
    store: &PgStore,
    mix: &Mix,
) -> Vec<(Key, tokio::task::JoinHandle<Result<Claim, StoreError>>)> {
    mix.fresh
        .iter()
        .chain(&mix.done)
        .chain(&mix.held)
        .map(|k| {
            let (store, k2) = (store.clone(), k.clone());
            (
                k.clone(),
                tokio::spawn(async move { claim(&store, &k2).await }),
            )
        })
        .collect()
}

/// Checks each key's answer: fresh keys acquired, completed ones their own output, held ones in
/// progress. Returns the fresh keys' fences.
async fn check_answers(
    mix: &Mix,
    tasks: Vec<(Key, tokio::task::JoinHandle<Result<Claim, StoreError>>)>,
) -> Vec<(Key, Fence)> {
    let mut fences = Vec::new();
    for (k, task) in tasks {
        let answer = task.await.unwrap().unwrap();
        if mix.fresh.contains(&k) {
            let Claim::Acquired { fence, .. } = answer else {
                panic!("{k}: {answer:?}")
            };
            fences.push((k, fence));
        } else if mix.done.contains(&k) {
            let Claim::Completed { output, .. } = &answer else {
                panic!("{k}: {answer:?}")
            };
            assert_eq!(
                output.as_deref(),
                Some(k.as_str().as_bytes()),
                "{k}'s own output"
            );
        } else {
            assert!(
                matches!(answer, Claim::InProgress { .. }),
                "{k}: {answer:?}"
            );
        }
    }
    fences
}

/// Holds a claim of `blocker` on the wire (an uncommitted insert of the key makes it wait), runs
/// `queue` to start the calls that make the next batch, waits until `queued` claims wait behind
/// the held one, then lets it through. Returns what `queue` returned and the held claim's fence.
async fn behind_a_held_claim<T>(
    test: &TestStore,
    store: &PgStore,
    app: &str,
    blocker: &str,
    queued: usize,
    queue: impl FnOnce() -> T,
) -> (T, Fence) {
    let held = support::hold_insert(test, blocker).await;
    let first = {
        let (store, blocker) = (store.clone(), key(blocker));
        tokio::spawn(async move { claim(&store, &blocker).await })
    };
    until_lock_wait(test, app).await;
    let queued_calls = queue();
    until_queued(store, queued, 0).await;
    held.rollback().await.unwrap();
    let answer = first.await.unwrap().unwrap();
    let Claim::Acquired { fence, .. } = answer else {
        panic!("the held claim acquires once the blocker rolls back: {answer:?}")
    };
    (queued_calls, fence)
}

/// Sends every statement once (a statement is prepared on its first use on a connection), so
/// later counts hold only executions.
async fn warm_up(store: &PgStore, test: &TestStore, app: &str) {
    let mix = prepare_mix(store, "warm").await;
    let (tasks, _) = behind_a_held_claim(test, store, app, "warm-blocker", 30, || {
        claim_all(store, &mix)
    })
    .await;
    let fences = check_answers(&mix, tasks).await;
    let completions: Vec<_> = fences
        .into_iter()
        .map(|(k, fence)| {
            let store = store.clone();
            tokio::spawn(async move { complete(&store, &k, fence, b"x").await })
        })
        .collect();
    for c in completions {
        assert_eq!(c.await.unwrap(), Fenced::Applied);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_and_completions_queued_behind_a_statement_share_one() {
    let test = TestStore::new("batch_one", 4).await;
    let app = format!("{}-counted", test.schema);
    let (store, proxy) = one_connection_store(&test, &app, None).await;
    warm_up(&store, &test, &app).await;
    let mix = prepare_mix(&store, "b").await;

    // Claims: one held on the wire, 30 queued behind it.
    let ((tasks, (statements_before, trips_before, _)), first_fence) =
        behind_a_held_claim(&test, &store, &app, "b-blocker", 30, || {
            let counts = proxy.counts();
            (claim_all(&store, &mix), counts)
        })
        .await;
    let fences = check_answers(&mix, tasks).await;
    let (statements, trips, _) = proxy.counts();
    assert_eq!(
        (statements - statements_before, trips - trips_before),
        (1, 1),
        "the 30 queued claims went out as one statement, in one round trip"
    );

    // Completions: one held on the wire by a row lock, 10 queued behind it.
    let b = key("b-blocker");
    let mut lock = test.store.pool().begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT 1 FROM {} WHERE key = 'b-blocker' FOR UPDATE",
        test.store.table()
    ))
    .execute(&mut *lock)
    .await
    .unwrap();
    let held = {
        let store = store.clone();
        tokio::spawn(async move { complete(&store, &b, first_fence, b"first").await })
    };
    until_lock_wait(&test, &app).await;
    let (statements_before, trips_before, _) = proxy.counts();
    let completions: Vec<_> = fences
        .iter()
        .map(|(k, fence)| {
            let (store, k, fence) = (store.clone(), k.clone(), *fence);
            tokio::spawn(async move { complete(&store, &k, fence, k.as_str().as_bytes()).await })
        })
        .collect();
    until_queued(&store, 0, 10).await;
    lock.rollback().await.unwrap();
    assert_eq!(held.await.unwrap(), Fenced::Applied);
    for c in completions {
        assert_eq!(c.await.unwrap(), Fenced::Applied);
    }
    let (statements, trips, _) = proxy.counts();
    assert_eq!(
        (statements - statements_before, trips - trips_before),
        (1, 1),
        "the 10 queued completions went out as one statement"
    );
    // Each completion wrote its own key's output, and a stale fence is refused inside a batch.
    for (k, _) in &fences {
        let Claim::Completed { output, .. } = claim(&store, k).await.unwrap() else {
            panic!("{k} completed")
        };
        assert_eq!(output.as_deref(), Some(k.as_str().as_bytes()));
    }
    let stale = fences
        .iter()
        .map(|(k, fence)| {
            let (store, k, fence) = (store.clone(), k.clone(), Fence(fence.0 + 1_000_000));
            tokio::spawn(async move { complete(&store, &k, fence, b"stale").await })
        })
        .collect::<Vec<_>>();
    for c in stale {
        assert_eq!(c.await.unwrap(), Fenced::Lost, "another fence is refused");
    }
}

/// Claims `n` fresh keys from `n` tasks released at one moment (as the callers a batch answers
/// are), each claim made as soon as its task runs.
async fn claimed_together(
    store: &PgStore,
    prefix: &str,
    n: usize,
) -> Vec<Result<Claim, StoreError>> {
    let (release, _) = tokio::sync::watch::channel(());
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (store, mut released) = (store.clone(), release.subscribe());
            let k = key(&format!("{prefix}-{i}"));
            tokio::spawn(async move {
                released.changed().await.unwrap();
                claim(&store, &k).await
            })
        })
        .collect();
    release.send(()).unwrap();
    let mut claims = Vec::new();
    for task in tasks {
        claims.push(task.await.unwrap());
    }
    claims
}

/// Callers woken together share the first statements of the driver the first of them starts.
/// Tokio runs a task spawned from a worker thread next (its LIFO slot), so a new driver used to
/// take a queue of one and leave the others for its second statement; it now steps behind them
/// in the run queue first. With no completion running (its partner idle), the new driver sends
/// half of them first and the other half as its second statement (`batch.rs`), so that the two
/// halves' claims and completions run side by side afterwards. One worker thread, so the order
/// of the tasks is deterministic (and a new driver splits only there).
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn callers_woken_together_share_a_new_drivers_first_statements_half_and_half() {
    let test = TestStore::new("batch_woken", 4).await;
    let app = format!("{}-counted", test.schema);
    let (store, proxy) = one_connection_store(&test, &app, None).await;
    // The first round opens the connection and prepares the statements; the second is counted.
    for round in ["warm", "counted"] {
        let before = proxy.counts();
        // Spawned, so that the tasks are woken on the runtime's worker, as a driver's callers are.
        let claims = {
            let store = store.clone();
            tokio::spawn(async move { claimed_together(&store, round, 20).await })
                .await
                .unwrap()
        };
        assert!(
            claims
                .iter()
                .all(|c| matches!(c, Ok(Claim::Acquired { .. }))),
            "every fresh key claimed: {claims:?}"
        );
        let after = proxy.counts();
        if round == "counted" {
            assert_eq!(
                (after.0 - before.0, after.1 - before.1),
                (2, 2),
                "the 20 claims released together went out as two statements, in two round trips"
            );
            // Each statement is a transaction of its own: the records it wrote share an xmin.
            let per_statement: Vec<i64> = sqlx::query_scalar(&format!(
                "SELECT count(*) FROM {} WHERE key LIKE 'counted-%'
                 GROUP BY xmin::text::bigint ORDER BY xmin::text::bigint",
                test.store.table()
            ))
            .fetch_all(test.store.pool())
            .await
            .unwrap();
            assert_eq!(
                per_statement,
                [10, 10],
                "half of the callers in the first statement, the rest in the second"
            );
        }
    }
}

/// A call starts a driver on a runtime that shuts down before the driver ever runs: the call
/// gets an error saying its statement was abandoned, and the next call (on another runtime)
/// starts a driver of its own, instead of both waiting forever for the one that never ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_dropped_before_it_ran_gives_its_place_back() {
    let test = TestStore::new("batch_unrun", 4).await;
    let (store, _proxy) =
        one_connection_store(&test, &format!("{}-unrun", test.schema), None).await;
    let stranded = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let mut call = Box::pin(async move { claim(&store, &key("unrun-first")).await });
            // One poll queues the claim and spawns its driver on this runtime; `block_on`
            // returns before running any spawned task, so the driver never runs.
            runtime.block_on(std::future::poll_fn(|cx| {
                assert!(
                    call.as_mut().poll(cx).is_pending(),
                    "the claim waits for its driver"
                );
                std::task::Poll::Ready(())
            }));
            drop(runtime);
            call
        })
        .await
        .unwrap()
    };
    let err = tokio::time::timeout(Duration::from_secs(20), stranded)
        .await
        .expect("the call whose driver was dropped got an answer")
        .expect_err("its statement was abandoned");
    assert!(
        err.to_string().contains("abandoned"),
        "the error says what happened: {err}"
    );
    let next = tokio::time::timeout(Duration::from_secs(20), claim(&store, &key("unrun-next")))
        .await
        .expect("the next call started a driver of its own")
        .unwrap();
    assert!(matches!(next, Claim::Acquired { .. }), "{next:?}");
}

/// A batch that cannot reach the database (here a server that accepts connections and drops
/// them, as one going down does) fails every call it carries at once, each with a claim error:
/// one attempt to connect for the whole batch. It used to send each call on its own after the
/// batch failed, so during an outage the last caller of a batch of n waited out n + 1 connection
/// attempts (each up to the pool's `acquire_timeout`). One worker thread, so that the 8 claims
/// go out as two batches of 4, a new driver's halves (see the test above; on more workers a new
/// driver does not split): one attempt each.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_batch_that_cannot_reach_the_database_fails_each_call_at_once() {
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = dead.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    tokio::spawn({
        let accepted = accepted.clone();
        async move {
            loop {
                let (conn, _) = dead.accept().await.unwrap();
                accepted.fetch_add(1, Ordering::SeqCst);
                drop(conn);
            }
        }
    });
    let options = PgConnectOptions::new()
        .host("127.0.0.1")
        .port(port)
        .username("idem")
        .ssl_mode(PgSslMode::Disable);
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with(options);
    let store = PgStore::builder(pool)
        .dedicated_connections(1)
        .build()
        .unwrap();
    let claims = tokio::spawn(async move { claimed_together(&store, "dead", 8).await })
        .await
        .unwrap();
    for claim in &claims {
        let err = claim.as_ref().expect_err("no claim without the database");
        assert_eq!(err.operation(), Some(Operation::Claim), "{err}");
        assert!(err.to_string().contains("cannot reach PostgreSQL"), "{err}");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "the 8 claims, sent as two halves, tried to connect once per half, not once per call"
    );
}

/// The connection carrying a batch dies mid-statement (a restart or failover): the batch is sent
/// again on a new connection, and every call gets its own answer; nothing was applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_connection_dies_is_sent_again() {
    let test = TestStore::new("batch_kill", 4).await;
    let app = format!("{}-counted", test.schema);
    let (store, _proxy) = one_connection_store(&test, &app, None).await;
    warm_up(&store, &test, &app).await;
    let mut mix = prepare_mix(&store, "k").await;
    // The batch itself waits: one of its fresh keys is held by an uncommitted insert.
    let in_batch = key("k-fresh-in-batch");
    mix.fresh.push(in_batch.clone());
    let second = support::hold_insert(&test, in_batch.as_str()).await;
    let (tasks, _) = behind_a_held_claim(&test, &store, &app, "k-blocker", 31, || {
        claim_all(&store, &mix)
    })
    .await;
    // Now the batch of 31 is on the wire, waiting for `second`: cut its connection.
    until_lock_wait(&test, &app).await;
    let terminated: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = $1) AS t",
    )
    .bind(&app)
    .fetch_one(test.store.pool())
    .await
    .unwrap();
    assert_eq!(terminated, 1);
    // Sent again on a new connection, it waits for `second` again; let it through.
    until_lock_wait(&test, &app).await;
    second.rollback().await.unwrap();
    let fences = check_answers(&mix, tasks).await;
    assert_eq!(fences.len(), 11);
}

/// A batch that the database refuses as a whole (here: one of its keys is locked past the
/// connection's `lock_timeout`) is retried call by call: the call that cannot be served fails
/// with a store error of its own, and every other call gets its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batch_is_retried_call_by_call() {
    let test = TestStore::new("batch_refused", 4).await;
    let app = format!("{}-counted", test.schema);
    let (store, _proxy) = one_connection_store(&test, &app, Some(Duration::from_secs(1))).await;
    let mix = prepare_mix(&store, "r").await;
    let stuck = key("r-stuck");
    let stuck_insert = support::hold_insert(&test, stuck.as_str()).await;
    let ((tasks, stuck_call), _) =
        behind_a_held_claim(&test, &store, &app, "r-blocker", 31, || {
            let tasks = claim_all(&store, &mix);
            let stuck_call = {
                let (store, stuck) = (store.clone(), stuck.clone());
                tokio::spawn(async move { claim(&store, &stuck).await })
            };
            (tasks, stuck_call)
        })
        .await;
    let fences = check_answers(&mix, tasks).await;
    assert_eq!(fences.len(), 10, "every other call was answered");
    let refused = stuck_call.await.unwrap();
    assert!(refused.is_err(), "the stuck call fails alone: {refused:?}");
    stuck_insert.rollback().await.unwrap();
    assert!(matches!(
        claim(&store, &stuck).await.unwrap(),
        Claim::Acquired { .. }
    ));
}
