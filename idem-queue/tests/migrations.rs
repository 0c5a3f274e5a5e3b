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
