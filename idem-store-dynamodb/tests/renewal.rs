//! A body that outlives its lease keeps its claim: idem-core renews it through the store while
//! the body runs, so a second delivery meanwhile is in progress, not a second run.

use idem_core::{Call, Key, Outcome, RecordState, Store};
use idem_store_dynamodb::testing::{dynamodb_url, fresh_table, local_client};
use idem_store_dynamodb::{DynamoDbStore, TableLayout};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_longer_than_its_lease_keeps_its_claim_renewed() {
    let client = local_client(&dynamodb_url());
    let table = fresh_table(&client, "renewal", &TableLayout::default()).await;
    let store = DynamoDbStore::new(client, &table);
    let lease = Duration::from_millis(900);
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let running = {
        let store = store.clone();
        tokio::spawn(async move {
            Call::new(&store, "long-body")
                .lease(lease)
                .run(async move {
                    let _ = released.await;
                    Ok::<_, std::io::Error>(())
                })
                .await
        })
    };
    let key = Key::new("long-body").unwrap();
    let first = loop {
        match store.get(&key).await.unwrap() {
            Some(record) => break record,
            None => tokio::task::yield_now().await,
        }
    };
    let RecordState::InProgress {
        lease_expires_at: first_end,
    } = first.state
    else {
        panic!("expected the running claim, got {first:?}");
    };
    // Past the first lease's end (a real wait: the renewal runs on real time).
    tokio::time::sleep(lease * 2).await;
    let later = store.get(&key).await.unwrap().expect("the record");
    let RecordState::InProgress {
        lease_expires_at: later_end,
    } = later.state
    else {
        panic!("expected the running claim, got {later:?}");
    };
    assert!(
        later_end > first_end,
        "the lease was renewed while the body ran"
    );
    let again = Call::new(&store, "long-body")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(matches!(again, Outcome::InProgress { .. }), "{again:?}");
    release.send(()).unwrap();
    assert!(running.await.unwrap().unwrap().is_executed());
}
