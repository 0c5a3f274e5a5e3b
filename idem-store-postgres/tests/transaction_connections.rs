//! Where transactional mode's transactions run: on connections the store lends (with the
//! server's settings, never lease mode's), else on the pool's; bodies that make lease-mode calls
//! of their own never starve the store; savepoints work, and one left open commits nothing.

mod support;

use idem_core::{idempotent, Call, Error, Outcome};
use idem_store_postgres::sqlx::{self, Connection, Row};
use idem_store_postgres::testing::PoolProbe;
use idem_store_postgres::PgStore;
use std::sync::Arc;
use std::time::Duration;
use support::TestStore;

async fn table(test: &TestStore) -> String {
    let table = format!("\"{}\".notes", test.schema);
    sqlx::raw_sql(&format!("CREATE TABLE {table} (id int PRIMARY KEY)"))
        .execute(test.store.pool())
        .await
        .unwrap();
    table
}

async fn ids(store: &PgStore, table: &str) -> Vec<i32> {
    sqlx::query_scalar(&format!("SELECT id FROM {table} ORDER BY id"))
        .fetch_all(store.pool())
        .await
        .unwrap()
}

/// A transactional body that also makes a lease-mode call on the same store and holds its
/// transaction a while: with more such calls at once than the store lends connections, the
/// lent ones all wait on bodies, and the bodies' own calls still need the store's statements.
#[idempotent(key = "nested:{n}", store = store, transaction = tx)]
async fn nested(store: &PgStore, table: &str, n: i32) -> Result<(), sqlx::Error> {
    sqlx::query(&format!("INSERT INTO {table} VALUES ($1)"))
        .bind(n)
        .execute(&mut **tx)
        .await?;
    let inner = Call::new(store, format!("inner:{n}"))
        .run(async { Ok::<_, std::io::Error>(()) })
        .await;
    assert!(
        inner.unwrap().is_executed(),
        "the lease-mode call inside ran"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(())
}

/// A pool of 10: the store holds 5 and lends 2 of them to transactions; 24 concurrent
/// transactional calls whose bodies each make a lease-mode call all finish (the others run on
/// the pool's connections), and each wrote once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_call_the_store_again_never_starve_it() {
    let test = TestStore::new("txc_nested", 10).await;
    let table = Arc::new(table(&test).await);
    let store = Arc::new(test.store.clone());
    let calls: Vec<_> = (0..24)
        .map(|n| {
            let (store, table) = (Arc::clone(&store), Arc::clone(&table));
            tokio::spawn(async move { nested(&store, &table, n).await })
        })
        .collect();
    let all = tokio::time::timeout(Duration::from_secs(60), async {
        let mut outcomes = Vec::new();
        for call in calls {
            outcomes.push(call.await.unwrap());
        }
        outcomes
    })
    .await
    .expect("no transactional call waits forever on the store");
    for outcome in all {
        assert_eq!(outcome.unwrap(), Outcome::Executed(()));
    }
    assert_eq!(ids(&store, &table).await, (0..24).collect::<Vec<_>>());
}

#[idempotent(key = "reserve:{n}", store = store, transaction = tx)]
async fn held_inside(store: &PgStore, n: u32) -> Result<usize, sqlx::Error> {
    sqlx::query("SELECT 1").execute(&mut **tx).await?;
    Ok(store.connections_held())
}

/// A pool of 6: the store holds up to 3 and lends none (it needs all 3 for lease mode), so
/// every transaction runs on a connection of the pool. Before one begins, the store holds the
/// connections its lease-mode statements need: a burst of transactions cannot take the pool's
/// last ones first and leave their bodies' own calls waiting on the pool (which CI saw, as a
/// `PoolTimedOut` in the test above, on a cluster slow to open connections).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_transaction_begins_once_the_store_holds_its_own_connections() {
    let test = TestStore::new("txc_reserve", 6).await;
    assert_eq!(test.store.connections_held(), 0, "nothing opened yet");
    let Outcome::Executed(held) = held_inside(&test.store, 1).await.unwrap() else {
        panic!("fresh key")
    };
    assert_eq!(held, 3, "the store held its 3 before the transaction began");
}

