//! Migrations: versioned, safe to run from many processes at once, apart from the
//! application's own history; and the schema/table names they accept.

mod support;

use idem_core::{Call, Purge, Store};
use idem_store_postgres::sqlx::{self, Row};
use idem_store_postgres::PgStore;
use support::{pool, unique_schema, TestStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_migrations_apply_once() {
    let schema = unique_schema("mig");
    let mut calls = Vec::new();
    for _ in 0..8 {
        let store = PgStore::builder(pool(2).await)
            .schema(schema.clone())
            .build()
            .unwrap();
        calls.push(tokio::spawn(async move { store.migrate().await }));
    }
    for call in calls {
        call.await
            .unwrap()
            .expect("every concurrent migrate() succeeds");
    }
    let pool = pool(2).await;
    let applied: i64 = sqlx::query(&format!(
        "SELECT count(*) FROM \"{schema}\".idem_records_migrations"
    ))
    .fetch_one(&pool)
    .await
    .unwrap()
    .get(0);
    assert_eq!(applied, 6, "the six migrations recorded once each");
    // And the table works.
    let store = PgStore::builder(pool.clone())
        .schema(schema.clone())
        .build()
        .unwrap();
    store.migrate().await.expect("migrating again is a no-op");
    let outcome = Call::new(&store, "mig:1")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(outcome.is_executed());
    let _ = sqlx::raw_sql(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&pool)
        .await;
}

#[tokio::test]
async fn does_not_touch_the_applications_sqlx_migrations() {
    let test = TestStore::new("mig_app", 2).await;
    let exists: bool = sqlx::query(
        "SELECT exists(SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = '_sqlx_migrations')",
    )
    .bind(&test.schema)
    .fetch_one(test.store.pool())
    .await
    .unwrap()
    .get(0);
    assert!(!exists, "idem keeps its history in its own table");
}

#[tokio::test]
async fn a_table_migrated_by_a_newer_version_is_refused() {
    let test = TestStore::new("mig_new", 2).await;
    sqlx::query(&format!(
        "INSERT INTO \"{}\".idem_records_migrations (version, description, checksum)
         VALUES (99, 'from the future', '\\x00')",
        test.schema
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    let err = test.store.migrate().await.unwrap_err();
    assert!(err.to_string().contains("newer version"), "{err}");
}

#[tokio::test]
async fn a_store_before_migrate_says_to_migrate() {
    let store = PgStore::builder(pool(1).await)
        .schema(unique_schema("nomig"))
        .build()
        .unwrap();
    let err = Call::new(&store, "k")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("migrate()"), "{err}");
    assert!(
        std::error::Error::source(&err).is_some(),
        "keeps the sqlx error"
    );
}

#[tokio::test]
async fn schema_and_table_names_are_validated() {
    let pool = pool(1).await;
    for bad in ["Public", "idem; DROP TABLE x", "a\"b", "", "1x"] {
        let err = PgStore::builder(pool.clone())
            .schema(bad)
            .build()
            .unwrap_err();
        assert!(
            err.to_string().contains("invalid schema name"),
            "{bad}: {err}"
        );
        let err = PgStore::builder(pool.clone())
            .table(bad)
            .build()
            .unwrap_err();
        assert!(
            err.to_string().contains("invalid table name"),
            "{bad}: {err}"
        );
    }
}

#[tokio::test]
async fn purge_clears_a_backlog_in_batches() {
    let test = TestStore::new("purge", 2).await;
    let table = test.store.table().to_owned();
    sqlx::query(&format!(
        "INSERT INTO {table} (key, fence, expires_at)
         SELECT 'old:' || i, i, now() - interval '1 hour' FROM generate_series(1, 5000) i"
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    let live = idem_core::Key::new("live").unwrap();
    let _ = Call::new(&test.store, live.clone())
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert_eq!(test.store.purge_all_expired(700).await.unwrap(), 5000);
    assert!(
        test.store.get(&live).await.unwrap().is_some(),
        "live records stay"
    );
}

/// A drain's batches each start where the one before ended, one microsecond early: rows that
/// share a `purge_at` (a batched claim's records do) or a journal `expires_at` across a batch's
/// end are all deleted, and so is every row behind them.
#[tokio::test]
async fn a_drain_goes_on_from_each_batchs_end_and_passes_over_nothing() {
    let test = TestStore::new("purge_cursor", 2).await;
    let table = test.store.table().to_owned();
    let journal = format!("\"{}\".idem_records_effects", test.schema);
    // Three records to each microsecond and two journal entries, so batches of 700 end in the
    // middle of a microsecond; inserted out of order.
    sqlx::raw_sql(&format!(
        "INSERT INTO {table} (key, fence, expires_at, purge_at)
         SELECT 'old:' || i, i, now() - interval '1 hour',
                now() - interval '1 hour' + (i / 3) * interval '1 microsecond'
         FROM generate_series(1, 5000) i ORDER BY random();
         INSERT INTO {journal} (key, effect, state, fence, expires_at)
         SELECT 'old:' || i, 'mail', 1, i,
                now() - interval '1 hour' + (i / 2) * interval '1 microsecond'
         FROM generate_series(1, 1500) i ORDER BY random();"
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    assert_eq!(test.store.purge_all_expired(700).await.unwrap(), 6500);
    let (records, effects): (i64, i64) = sqlx::query_as(&format!(
        "SELECT (SELECT count(*) FROM {table}), (SELECT count(*) FROM {journal})"
    ))
    .fetch_one(test.store.pool())
    .await
    .unwrap();
    assert_eq!((records, effects), (0, 0), "every expired row is deleted");
}

/// A row that a drain passes over because a claim holds it is deleted by the next drain, which
/// starts at the start of the index, though the first drain's batches went on past it.
#[tokio::test]
async fn a_row_locked_during_a_drain_is_purged_by_the_next() {
    let test = TestStore::new("purge_locked", 2).await;
    let table = test.store.table().to_owned();
    sqlx::raw_sql(&format!(
        "INSERT INTO {table} (key, fence, expires_at, purge_at)
         SELECT 'old:' || i, i, now() - interval '1 hour',
                now() - interval '2 hours' + i * interval '1 millisecond'
         FROM generate_series(1, 3000) i"
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    // Held, in the first batch's range.
    let holder = support::lock_row(&test, &table, "old:10").await;
    assert_eq!(test.store.purge_all_expired(700).await.unwrap(), 2999);
    holder.rollback().await.unwrap();
    assert_eq!(test.store.purge_all_expired(700).await.unwrap(), 1);
    let left: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(test.store.pool())
        .await
        .unwrap();
    assert_eq!(left, 0);
}

/// Records that are due but kept (a completion's `keep` outlasting its lease, or records from
/// before migration 7, due at once) are filed again at their `expires_at`, not deleted, and a
/// drain goes on past batches of them to the expired records behind.
#[tokio::test]
async fn purge_files_kept_records_again_and_drains_past_them() {
    let test = TestStore::new("purge_refile", 2).await;
    let table = test.store.table().to_owned();
    // Due first (earlier `purge_at`) but kept for an hour, then the expired ones.
    sqlx::raw_sql(&format!(
        "INSERT INTO {table} (key, fence, completed_at, expires_at, purge_at)
         SELECT 'kept:' || i, i, now(), now() + interval '1 hour', now() - interval '2 hours'
         FROM generate_series(1, 3000) i;
         INSERT INTO {table} (key, fence, expires_at, purge_at)
         SELECT 'old:' || i, i, now() - interval '1 hour', now() - interval '1 hour'
         FROM generate_series(1, 2000) i;"
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    // Through the store: claimed with a lease that lapsed at once, completed to keep an hour.
    let key = idem_core::Key::new("completed").unwrap();
    let fence = match test
        .store
        .claim(idem_core::ClaimRequest {
            key: &key,
            fingerprint: None,
            lease: std::time::Duration::ZERO,
            token: None,
        })
        .await
        .unwrap()
    {
        idem_core::Claim::Acquired { fence, .. } => fence,
        other => panic!("a fresh key is acquired: {other:?}"),
    };
    let completion = idem_core::Completion {
        output: None,
        keep: std::time::Duration::from_secs(3600),
    };
    assert_eq!(
        test.store.complete(&key, fence, completion).await.unwrap(),
        idem_core::Fenced::Applied
    );

    assert_eq!(test.store.purge_all_expired(700).await.unwrap(), 2000);
    let (left, refiled): (i64, i64) = sqlx::query_as(&format!(
        "SELECT count(*), count(*) FILTER (WHERE purge_at = expires_at) FROM {table}"
    ))
    .fetch_one(test.store.pool())
    .await
    .unwrap();
    assert_eq!(left, 3001, "the kept records stay");
    assert_eq!(
        refiled, 3001,
        "each kept record is filed at the end of its keep"
    );
    assert_eq!(test.store.purge_all_expired(700).await.unwrap(), 0);
    assert!(matches!(
        test.store.get(&key).await.unwrap().map(|r| r.state),
        Some(idem_core::RecordState::Completed { .. })
    ));
}

/// A table from before the claim token (migrations 1 to 3) is upgraded in place: its records
/// stay, and a record claimed without a token is another run's to every caller.
#[tokio::test]
async fn a_table_from_before_claim_tokens_is_upgraded_in_place() {
    let test = TestStore::new("mig_token", 2).await;
    let schema = &test.schema;
    // Back to what version 3 left: no token column, migration 4 not recorded.
    sqlx::raw_sql(&format!(
        "ALTER TABLE \"{schema}\".idem_records DROP COLUMN token;
         DELETE FROM \"{schema}\".idem_records_migrations WHERE version = 4;
         INSERT INTO \"{schema}\".idem_records (key, fence, expires_at)
         VALUES ('old-run', 1, now() + interval '1 hour');"
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    test.store.migrate().await.unwrap();
    let key = idem_core::Key::new("old-run").unwrap();
    let claim = test
        .store
        .claim(idem_core::ClaimRequest {
            key: &key,
            fingerprint: None,
            lease: std::time::Duration::from_secs(30),
            token: Some(idem_core::ClaimToken::random()),
        })
        .await
        .unwrap();
    assert!(
        matches!(claim, idem_core::Claim::InProgress { .. }),
        "the old run's claim stands: {claim:?}"
    );
}

/// A table from before scopes (migrations 1 to 4) is upgraded in place: its records land in the
/// scope `''`, and a claim in any scope still finds them, so upgrading never turns done work
/// into new work; new records are then kept per scope.
#[tokio::test]
async fn a_table_from_before_scopes_is_upgraded_and_its_records_still_count() {
    let test = TestStore::new("mig_scope", 2).await;
    let schema = &test.schema;
    // Back to what version 4 left: no scope columns, keys alone as primary keys.
    sqlx::raw_sql(&format!(
        "ALTER TABLE \"{schema}\".idem_records DROP CONSTRAINT idem_records_pkey;
         ALTER TABLE \"{schema}\".idem_records DROP COLUMN scope;
         ALTER TABLE \"{schema}\".idem_records ADD PRIMARY KEY (key);
         ALTER TABLE \"{schema}\".idem_records_effects DROP CONSTRAINT idem_records_effects_pkey;
         ALTER TABLE \"{schema}\".idem_records_effects DROP COLUMN scope;
         ALTER TABLE \"{schema}\".idem_records_effects ADD PRIMARY KEY (key, effect);
         DELETE FROM \"{schema}\".idem_records_migrations WHERE version = 5;
         INSERT INTO \"{schema}\".idem_records (key, fence, completed_at, expires_at)
         VALUES ('done-before', 1, now(), now() + interval '1 day');"
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    test.store.migrate().await.unwrap();
    let outcome = Call::new(&test.store, "done-before")
        .scope("some_handler")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(
        outcome.is_duplicate(),
        "the record from before the upgrade counts: {outcome:?}"
    );
    // New work is kept per scope.
    for scope in ["a", "b"] {
        let outcome = Call::new(&test.store, "new-work")
            .scope(scope)
            .run(async { Ok::<_, std::io::Error>(()) })
            .await
            .unwrap();
        assert!(outcome.is_executed(), "scope {scope}: {outcome:?}");
    }
}
