//! The queue's own migrations: its table beside the store's records, a history of its own, and
//! a table made before the queue had migrations of its own adopted as it is.

mod support;

use idem_queue::{NewJob, Queue};
use idem_store_postgres::sqlx;
use support::TestStore;

/// The queue's table is vacuumed when a hundredth of it has changed (the queue's second migration): a claim reads
/// its `available_at` index past the entries of every job claimed since the last vacuum, and
/// finished jobs kept in the table would otherwise put PostgreSQL's default fifth ever further
/// away. A value an operator set on the table before the migration ran is kept.
#[tokio::test]
async fn the_queue_is_vacuumed_at_a_hundredth_changed_unless_the_operator_said_otherwise() {
    let test = TestStore::new("mig_vacuum", 2).await;
    let queue = support::queue(&test).await;
    let schema = &test.schema;
    let options = |pool: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, Option<Vec<String>>>(&format!(
            "SELECT reloptions FROM pg_class WHERE oid = '\"{schema}\".idem_records_queue'::regclass"
        ))
        .fetch_one(&pool)
        .await
        .unwrap()
        .unwrap_or_default()
    };
    let pool = test.store.pool().clone();
    assert_eq!(
        options(pool.clone()).await,
        ["autovacuum_vacuum_scale_factor=0.01"],
        "a migrated queue table carries the setting"
    );
    // An operator's own value, set before the migration ran, is left alone.
    sqlx::raw_sql(&format!(
        "ALTER TABLE \"{schema}\".idem_records_queue
             SET (autovacuum_vacuum_scale_factor = 0.05, fillfactor = 90);
         DELETE FROM \"{schema}\".idem_records_queue_migrations WHERE version = 2;"
    ))
    .execute(&pool)
    .await
    .unwrap();
    queue.migrate().await.unwrap();
    let mut kept = options(pool.clone()).await;
    kept.sort();
    assert_eq!(
        kept,
        ["autovacuum_vacuum_scale_factor=0.05", "fillfactor=90"],
        "the operator's setting stands"
    );
    let applied: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM \"{schema}\".idem_records_queue_migrations WHERE version = 2"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(applied, 1, "the migration is recorded again");
}

/// A database whose queue table an earlier version made (with the records' migrations, under
/// versions 3 and 8 of their history) is adopted: the queue's migrations find its objects there
/// and keep them, its jobs included, and the store accepts the history that lists the two
/// versions it no longer ships.
#[tokio::test]
async fn a_queue_table_made_by_the_records_migrations_is_adopted_with_its_jobs() {
    let test = TestStore::new("mig_adopt", 2).await;
    let queue = support::queue(&test).await;
    let job = NewJob::new("kept", &serde_json::json!({"n": 1})).unwrap();
    let _ = queue.enqueue(job).await.unwrap();
    let schema = &test.schema;
    sqlx::raw_sql(&format!(
        "DROP TABLE \"{schema}\".idem_records_queue_migrations;
         INSERT INTO \"{schema}\".idem_records_migrations (version, description, checksum)
             VALUES (3, 'queue', '\\x00'), (8, 'queue autovacuum', '\\x00');"
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    let again = Queue::new(&test.store);
    again.migrate().await.expect("the earlier table is adopted");
    let stats = again.stats().await.unwrap();
    assert_eq!(stats.queued, 1, "the job enqueued before is still there");
    let applied: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM \"{schema}\".idem_records_queue_migrations"
    ))
    .fetch_one(test.store.pool())
    .await
    .unwrap();
    let shipped = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .count() as i64;
    assert_eq!(
        applied, shipped,
        "every queue migration, recorded in its own history"
    );
}

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

/// A database that applied migration 8's first text (which built its indexes in a transaction)
/// is up to date: its history's checksum is known. Any other text is refused.
#[tokio::test]
async fn a_history_of_the_first_text_of_a_rewritten_migration_is_accepted() {
    let test = TestStore::new("mig_rewritten", 2).await;
    let queue = support::queue(&test).await;
    let schema = &test.schema;
    let set_checksum = |hex: &'static str| {
        let pool = test.store.pool().clone();
        async move {
            sqlx::query(&format!(
                "UPDATE \"{schema}\".idem_records_queue_migrations
                 SET checksum = decode($1, 'hex') WHERE version = 8"
            ))
            .bind(hex)
            .execute(&pool)
            .await
            .unwrap();
        }
    };
    set_checksum(
        "6d3f168ef9f8be046f863570f2c3e68ff1e0a42a150c98cda15d6cd02094616385d32d7bcb8ee23228f2c4825b734d8e",
    )
    .await;
    queue.migrate().await.expect("the first text is known");
    set_checksum("00").await;
    let refused = queue.migrate().await.unwrap_err();
    assert!(refused.to_string().contains("differs"), "{refused}");
}
