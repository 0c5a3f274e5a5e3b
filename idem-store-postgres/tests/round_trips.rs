//! Each `Store` operation is one statement and one round trip, counted on the wire; a
//! duplicate claim takes no row lock.

mod support;

use idem_core::{
    Call, Claim, ClaimRequest, Completion, Fenced, Key, Purge, Store, TransactionalStore,
};
use idem_store_postgres::sqlx::{self, Row};
use idem_store_postgres::PgStore;
use std::time::Duration;
use support::CountingProxy;
use support::TestStore;

const LEASE: Duration = Duration::from_secs(60);

/// A store whose single connection goes through a counting proxy.
async fn counted_store(test: &TestStore) -> (PgStore, CountingProxy) {
    counted_store_with(test, Via::Default).await
}

/// How a counted store runs its statements.
#[derive(Clone, Copy)]
enum Via {
    Default,
    Dedicated(usize),
    ThroughPool,
    ClaimWithBegin,
    /// `claim_with_begin` on a store with no connections of its own: its transactions run on
    /// the pool's.
    ThroughPoolWithBegin,
}

async fn counted_store_with(test: &TestStore, via: Via) -> (PgStore, CountingProxy) {
    // Through the pool, one connection (so acquiring it waits until it is back, pinged); else
    // two: the default store holds one, and transactional mode takes the other.
    let max = if matches!(via, Via::ThroughPool) {
        1
    } else {
        2
    };
    counted_store_sized(test, via, max).await
}

async fn counted_store_sized(test: &TestStore, via: Via, max: u32) -> (PgStore, CountingProxy) {
    let (pool, proxy) = CountingProxy::pool(max).await;
    let builder = PgStore::builder(pool).schema(test.schema.clone());
    let builder = match via {
        Via::Default => builder,
        Via::Dedicated(n) => builder.dedicated_connections(n),
        Via::ThroughPool => builder.through_pool(),
        Via::ClaimWithBegin => builder.claim_with_begin(true),
        Via::ThroughPoolWithBegin => builder.through_pool().claim_with_begin(true),
    };
    (builder.build().unwrap(), proxy)
}

fn key(name: &str) -> Key {
    Key::new(name).unwrap()
}

async fn claim(store: &PgStore, key: &Key, lease: Duration) -> Claim {
    store
        .claim(ClaimRequest {
            key,
            fingerprint: None,
            lease,
            token: None,
        })
        .await
        .unwrap()
}

/// Runs `op` and returns how many round trips it made, after checking that each round trip
/// carried exactly one statement (sqlx's pings on connection release carry none and are not
/// counted).
async fn count<F: std::future::Future>(proxy: &CountingProxy, op: F) -> (F::Output, u64) {
    let (statements, trips, _) = proxy.counts();
    let out = op.await;
    let (statements_after, trips_after, _) = proxy.counts();
    assert_eq!(
        statements_after - statements,
        trips_after - trips,
        "one statement per round trip"
    );
    (out, trips_after - trips)
}

async fn work() -> Result<(), std::io::Error> {
    Ok(())
}

