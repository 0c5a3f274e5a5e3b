//! An index migration under load, in a test binary of its own: its build waits for every
//! transaction of the database older than it, so a migration of a test running beside it (they
//! take turns on one advisory lock per database) would wait for the transaction this test holds
//! open, and this test for that migration.

mod support;

use idem_queue::{NewJob, Queue};
use idem_store_postgres::sqlx;
use support::TestStore;

/// Migrations that build indexes on a queue with jobs in it build them concurrently: jobs are
/// enqueued, claimed and completed while the build runs, beside workers of the version before
/// (here: claims through that version's index, `q_ready`, until it is dropped last). The build
/// is held in its last phase, which waits for transactions older than it, by one the test
/// keeps open; a build that held writes (in a transaction) would never show that phase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_migration_lets_jobs_flow_while_it_builds() {
    use idem_queue::{Job, JobResult};
    use std::time::Duration;
    let test = TestStore::new("mig_online", 8).await;
    let queue = support::queue(&test).await;
    let (schema, pool) = (&test.schema, test.store.pool());
    // A queue with history, back at migration 7: `q_ready` and no `q_leases` / `q_waiting`.
    sqlx::raw_sql(&format!(
        "INSERT INTO \"{schema}\".idem_records_queue (key, payload, max_attempts, state, finished_at)
             SELECT 'old:' || i, '{{}}', 1, 'done', now() FROM generate_series(1, 20000) i;
         DROP INDEX \"{schema}\".idem_records_q_leases;
         DROP INDEX \"{schema}\".idem_records_q_waiting;
         CREATE INDEX idem_records_q_ready ON \"{schema}\".idem_records_queue
             (queue, priority DESC, available_at) WHERE state IN ('queued', 'running');
         DELETE FROM \"{schema}\".idem_records_queue_migrations WHERE version = 8;"
    ))
    .execute(pool)
    .await
    .unwrap();
    let workers = support::another(&test)
        .await
        .worker(|_job: Job| async { Ok::<_, std::io::Error>(()) })
        .poll_interval(Duration::from_millis(20))
        .start();

    // An older transaction: the build's last phase waits for it.
    let mut older = pool.begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *older)
        .await
        .unwrap();
    sqlx::query("SELECT 1").execute(&mut *older).await.unwrap();

    let migrating = tokio::spawn({
        let queue = Queue::new(&test.store);
        async move { queue.migrate().await }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let waiting: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_progress_create_index p
                            JOIN pg_class c ON c.oid = p.relid
                            JOIN pg_namespace n ON n.oid = c.relnamespace
                            WHERE n.nspname = $1 AND p.phase = 'waiting for old snapshots')",
        )
        .bind(schema)
        .fetch_one(pool)
        .await
        .unwrap();
        if waiting {
            break;
        }
        assert!(
            !migrating.is_finished() && std::time::Instant::now() < deadline,
            "the index build never waited for older transactions: it did not build concurrently"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for i in 0..5 {
        let key = format!("during:{i}");
        let _ = queue
            .enqueue(NewJob::new(key.as_str(), &i).unwrap())
            .await
            .expect("enqueued while the index builds");
        let done = queue
            .wait_result(&key, Duration::from_secs(20))
            .await
            .unwrap();
        assert_eq!(
            done,
            Some(JobResult::Done(None)),
            "{key} ran while the index builds"
        );
    }
    assert!(!migrating.is_finished(), "the build was still under way");
    older.commit().await.unwrap();
    migrating.await.unwrap().expect("the migration finishes");

    let indexes: Vec<(String, bool)> = sqlx::query_as(
        "SELECT c.relname::text, i.indisvalid FROM pg_index i
         JOIN pg_class c ON c.oid = i.indexrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relname LIKE 'idem_records_q_%' ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(
        indexes.contains(&("idem_records_q_leases".into(), true)),
        "{indexes:?}"
    );
    assert!(
        indexes.contains(&("idem_records_q_waiting".into(), true)),
        "{indexes:?}"
    );
    assert!(
        !indexes
            .iter()
            .any(|(name, _)| name.contains("q_ready") || name.contains("building")),
        "{indexes:?}"
    );
    workers.shutdown(Duration::from_secs(5)).await;
}
