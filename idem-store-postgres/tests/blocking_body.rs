//! A body that blocks its thread keeps its lease on PostgreSQL too: renewal runs on a task of
//! its own (regression: with a 1 s lease, a body blocking 3 s was run twice).

mod support;

use idem_core::Call;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::TestStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_blocks_its_thread_keeps_its_lease() {
    let test = TestStore::new("blocking", 8).await;
    let store = Arc::new(test.store.clone());
    let runs = Arc::new(AtomicU32::new(0));
    let run = |store: Arc<idem_store_postgres::PgStore>, runs: Arc<AtomicU32>| async move {
        Call::new(&*store, "blocking:1")
            .lease(Duration::from_secs(1))
            .run(async {
                runs.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_secs(3));
                Ok::<_, std::io::Error>(())
            })
            .await
    };
    let first = tokio::spawn(run(store.clone(), runs.clone()));
    while runs.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let again = run(store.clone(), runs.clone()).await.unwrap();
        assert!(
            again.is_in_progress() || again.is_duplicate(),
            "got {again:?}"
        );
    }
    assert!(first.await.unwrap().unwrap().is_executed());
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the body ran once");
}