#[idempotent(key = "settings:{n}", store = store, transaction = tx)]
async fn settings(store: &PgStore, n: u32) -> Result<(String, String), sqlx::Error> {
    let row =
        sqlx::query("SELECT current_setting('enable_seqscan'), current_setting('plan_cache_mode')")
            .fetch_one(&mut **tx)
            .await?;
    Ok((row.get(0), row.get(1)))
}

/// Lease mode tunes its own connections for the records table (sequential scans off, generic
/// plans); a transaction lent one of them gets the server's settings back, since the handler's
/// own queries run in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lent_connections_have_the_servers_settings() {
    let test = TestStore::new("txc_settings", 10).await;
    let store = Arc::new(test.store.clone());
    for round in 0..5u32 {
        // Lease-mode traffic first, so idle connections are tuned for it.
        let lease: Vec<_> = (0..16)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    Call::new(&*store, format!("lease:{round}:{i}"))
                        .run(async { Ok::<_, std::io::Error>(()) })
                        .await
                        .unwrap()
                })
            })
            .collect();
        for call in lease {
            assert!(call.await.unwrap().is_executed());
        }
        let txs: Vec<_> = (0..4)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move { settings(&store, round * 10 + i).await })
            })
            .collect();
        for tx in txs {
            let Outcome::Executed((seqscan, plans)) = tx.await.unwrap().unwrap() else {
                panic!("fresh key")
            };
            assert_eq!((seqscan.as_str(), plans.as_str()), ("on", "auto"));
        }
    }
}

#[idempotent(key = "savepoint:{n}", store = store, transaction = tx)]
async fn with_savepoints(store: &PgStore, table: &str, n: i32) -> Result<(), sqlx::Error> {
    let insert = format!("INSERT INTO {table} VALUES ($1)");
    // A savepoint rolled back: its row is gone, the transaction goes on.
    let mut undone = (**tx).begin().await?;
    sqlx::query(&insert)
        .bind(n + 1)
        .execute(&mut *undone)
        .await?;
    undone.rollback().await?;
    // A savepoint released: its row commits with the transaction.
    let mut kept = (**tx).begin().await?;
    sqlx::query(&insert).bind(n).execute(&mut *kept).await?;
    kept.commit().await?;
    Ok(())
}

#[idempotent(key = "leaked:{n}", store = store, transaction = tx)]
async fn leaks_a_savepoint(store: &PgStore, table: &str, n: i32) -> Result<(), sqlx::Error> {
    sqlx::query(&format!("INSERT INTO {table} VALUES ($1)"))
        .bind(n)
        .execute(&mut **tx)
        .await?;
    let open = (**tx).begin().await?;
    std::mem::forget(open);
    Ok(())
}

/// Savepoints inside the handler's transaction behave as sqlx's do; a handler that leaves one
/// open gets a store error and nothing commits (committing would only have released the
/// savepoint), and the key can be run again.
#[tokio::test]
async fn savepoints_nest_and_one_left_open_commits_nothing() {
    let test = TestStore::new("txc_savepoints", 10).await;
    let table = table(&test).await;
    let store = &test.store;
    assert_eq!(
        with_savepoints(store, &table, 10).await.unwrap(),
        Outcome::Executed(())
    );
    assert_eq!(ids(store, &table).await, vec![10]);

    let leaked = leaks_a_savepoint(store, &table, 20).await;
    assert!(matches!(leaked, Err(Error::Store(_))), "{leaked:?}");
    assert_eq!(ids(store, &table).await, vec![10], "nothing committed");
    let key = idem_core::Key::new("leaked:20").unwrap();
    assert!(
        idem_core::Store::get(store, &key).await.unwrap().is_none(),
        "the claim rolled back with the writes"
    );
    // The store and its connections still work, and the key runs cleanly.
    assert_eq!(
        with_savepoints(store, &table, 30).await.unwrap(),
        Outcome::Executed(())
    );
    assert_eq!(ids(store, &table).await, vec![10, 30]);
}

