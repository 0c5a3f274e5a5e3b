//! Where the default store's statements run: on connections it holds from the pool, never more
//! than half of the pool's `max_connections`, so the server never sees more connections than the
//! pool allows; and closing the pool does not wait for a store that is still alive.

mod support;

use idem_core::{Call, Error};
use std::time::Duration;
use support::{connections_named, TestStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_store_holds_at_most_half_the_pool() {
    let test = TestStore::new("conn_half", 8).await;
    let calls: Vec<_> = (0..200)
        .map(|i| {
            let store = test.store.clone();
            tokio::spawn(async move {
                Call::new(&store, format!("half:{}", i % 100))
                    .run(async { Ok::<_, std::io::Error>(()) })
                    .await
            })
        })
        .collect();
    let mut executed = 0;
    for call in calls {
        if call.await.unwrap().unwrap().is_executed() {
            executed += 1;
        }
    }
    assert_eq!(executed, 100, "each of 100 keys ran once");
    // The pool's own connections (migrate, and any it keeps idle) count too: all of them are
    // the pool's, so at most its 8.
    let open = connections_named(&test).await;
    assert!(
        (1..=8).contains(&open),
        "{open} connections for a pool of 8"
    );
    // While the store holds 4, the pool still serves the application's own queries.
    let mut own = Vec::new();
    for _ in 0..4 {
        own.push(
            tokio::time::timeout(Duration::from_secs(5), test.store.pool().acquire())
                .await
                .expect("the pool still has connections for the application")
                .unwrap(),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_pool_does_not_wait_for_a_live_store() {
    let test = TestStore::new("conn_close", 4).await;
    for i in 0..10 {
        let outcome = Call::new(&test.store, format!("close:{i}"))
            .run(async { Ok::<_, std::io::Error>(()) })
            .await
            .unwrap();
        assert!(outcome.is_executed());
    }
    tokio::time::timeout(Duration::from_secs(10), test.store.pool().close())
        .await
        .expect("pool.close() returns while the store is alive");
    // The store fails closed afterwards: a store error, and the body does not run.
    let ran = std::sync::atomic::AtomicBool::new(false);
    let outcome = Call::new(&test.store, "close:after")
        .run(async {
            ran.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        })
        .await;
    assert!(matches!(outcome, Err(Error::Store(_))), "{outcome:?}");
    assert!(!ran.into_inner(), "no body runs without a claim");
}
