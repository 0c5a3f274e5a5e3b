//! What a job costs on the wire, counted by a proxy between the store and PostgreSQL.

mod support;

use idem_queue::{Job, NewJob, Queue};
use idem_store_postgres::testing::CountingProxy;
use idem_store_postgres::PgStore;
use std::time::Duration;
use support::TestStore;

/// Longer than the test: no renewal falls due.
const LEASE: Duration = Duration::from_secs(60);

/// While work waits, a queued job costs one statement: its completion, which also marks it done
/// and claims the next job for the slot it frees (so the worker's own claim runs only when
/// the slot finds nothing). Counted on the wire with one worker that never prefetches (on the
/// defaults it would, once the first completion found the next job waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_costs_one_statement_while_work_waits() {
    const JOBS: u64 = 40;
    let test = TestStore::new("rt_queue", 4).await;
    let uncounted = support::queue(&test).await;
    for i in 0..JOBS {
        let _ = uncounted
            .enqueue(NewJob::new(format!("job:{i}"), &i).unwrap())
            .await
            .unwrap();
    }
    let (pool, proxy) = CountingProxy::pool(2).await;
    let store = PgStore::builder(pool)
        .schema(test.schema.clone())
        .dedicated_connections(1)
        .build()
        .unwrap();
    let (statements_before, trips_before, pings_before) = proxy.counts();
    let workers = Queue::new(&store)
        .worker(|_job: Job| async { Ok::<_, std::io::Error>(()) })
        .concurrency(1)
        .prefetch(0)
        .lease(LEASE) // no renewal falls due during the test
        .listen(false) // no LISTEN connection: only job statements cross the proxy
        .poll_interval(Duration::from_secs(3600))
        .start();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while uncounted.stats().await.unwrap().done < JOBS {
        assert!(
            std::time::Instant::now() < deadline,
            "the jobs did not finish"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The first claim, then each job's completion, which also claims the next job (the last
    // finds none); then the worker's own claim, which finds nothing.
    let expected = 1 + JOBS + 1;
    // The one new connection is set up once for the store's statements (both `SET`s in one
    // query).
    let setup = 1;
    // Let the worker's last (empty) claim happen, then stop it: nothing is held, nothing sent.
    while proxy.counts().0 - statements_before < expected + setup {
        assert!(std::time::Instant::now() < deadline, "no final claim");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = workers.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.released, 0);
    let (statements, trips, pings) = proxy.counts();
    assert_eq!(statements - statements_before, expected + setup);
    // One round trip each, plus preparing the two statements once on the new connection.
    assert_eq!(trips - trips_before, expected + setup + 2);
    assert_eq!(pings, pings_before, "dedicated connections: no pings");
}