async fn exercise_every_statement(store: &PgStore, prefix: &str) {
    let k = key(&format!("{prefix}-a"));
    let _ = Call::new(store, k.clone()).run(work()).await.unwrap();
    let _ = Call::new(store, k.clone()).run(work()).await.unwrap();
    let b = key(&format!("{prefix}-b"));
    let Claim::Acquired { fence, .. } = claim(store, &b, Duration::from_millis(1)).await else {
        panic!("acquire");
    };
    let _ = store
        .renew(&b, fence, Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let Claim::Acquired { fence, .. } = claim(store, &b, LEASE).await else {
        panic!("takeover");
    };
    let _ = store.release(&b, fence).await.unwrap();
    let _ = store.get(&b).await.unwrap();
    let _ = store.purge_expired(10).await.unwrap();
    let _ = Call::new(store, key(&format!("{prefix}-tx")))
        .run_in_transaction(|_tx| Box::pin(work()))
        .await
        .unwrap();
}

#[tokio::test]
async fn every_operation_is_one_round_trip() {
    let test = TestStore::new("rt", 2).await;
    let (store, proxy) = counted_store(&test).await;
    // Statements are prepared on first use (one extra round trip each), then cached.
    exercise_every_statement(&store, "warm").await;

    let fresh = key("fresh");
    let (outcome, trips) = count(&proxy, Call::new(&store, fresh.clone()).run(work())).await;
    assert!(outcome.unwrap().is_executed());
    assert_eq!(trips, 2, "a fresh call is claim + complete");

    let (outcome, trips) = count(&proxy, Call::new(&store, fresh.clone()).run(work())).await;
    assert!(outcome.unwrap().is_duplicate());
    assert_eq!(trips, 1, "a duplicate is one claim");

    let k = key("ops");
    let (claimed, trips) = count(&proxy, claim(&store, &k, Duration::from_millis(1))).await;
    assert_eq!(trips, 1, "claim");
    let Claim::Acquired { fence, .. } = claimed else {
        panic!()
    };
    let (renewed, trips) = count(&proxy, store.renew(&k, fence, Duration::from_millis(1))).await;
    assert_eq!((renewed.unwrap(), trips), (Fenced::Applied, 1), "renew");
    let (_, trips) = count(&proxy, store.get(&k)).await;
    assert_eq!(trips, 1, "get");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (claimed, trips) = count(&proxy, claim(&store, &k, LEASE)).await;
    assert_eq!(
        trips, 2,
        "only a takeover of a lapsed lease costs a second statement"
    );
    let Claim::Acquired {
        fence,
        taken_over: true,
        ..
    } = claimed
    else {
        panic!("{claimed:?}")
    };
    let (released, trips) = count(&proxy, store.release(&k, fence)).await;
    assert_eq!((released.unwrap(), trips), (Fenced::Applied, 1), "release");
    let (_, trips) = count(&proxy, store.purge_expired(100)).await;
    assert_eq!(trips, 1, "purge");

    // Transactional mode: BEGIN, the claim (which writes the record completed), COMMIT; one
    // commit for the key and the handler's writes together.
    let (outcome, trips) = count(
        &proxy,
        Call::new(&store, key("tx-fresh")).run_in_transaction(|_tx| Box::pin(work())),
    )
    .await;
    assert!(outcome.unwrap().is_executed());
    assert_eq!(trips, 3, "transactional fresh call: BEGIN, claim, COMMIT");
    // An output to replay is written by a completion statement before the COMMIT (prepared
    // on the connection by a first such call).
    let replay = |name: &str| {
        Call::new(&store, key(name))
            .run_in_transaction_replay(|_tx| Box::pin(async { Ok::<_, std::io::Error>(7) }))
    };
    assert!(replay("tx-replay-warm").await.unwrap().is_executed());
    let (outcome, trips) = count(&proxy, replay("tx-replay")).await;
    assert!(outcome.unwrap().is_executed());
    assert_eq!(
        trips, 4,
        "transactional fresh call with replay: BEGIN, claim, complete, COMMIT"
    );
    let replayed = Call::new(&store, key("tx-replay"))
        .run_in_transaction_replay(|_tx| Box::pin(async { Ok::<_, std::io::Error>(8) }))
        .await
        .unwrap();
    assert_eq!(replayed.into_value(), Some(7), "the output was committed");
    let (outcome, trips) = count(
        &proxy,
        Call::new(&store, key("tx-fresh")).run_in_transaction(|_tx| Box::pin(work())),
    )
    .await;
    assert!(outcome.unwrap().is_duplicate());
    assert_eq!(trips, 3, "transactional duplicate: BEGIN, claim, ROLLBACK");
    drop(store);
    drop(test);
}

/// A duplicate claim only reads: it does not lock the row (so it neither waits for a lock
/// holder nor writes a lock to the row, and so no WAL). The same table with the
/// `ON CONFLICT DO UPDATE ... WHERE` form blocks, which shows the test can tell the two apart.
#[tokio::test]
async fn a_duplicate_claim_takes_no_row_lock() {
    let test = TestStore::new("nolock", 4).await;
    let store = &test.store;
    let k = key("locked");
    let Claim::Acquired { fence, .. } = claim(store, &k, LEASE).await else {
        panic!()
    };
    let done = store
        .complete(
            &k,
            fence,
            Completion {
                output: None,
                keep: LEASE,
            },
        )
        .await
        .unwrap();
    assert_eq!(done, Fenced::Applied);
    let table = store.table().to_owned();
    let xmax = |pool: sqlx::PgPool, table: String| async move {
        sqlx::query(&format!(
            "SELECT xmax::text FROM {table} WHERE key = 'locked'"
        ))
        .fetch_one(&pool)
        .await
        .unwrap()
        .get::<String, _>(0)
    };
    for _ in 0..50 {
        assert!(matches!(
            claim(store, &k, LEASE).await,
            Claim::Completed { .. }
        ));
    }
    assert_eq!(
        xmax(store.pool().clone(), table.clone()).await,
        "0",
        "50 duplicate claims left no row lock on the tuple"
    );

    // Hold the row lock in another transaction, as a slow writer would.
    let mut holder = store.pool().begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT 1 FROM {table} WHERE key = 'locked' FOR UPDATE"
    ))
    .execute(&mut *holder)
    .await
    .unwrap();
    let duplicate = tokio::time::timeout(Duration::from_secs(5), claim(store, &k, LEASE)).await;
    assert!(
        matches!(duplicate, Ok(Claim::Completed { .. })),
        "a duplicate must not wait for the row lock: {duplicate:?}"
    );
    let do_update = format!(
        "INSERT INTO {table} (key, scope, fence, expires_at) VALUES ('locked', 'default', 0, now())
         ON CONFLICT (key, scope) DO UPDATE SET fence = {table}.fence WHERE false"
    );
    let blocked = tokio::time::timeout(
        Duration::from_millis(500),
        sqlx::query(&do_update).execute(store.pool()),
    )
    .await;
    assert!(
        blocked.is_err(),
        "ON CONFLICT DO UPDATE waits for the row lock"
    );
    holder.rollback().await.unwrap();
}