#[idempotent(key = "begun:{n}", store = store, transaction = tx)]
async fn write_note(store: &PgStore, table: &str, n: i32) -> Result<(), sqlx::Error> {
    sqlx::query(&format!("INSERT INTO {table} VALUES ($1)"))
        .bind(n)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A transactional call dropped at each point where it waits (a caller's timeout), its
/// `BEGIN` included, leaves no connection of the pool inside a transaction. sqlx's pool takes
/// a connection back after only a ping, and sqlx counts a transaction only once its `BEGIN`
/// is answered: a connection dropped in between would go back open, and the application's
/// next statements on it would run in that transaction and never commit. On a store that
/// lends no connection (its transactions run on the pool's), after each drop every connection
/// of the pool writes a row, and another connection must see them all.
#[tokio::test]
async fn a_transactional_call_dropped_as_it_begins_leaves_no_pooled_connection_in_a_transaction() {
    let test = TestStore::through_pool("txc_dropbegin", 2).await;
    let notes = table(&test).await;
    let probe = PoolProbe::create(test.store.pool(), 2, &test.schema).await;
    for point in 1..=64usize {
        let call = write_note(&test.store, &notes, point as i32);
        let finished = idem_conformance::drop_at_poll(call, point).await;
        probe.assert_all_commit(point as i32).await;
        if finished.is_some() {
            return;
        }
    }
    panic!("a transactional call that waits more than 64 times never finished");
}

/// The same for a page of records read by an operator (the dashboard's, whose browser went
/// away): it reads in a read-only snapshot, and a connection left in one would fail every
/// write of the application's that it carried next.
#[tokio::test]
async fn a_page_dropped_as_it_begins_leaves_no_pooled_connection_in_a_transaction() {
    let test = TestStore::through_pool("txc_droppage", 2).await;
    let probe = PoolProbe::create(test.store.pool(), 2, &test.schema).await;
    for point in 1..=64usize {
        let filter = idem_core::RecordFilter::default();
        let page = idem_core::Inspect::page(&test.store, &filter, None);
        let finished = idem_conformance::drop_at_poll(page, point).await;
        probe.assert_all_commit(point as i32).await;
        if let Some(page) = finished {
            page.expect("the page is read");
            return;
        }
    }
    panic!("a page that waits more than 64 times never finished");
}

/// The same for a transaction an extension runs on one of the store's connections through
/// `on_connection!` (the queue's claim under a global limit does, with an advisory lock): on
/// a store without connections of its own, the connection is the pool's, and one cut short
/// is closed rather than handed out again. Its `BEGIN` is held on the wire by an advisory
/// lock the test holds (sent along in the `BEGIN`'s round trip), and the task is aborted there.
#[tokio::test]
async fn a_transaction_through_on_connection_dropped_as_it_begins_leaves_no_pooled_connection_open()
{
    let test = TestStore::through_pool("txc_dropconn", 2).await;
    let probe = PoolProbe::create(test.store.pool(), 2, &test.schema).await;
    let mut holder = sqlx::PgConnection::connect(&support::database_url())
        .await
        .unwrap();
    sqlx::query("SELECT pg_advisory_lock(4242)")
        .execute(&mut holder)
        .await
        .unwrap();
    let store = test.store.clone();
    let transaction = tokio::spawn(async move {
        idem_postgres_core::on_connection!(store, idem_postgres_core::extend::Resend::Never, conn => async {
            let tx = conn.begin_with("BEGIN; SELECT pg_advisory_xact_lock(4242)").await?;
            tx.commit().await
        })
    });
    idem_store_postgres::testing::until_lock_waits(&test, 1).await;
    transaction.abort();
    assert!(transaction.await.unwrap_err().is_cancelled());
    sqlx::query("SELECT pg_advisory_unlock(4242)")
        .execute(&mut holder)
        .await
        .unwrap();
    probe.assert_all_commit(1).await;
}
