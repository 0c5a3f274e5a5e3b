//! Transactional mode on SQLite, through the attribute: the handler's writes commit with its
//! completion, or roll back with its claim.

use idem_core::{idempotent, Error, Outcome};
use idem_store_sqlite::sqlx::{self, Row};
use idem_store_sqlite::SqliteStore;

async fn setup(name: &str) -> (SqliteStore, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("idem-sqlite-tx-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = SqliteStore::open(dir.join("idem.db")).await.unwrap();
    store.migrate().await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE accounts (id INTEGER PRIMARY KEY, credits INTEGER NOT NULL);
         INSERT INTO accounts VALUES (42, 0);",
    )
    .execute(store.pool())
    .await
    .unwrap();
    (store, dir)
}

async fn credits(store: &SqliteStore) -> i64 {
    sqlx::query("SELECT credits FROM accounts WHERE id = 42")
        .fetch_one(store.pool())
        .await
        .unwrap()
        .get(0)
}

/// An unsafe increment (`credits = credits + 100`), made safe: the credit and the key commit together.
#[idempotent(key = "credit:{order}", store = store, transaction = tx)]
async fn credit(
    store: &SqliteStore,
    order: u32,
    amount: i64,
    fail: bool,
) -> Result<i64, sqlx::Error> {
    let row =
        sqlx::query("UPDATE accounts SET credits = credits + $1 WHERE id = 42 RETURNING credits")
            .bind(amount)
            .fetch_one(&mut **tx)
            .await?;
    if fail {
        return Err(sqlx::Error::RowNotFound);
    }
    Ok(row.get(0))
}

#[tokio::test]
async fn the_credit_commits_once_with_its_key() {
    let (store, dir) = setup("once").await;
    assert_eq!(
        credit(&store, 1, 100, false).await.unwrap(),
        Outcome::Executed(100)
    );
    assert!(credit(&store, 1, 100, false).await.unwrap().is_duplicate());
    assert_eq!(credits(&store).await, 100);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_failed_body_rolls_back_its_writes_and_frees_the_key() {
    let (store, dir) = setup("fail").await;
    assert!(matches!(
        credit(&store, 2, 7, true).await,
        Err(Error::Handler(_))
    ));
    assert_eq!(
        credits(&store).await,
        0,
        "the write rolled back with the claim"
    );
    assert_eq!(
        credit(&store, 2, 7, false).await.unwrap(),
        Outcome::Executed(7)
    );
    assert_eq!(credits(&store).await, 7);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_transactional_calls_credit_once() {
    let (store, dir) = setup("race").await;
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { credit(&store, 3, 5, false).await })
        })
        .collect();
    let mut executed = 0;
    for call in calls {
        match call.await.unwrap().unwrap() {
            Outcome::Executed(_) => executed += 1,
            Outcome::Duplicate { .. } | Outcome::InProgress { .. } => {}
        }
    }
    assert_eq!(executed, 1);
    assert_eq!(credits(&store).await, 5);
    let _ = std::fs::remove_dir_all(dir);
}