/// Transactional claims are as cheap: the trait methods make no extra statements.
#[tokio::test]
async fn transactional_claim_of_a_completed_key_reads_only() {
    let test = TestStore::new("txread", 2).await;
    let store = &test.store;
    let k = key("tx-read");
    let _ = Call::new(store, k.clone()).run(work()).await.unwrap();
    let claimed = store
        .claim_in_transaction(
            ClaimRequest {
                key: &k,
                fingerprint: None,
                lease: LEASE,
                token: None,
            },
            Duration::from_secs(3600),
        )
        .await
        .unwrap();
    assert!(matches!(claimed.claim, Claim::Completed { .. }));
    assert!(claimed.transaction.is_none(), "no transaction is left open");
}

/// With dedicated connections, a store operation is one round trip and nothing else: no pool
/// ping when the connection is given back.
#[tokio::test]
async fn dedicated_connections_make_no_pings() {
    let test = TestStore::new("rt_dedicated", 2).await;
    let (store, proxy) = counted_store_with(&test, Via::Dedicated(1)).await;
    exercise_every_statement(&store, "warm").await;
    store.pool().close().await; // the warm-up's transaction went through the pool
    let (_, _, pings_before) = proxy.counts();
    let (outcome, trips) = count(&proxy, Call::new(&store, key("d-fresh")).run(work())).await;
    assert!(outcome.unwrap().is_executed());
    assert_eq!(trips, 2);
    let (outcome, trips) = count(&proxy, Call::new(&store, key("d-fresh")).run(work())).await;
    assert!(outcome.unwrap().is_duplicate());
    assert_eq!(trips, 1);
    let (_, _, pings_after) = proxy.counts();
    assert_eq!(
        pings_after, pings_before,
        "no pings on dedicated connections"
    );
}

/// Transactional mode on a store that can lend connections (a pool of 10: the store holds 5 and
/// keeps 3 for lease mode's statements, so it lends 2): the transaction runs on one of the
/// store's connections, so taking it and giving it back cost nothing on the wire (sqlx's pool
/// would ping it on return): BEGIN, claim, COMMIT.
#[tokio::test]
async fn transactions_on_the_stores_connections_cost_three_round_trips() {
    let test = TestStore::new("rt_tx_lent", 2).await;
    let (store, proxy) = counted_store_sized(&test, Via::Default, 10).await;
    exercise_every_statement(&store, "warm").await;
    let on = std::sync::Mutex::new(String::new());
    let (outcome, trips) = count(
        &proxy,
        Call::new(&store, key("lent-fresh")).run_in_transaction(|tx| {
            *on.lock().unwrap() = format!("{tx:?}");
            Box::pin(work())
        }),
    )
    .await;
    assert!(outcome.unwrap().is_executed());
    assert_eq!(trips, 3, "BEGIN, claim, COMMIT");
    assert!(
        on.lock().unwrap().contains("the store's connection"),
        "{:?}",
        on.lock().unwrap()
    );
    let (outcome, trips) = count(
        &proxy,
        Call::new(&store, key("lent-fresh")).run_in_transaction(|_tx| Box::pin(work())),
    )
    .await;
    assert!(outcome.unwrap().is_duplicate());
    assert_eq!(trips, 3, "BEGIN, claim, ROLLBACK");
    let (_, _, pings) = proxy.counts();
    assert_eq!(pings, 0, "nothing was given back to the pool");
}

