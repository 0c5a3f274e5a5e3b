//! Transactional mode against a real server: the key, the handler's writes and the completion
//! commit together or not at all.

mod support;

use idem_core::{idempotent, Error, Key, Outcome, Store};
use idem_store_postgres::sqlx::{self, Row};
use idem_store_postgres::PgStore;
use std::sync::Arc;
use std::time::Duration;
use support::TestStore;

/// An account table in the test's schema, and the store in the same database.
async fn setup(prefix: &str) -> (TestStore, String) {
    let test = TestStore::new(prefix, 40).await;
    let accounts = support::accounts(&test).await;
    (test, accounts)
}

use support::credits;

#[derive(Debug)]
enum CreditError {
    Db(#[allow(dead_code)] sqlx::Error),
    Refused,
}

impl From<sqlx::Error> for CreditError {
    fn from(e: sqlx::Error) -> Self {
        CreditError::Db(e)
    }
}

/// An unsafe increment (`credits = credits + 100`), made safe: the credit and the key commit together.
#[idempotent(key = "credit:{order}", store = store, transaction = tx)]
async fn credit(
    store: &PgStore,
    accounts: &str,
    order: u32,
    amount: i64,
    fail: bool,
) -> Result<i64, CreditError> {
    let row = sqlx::query(&format!(
        "UPDATE {accounts} SET credits = credits + $1 WHERE id = 42 RETURNING credits"
    ))
    .bind(amount)
    .fetch_one(&mut **tx)
    .await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    if fail {
        return Err(CreditError::Refused);
    }
    Ok(row.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_commit_the_writes_once() {
    let (test, accounts) = setup("tx_dup").await;
    let store = Arc::new(test.store.clone());
    let accounts = Arc::new(accounts);
    let barrier = Arc::new(tokio::sync::Barrier::new(16));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (store, accounts, barrier) = (store.clone(), accounts.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                credit(&store, &accounts, 1, 100, false).await
            })
        })
        .collect();
    let mut executed = 0;
    let mut duplicates = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(Outcome::Executed(_)) => executed += 1,
            Ok(Outcome::Duplicate { .. }) => duplicates += 1,
            other => panic!("a concurrent duplicate must wait and see the completion: {other:?}"),
        }
    }
    assert_eq!((executed, duplicates), (1, 15));
    assert_eq!(
        credits(&store, &accounts).await,
        100,
        "credited exactly once"
    );
}

#[tokio::test]
async fn an_error_rolls_back_the_writes_and_the_claim() {
    let (test, accounts) = setup("tx_err").await;
    let store = &test.store;
    match credit(store, &accounts, 2, 100, true).await {
        Err(Error::Handler(CreditError::Refused)) => {}
        other => panic!("expected the handler's error, got {other:?}"),
    }
    assert_eq!(
        credits(store, &accounts).await,
        0,
        "no partial effect remains"
    );
    assert!(
        store
            .get(&Key::new("credit:2").unwrap())
            .await
            .unwrap()
            .is_none(),
        "no row is left behind"
    );
    assert!(credit(store, &accounts, 2, 100, false)
        .await
        .unwrap()
        .is_executed());
    assert_eq!(credits(store, &accounts).await, 100);
}

#[idempotent(key = "credit-panics:{order}", store = store, transaction = tx)]
async fn credit_then_panic(store: &PgStore, accounts: &str, order: u32) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "UPDATE {accounts} SET credits = credits + 1 WHERE id = 42"
    ))
    .execute(&mut **tx)
    .await?;
    panic!("handler bug after writing");
}

