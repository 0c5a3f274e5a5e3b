//! Calls survive a database restart (issue: after every idem connection was terminated, as a
//! restart or failover does, 4 of the next 8 sequential calls failed with a store error: each
//! retry picked another dead idle connection). A call made once the server is reachable again
//! succeeds: with the store's default connections (its own, batched), with an explicit number
//! of them, and through the pool.

mod support;

use idem_core::{Call, Outcome};
use support::{connections_named, TestStore};

/// Terminates every connection of `test`'s store (they carry its schema as application name),
/// as a server restart does, and returns how many there were.
async fn terminate_connections(test: &TestStore) -> i64 {
    support::count_for(
        test,
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = $1) AS t",
    )
    .await
}

async fn calls_survive_terminated_connections(test: TestStore) {
    // Open several connections and leave them idle: rounds of 16 concurrent calls until the
    // store has at least two (batching can serve a whole round on one connection).
    let mut round = 0;
    while connections_named(&test).await < 2 {
        round += 1;
        assert!(
            round <= 50,
            "50 rounds of 16 concurrent calls kept to one connection"
        );
        let warm: Vec<_> = (0..16)
            .map(|i| {
                let store = test.store.clone();
                tokio::spawn(async move {
                    Call::new(&store, format!("warm:{round}:{i}"))
                        .run(async { Ok::<_, std::io::Error>(()) })
                        .await
                })
            })
            .collect();
        for call in warm {
            assert!(call.await.unwrap().unwrap().is_executed());
        }
    }
    let terminated = terminate_connections(&test).await;
    assert!(terminated >= 2, "terminated {terminated} connections");
    let mut failures = Vec::new();
    for i in 0..20 {
        let outcome = Call::new(&test.store, format!("after:{i}"))
            .run(async { Ok::<_, std::io::Error>(()) })
            .await;
        match outcome {
            Ok(Outcome::Executed(())) => {}
            other => failures.push(format!("call {i}: {other:?}")),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_default_connections_survive_a_restart() {
    calls_survive_terminated_connections(TestStore::new("restart_default", 8).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_through_the_pool_survive_a_restart() {
    calls_survive_terminated_connections(TestStore::through_pool("restart_pool", 8).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_dedicated_connections_survive_a_restart() {
    calls_survive_terminated_connections(TestStore::dedicated("restart_dedicated", 8, 8).await)
        .await;
}