/// The round trips of transactional calls on a store built `via`, counted on the wire, in
/// order: a fresh key; a duplicate while duplicates are rare; a duplicate while they dominate;
/// a fresh key then; a fresh key once fresh keys dominate again. Every outcome is checked.
async fn transactional_round_trips(prefix: &str, via: Via) -> [u64; 5] {
    let test = TestStore::new(prefix, 2).await;
    // Through the pool, one connection, so that every call finds the claim prepared on it.
    let max = if matches!(via, Via::ThroughPoolWithBegin) {
        1
    } else {
        10
    };
    let (store, proxy) = counted_store_sized(&test, via, max).await;
    exercise_every_statement(&store, "warm").await;
    let store = &store;
    let call = |name: String| async move {
        Call::new(store, key(&name))
            .run_in_transaction(|_tx| Box::pin(work()))
            .await
            .unwrap()
            .is_executed()
    };
    let counted = |name: &'static str, executed: bool| {
        let proxy = &proxy;
        async move {
            let (ran, trips) = count(proxy, call(name.to_owned())).await;
            assert_eq!(ran, executed, "{name}: executed");
            trips
        }
    };
    // Each statement is prepared on the connection by a first call of its kind.
    assert!(call("warm".into()).await);
    assert!(!call("warm".into()).await);
    let fresh = counted("dup", true).await;
    let rare = counted("dup", false).await;
    for _ in 0..16 {
        assert!(!call("dup".into()).await);
    }
    let dominant = counted("dup", false).await;
    let fresh_then = counted("fresh-0", true).await;
    for i in 1..32 {
        assert!(call(format!("fresh-{i}")).await);
    }
    let fresh_again = counted("fresh-last", true).await;
    [fresh, rare, dominant, fresh_then, fresh_again]
}

/// While most transactional calls are duplicates, a duplicate is one read outside any
/// transaction instead of BEGIN, claim, ROLLBACK; a fresh key meanwhile pays the read too (4);
/// once fresh keys dominate again, a fresh call is back to BEGIN, claim, COMMIT with no read.
#[tokio::test]
async fn transactional_duplicates_cost_one_round_trip_while_they_dominate() {
    let trips = transactional_round_trips("rt_tx_dups", Via::Default).await;
    assert_eq!(trips, [3, 3, 1, 4, 3]);
}

/// With `claim_with_begin`, a fresh transactional call is two round trips: its claim goes out
/// with the BEGIN (`fresh_claim.rs`), then the COMMIT. A duplicate costs four while duplicates
/// are rare (the claim sent with the BEGIN fails; ROLLBACK with a new BEGIN; the claim;
/// ROLLBACK), and one read while they dominate, when a fresh key costs three (the read first).
#[tokio::test]
async fn a_claim_sent_with_its_begin_makes_a_fresh_transactional_call_two_round_trips() {
    let trips = transactional_round_trips("rt_tx_begin", Via::ClaimWithBegin).await;
    assert_eq!(trips, [2, 4, 1, 3, 2]);
}

/// The same on the pool's connections (a store with none of its own): a fresh call is still
/// two round trips, and a rare duplicate four. While duplicates dominate, the store cannot read
/// first on a connection of its own, so it begins without the claim: BEGIN, the claim, and
/// ROLLBACK or COMMIT, three (one less than the claim sent with the BEGIN would cost a
/// duplicate).
#[tokio::test]
async fn a_claim_sent_with_its_begin_on_a_pooled_connection_is_two_round_trips() {
    let trips = transactional_round_trips("rt_tx_begin_pool", Via::ThroughPoolWithBegin).await;
    assert_eq!(trips, [2, 4, 3, 3, 2]);
}

/// The counterpart that shows the ping counter sees what the test above rules out: through
/// sqlx's pool, a connection is pinged when it goes back. (Acquiring the pool's one connection
/// waits until it is back, pinged; then every ping has been counted.)
#[tokio::test]
async fn pooled_connections_are_pinged_on_return() {
    let test = TestStore::new("rt_pooled_pings", 2).await;
    let (store, proxy) = counted_store_with(&test, Via::ThroughPool).await;
    exercise_every_statement(&store, "warm").await;
    let (outcome, trips) = count(&proxy, Call::new(&store, key("p-fresh")).run(work())).await;
    assert!(outcome.unwrap().is_executed());
    assert!(trips >= 2);
    let _back = store.pool().acquire().await.unwrap();
    let (_, _, pings) = proxy.counts();
    assert!(
        pings >= 2,
        "the claim's and the completion's connection were pinged, saw {pings}"
    );
}