#[tokio::test]
async fn a_panic_rolls_back_the_writes_and_the_claim() {
    let (test, accounts) = setup("tx_panic").await;
    let store = Arc::new(test.store.clone());
    let joined = tokio::spawn({
        let (store, accounts) = (store.clone(), accounts.clone());
        async move { credit_then_panic(&store, &accounts, 3).await }
    })
    .await;
    assert!(joined.unwrap_err().is_panic(), "the panic propagates");
    assert_eq!(credits(&store, &accounts).await, 0);
    assert!(store
        .get(&Key::new("credit-panics:3").unwrap())
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn a_dropped_call_rolls_back_and_frees_the_key() {
    let (test, accounts) = setup("tx_cancel").await;
    let store = &test.store;
    // The body sleeps 50ms after writing; give up after 10ms.
    let cut = tokio::time::timeout(
        Duration::from_millis(10),
        credit(store, &accounts, 4, 100, false),
    )
    .await;
    assert!(cut.is_err());
    // sqlx rolls the dropped transaction back when its connection is next used; the claim must
    // never be seen completed, and the retry must run.
    let again = tokio::time::timeout(
        Duration::from_secs(10),
        credit(store, &accounts, 4, 7, false),
    )
    .await
    .expect("the key is not stuck");
    assert_eq!(again.unwrap(), Outcome::Executed(7));
    assert_eq!(credits(store, &accounts).await, 7);
}

#[idempotent(key = "receipt:{order}", store = store, transaction = tx, replay)]
async fn receipt(store: &PgStore, order: u32) -> Result<Option<u32>, sqlx::Error> {
    let one: i32 = sqlx::query("SELECT 1").fetch_one(&mut **tx).await?.get(0);
    Ok((order > 0).then_some(u32::try_from(one - 1).unwrap()))
}

#[tokio::test]
async fn replay_works_in_transactional_mode() {
    let (test, _) = setup("tx_replay").await;
    let store = &test.store;
    assert_eq!(receipt(store, 5).await.unwrap(), Outcome::Executed(Some(0)));
    match receipt(store, 5).await.unwrap() {
        Outcome::Duplicate { value, .. } => assert_eq!(value, Some(Some(0))),
        other => panic!("{other:?}"),
    }
}

/// Runs `call` in transactional mode without the attribute (`Call::run_in_transaction` with a
/// boxed future): its body credits account 42 of `accounts` with `amount`.
async fn credit_by_call(
    call: idem_core::Call<'_, PgStore>,
    accounts: &str,
    amount: i64,
) -> Result<Outcome<()>, Error<sqlx::Error>> {
    let accounts = accounts.to_owned();
    call.run_in_transaction(move |tx| {
        Box::pin(async move {
            sqlx::query(&format!(
                "UPDATE {accounts} SET credits = credits + $1 WHERE id = 42"
            ))
            .bind(amount)
            .execute(&mut **tx)
            .await?;
            Ok(())
        })
    })
    .await
}

/// The same mode without the attribute.
#[tokio::test]
async fn call_api_runs_in_a_transaction() {
    let (test, accounts) = setup("tx_call").await;
    let store = &test.store;
    for expected_credits in [5, 5] {
        let call = idem_core::Call::new(store, "call-credit:1");
        let outcome = credit_by_call(call, &accounts, 5).await.unwrap();
        assert!(outcome.is_executed() || outcome.is_duplicate());
        assert_eq!(
            credits(store, &test_accounts(&test)).await,
            expected_credits
        );
    }
}

fn test_accounts(test: &TestStore) -> String {
    format!("\"{}\".accounts", test.schema)
}

#[idempotent(key = "ctx:{order}", store = store, transaction = tx)]
async fn reads_context(store: &PgStore, order: u32) -> Result<String, sqlx::Error> {
    let _ = &mut **tx;
    Ok(idem_core::context::current()
        .unwrap()
        .sub_key("receipt")
        .unwrap()
        .into_string())
}

/// The body sees the current call in transactional mode too.
#[tokio::test]
async fn the_body_sees_its_call_context() {
    let (test, _) = setup("tx_ctx").await;
    let outcome = reads_context(&test.store, 9).await.unwrap();
    assert_eq!(outcome, Outcome::Executed("ctx:9/receipt".to_owned()));
}

/// `(completed, expires_at - completed_at, purge_at = expires_at)` of `key`'s record.
async fn record_times(test: &TestStore, key: &str) -> (bool, Option<f64>, bool) {
    sqlx::query_as(&format!(
        "SELECT completed_at IS NOT NULL,
                extract(epoch FROM expires_at - completed_at)::float8,
                purge_at = expires_at
         FROM {} WHERE key = $1",
        test.store.table()
    ))
    .bind(key)
    .fetch_one(test.store.pool())
    .await
    .unwrap()
}

/// A fresh key's record is written completed with the claim (nothing outside the transaction
/// sees it before the commit): once committed it is completed, kept for the call's `keep`, and
/// due for purge when that ends (no refiling later), as a separate completion would leave it.
#[tokio::test]
async fn the_commit_completes_a_record_the_claim_wrote_completed() {
    let (test, accounts) = setup("tx_written").await;
    let store = &test.store;
    let run = || {
        let call = idem_core::Call::new(store, "kept:1").keep(Duration::from_secs(7200));
        credit_by_call(call, &accounts, 3)
    };
    assert!(run().await.unwrap().is_executed());
    assert_eq!(
        record_times(&test, "kept:1").await,
        (true, Some(7200.0), true)
    );
    assert!(run().await.unwrap().is_duplicate());
    assert_eq!(credits(store, &accounts).await, 3);
}

/// Claims `key` in lease mode for `lease`, as another run would.
async fn claim_in_lease_mode(store: &PgStore, key: &Key, lease: Duration) {
    let claimed = store
        .claim(idem_core::ClaimRequest {
            key,
            fingerprint: None,
            lease,
            token: None,
        })
        .await
        .unwrap();
    assert!(matches!(claimed, idem_core::Claim::Acquired { .. }));
}

/// A lapsed lease taken over inside a transaction is claimed in progress, as in lease mode;
/// the completion is then written before the commit.
#[tokio::test]
async fn a_record_taken_over_in_a_transaction_is_completed_at_the_commit() {
    let (test, accounts) = setup("tx_takeover").await;
    let store = &test.store;
    let key = Key::new("taken:1").unwrap();
    claim_in_lease_mode(store, &key, Duration::ZERO).await;
    let call = idem_core::Call::new(store, key.clone()).keep(Duration::from_secs(60));
    let outcome = credit_by_call(call, &accounts, 4).await.unwrap();
    assert!(outcome.is_executed());
    let (completed, kept, _) = record_times(&test, "taken:1").await;
    assert_eq!((completed, kept), (true, Some(60.0)));
    assert!(matches!(
        store.get(&key).await.unwrap().map(|r| r.state),
        Some(idem_core::RecordState::Completed { .. })
    ));
}

/// With `claim_with_begin`, a fresh key is claimed by text sent with the BEGIN (`fresh_claim.rs`),
/// its values written as constants of letters, digits and escapes. A key and a scope with quotes,
/// backslashes, a semicolon, dollar quotes and non-ASCII text are stored as given and found again;
/// and the text's insert misses no record that a claim must see: one from before scopes (scope
/// `''`), and another run's live claim in lease mode.
#[tokio::test]
async fn a_claim_sent_with_its_begin_stores_any_key_as_given_and_misses_no_record() {
    let (test, accounts) = setup("tx_fresh_text").await;
    let store = &PgStore::builder(test.store.pool().clone())
        .schema(test.schema.clone())
        .claim_with_begin(true)
        .build()
        .unwrap();
    let (text, scope) = (r"o'clock\'; DROP TABLE x; -- ü $$ $a$", r"sc'ope\");
    let call = || idem_core::Call::new(store, text).scope(scope);
    assert!(credit_by_call(call(), &accounts, 1)
        .await
        .unwrap()
        .is_executed());
    assert!(credit_by_call(call(), &accounts, 1)
        .await
        .unwrap()
        .is_duplicate());
    let stored: Vec<(String, String)> = sqlx::query_as(&format!(
        "SELECT key, scope FROM {} WHERE key LIKE 'o%'",
        store.table()
    ))
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(stored, vec![(text.to_owned(), scope.to_owned())]);

    sqlx::query(&format!(
        "INSERT INTO {} (key, scope, fence, completed_at, expires_at, purge_at)
         VALUES ('legacy:1', '', 1, now(), now() + interval '1 day', now() + interval '1 day')",
        store.table()
    ))
    .execute(store.pool())
    .await
    .unwrap();
    let legacy = idem_core::Call::new(store, "legacy:1").scope("handler");
    let outcome = credit_by_call(legacy, &accounts, 10).await.unwrap();
    assert!(
        outcome.is_duplicate(),
        "the record from before scopes counts: {outcome:?}"
    );

    let key = Key::new("leased:1").unwrap();
    claim_in_lease_mode(store, &key, Duration::from_secs(60)).await;
    let outcome = credit_by_call(idem_core::Call::new(store, key), &accounts, 100).await;
    assert!(
        matches!(outcome, Ok(Outcome::InProgress { .. })),
        "the live claim stands: {outcome:?}"
    );
    assert_eq!(
        credits(store, &accounts).await,
        1,
        "only the fresh key's body ran"
    );
}

/// With `claim_with_begin` past the store's own connections (here a store with none), the
/// transaction runs on a connection of the pool that the store began itself, claim included.
/// A call dropped while its body runs must not hand that connection back inside its
/// transaction: whoever took it next would commit the dropped call's claim (a record saying
/// the key ran) and its writes. The pool's one connection is checked to be outside any
/// transaction that wrote, and the key runs again with only its second credit applied.
#[tokio::test]
async fn a_call_dropped_on_a_pooled_connection_it_began_leaves_no_transaction_behind() {
    use idem_store_postgres::sqlx::postgres::PgPoolOptions;
    let (test, accounts) = setup("tx_begin_pooled").await;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&support::database_url())
        .await
        .unwrap();
    let store = &PgStore::builder(pool.clone())
        .schema(test.schema.clone())
        .through_pool()
        .claim_with_begin(true)
        .build()
        .unwrap();
    // The first call on the connection prepares the claim; the second claims with its BEGIN.
    for order in [1, 2] {
        let outcome = credit(store, &accounts, order, 1, false).await.unwrap();
        assert_eq!(outcome, Outcome::Executed(i64::from(order)));
    }
    // The body sleeps 50ms after writing; give up after 10ms.
    let cut = tokio::time::timeout(
        Duration::from_millis(10),
        credit(store, &accounts, 3, 100, false),
    )
    .await;
    assert!(cut.is_err());
    // A statement of its own has written nothing; inside the dropped call's transaction it
    // would have the claim's and the credit's transaction id.
    let fresh_transaction: bool =
        sqlx::query_scalar("SELECT pg_current_xact_id_if_assigned() IS NULL")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        fresh_transaction,
        "the pool handed out the dropped call's open transaction"
    );
    let again = credit(store, &accounts, 3, 7, false).await.unwrap();
    assert_eq!(again, Outcome::Executed(9));
    assert_eq!(credits(store, &accounts).await, 9);
}

/// A transactional body that runs longer than its `keep` still commits a record that counts
/// for `keep` from its completion: counted from the transaction's start, it would commit
/// already expired, and the next delivery would run the work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_counts_from_the_completion_not_the_transactions_start() {
    for claim_with_begin in [false, true] {
        let test = TestStore::new("tx_keep", 4).await;
        let store = PgStore::builder(test.store.pool().clone())
            .schema(test.schema.clone())
            .claim_with_begin(claim_with_begin)
            .build()
            .unwrap();
        let keep = Duration::from_secs(1);
        let outcome = idem_core::Call::new(&store, "slow")
            .keep(keep)
            .run_in_transaction(move |_tx| {
                Box::pin(async move {
                    // The scenario itself: a body that runs past its `keep`.
                    tokio::time::sleep(keep + Duration::from_millis(500)).await;
                    Ok::<_, std::io::Error>(())
                })
            })
            .await
            .unwrap();
        assert!(outcome.is_executed());
        let record = store
            .get(&Key::new("slow").unwrap())
            .await
            .unwrap()
            .unwrap();
        let idem_core::RecordState::Completed { expires_at, .. } = record.state else {
            panic!("completed: {record:?}")
        };
        assert!(
            expires_at > std::time::SystemTime::now(),
            "the record counts after its commit (claim with begin: {claim_with_begin})"
        );
        let again = idem_core::Call::new(&store, "slow")
            .run_in_transaction(|_tx| Box::pin(async { Ok::<_, std::io::Error>(()) }))
            .await
            .unwrap();
        assert!(again.is_duplicate(), "{again:?}");
    }
}
