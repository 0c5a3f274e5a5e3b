//! The effect journal on PostgreSQL, through the `Store` trait: a retry skips what a failed run
//! recorded, and at-most-once reports an interrupted effect as unknown.

mod support;

use idem_core::journal::{Effect, Journal};
use idem_core::{idempotent, Error};
use idem_store_postgres::PgStore;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use support::TestStore;

#[idempotent(key = "pg-order:{id}", store = store)]
async fn fulfil(
    store: &PgStore,
    id: u32,
    sent: &AtomicU32,
    fail: bool,
) -> Result<Effect<u32>, String> {
    let receipt = Journal::new()
        .at_least_once("send-receipt", async {
            Ok::<_, std::io::Error>(sent.fetch_add(1, Ordering::SeqCst) + 1)
        })
        .await
        .map_err(|e| e.to_string())?;
    if fail {
        return Err("a later step failed".into());
    }
    Ok(receipt)
}

#[tokio::test]
async fn a_retry_skips_what_the_failed_run_recorded() {
    let test = TestStore::new("journal", 4).await;
    let sent = AtomicU32::new(0);
    assert!(matches!(
        fulfil(&test.store, 1, &sent, true).await,
        Err(Error::Handler(_))
    ));
    let outcome = fulfil(&test.store, 1, &sent, false).await.unwrap();
    assert_eq!(outcome.into_value(), Some(Effect::Skipped(1)));
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

#[idempotent(key = "pg-payout:{id}", store = store)]
async fn payout(
    store: &PgStore,
    id: u32,
    paid: &AtomicU32,
    hang: bool,
) -> Result<Effect<u32>, String> {
    Journal::new()
        .at_most_once("transfer", async {
            paid.fetch_add(1, Ordering::SeqCst);
            if hang {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            Ok::<_, std::io::Error>(100u32)
        })
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn an_interrupted_at_most_once_effect_is_unknown_not_repeated() {
    let test = TestStore::new("journal_amo", 4).await;
    let paid = AtomicU32::new(0);
    let cut = tokio::time::timeout(
        Duration::from_millis(300),
        payout(&test.store, 2, &paid, true),
    )
    .await;
    assert!(cut.is_err());
    // The abandoned claim is released in the background; wait for the retry to get the key.
    let mut retry = None;
    for _ in 0..50 {
        let outcome = payout(&test.store, 2, &paid, false).await.unwrap();
        if outcome.is_executed() {
            retry = outcome.into_value();
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(retry, Some(Effect::Unknown));
    assert_eq!(paid.load(Ordering::SeqCst), 1, "never paid twice");
}
