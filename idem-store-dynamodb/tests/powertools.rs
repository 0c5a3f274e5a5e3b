//! One table shared with Powertools for AWS Lambda (Python), on the local server: a record
//! either side completed is a duplicate with its stored answer on the other, and records
//! Powertools left in progress are judged by its own expiry attributes. Python runs from
//! `IDEM_PYTHON` (the virtual environment `scripts/test` makes, with Powertools in it).

use idem_core::{Call, Claim, ClaimRequest, Key, Outcome, Store};
use idem_store_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use idem_store_dynamodb::testing::{dynamodb_url, fresh_table, local_client};
use idem_store_dynamodb::{DynamoDbStore, TableLayout};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn python(table: &str, mode: &str, event: &Value) -> String {
    let python = std::env::var("IDEM_PYTHON").unwrap_or_else(|_| {
        panic!(
            "IDEM_PYTHON is not set: these tests run Powertools for AWS Lambda (Python); run \
             them with `scripts/test`, which installs it, or point IDEM_PYTHON at a Python with \
             aws-lambda-powertools and boto3"
        )
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/powertools.py");
    let out = Command::new(python)
        .args([script, &dynamodb_url(), table, mode, &event.to_string()])
        .output()
        .expect("run Python");
    assert!(
        out.status.success(),
        "powertools.py {mode} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

async fn table() -> (DynamoDbStore, String) {
    let client = local_client(&dynamodb_url());
    let table = fresh_table(&client, "powertools", &TableLayout::default()).await;
    (DynamoDbStore::new(client, &table), table)
}

#[tokio::test]
async fn a_record_powertools_completed_is_a_duplicate_with_its_answer() {
    let (store, table) = table().await;
    let event = json!({"order": 1});
    let first: Value = serde_json::from_str(&python(&table, "run", &event)).unwrap();
    assert_eq!(
        first,
        json!({"result": {"receipt": "python-1"}, "ran": true})
    );
    let key = python(&table, "key", &event);
    let again = Call::new(&store, key.as_str())
        .run_replay(async { Err::<Value, _>(std::io::Error::other("ran again in Rust")) })
        .await
        .unwrap();
    match again {
        Outcome::Duplicate { value, .. } => assert_eq!(value, Some(json!({"receipt": "python-1"}))),
        other => panic!("expected Powertools' record to be a duplicate, got {other:?}"),
    }
}

#[tokio::test]
async fn a_record_idem_completed_is_a_duplicate_to_powertools() {
    let (store, table) = table().await;
    let event = json!({"order": 2});
    let key = python(&table, "key", &event);
    let first = Call::new(&store, key.as_str())
        .run_replay(async { Ok::<_, std::io::Error>(json!({"receipt": "rust-2"})) })
        .await
        .unwrap();
    assert!(first.is_executed());
    let python_run: Value = serde_json::from_str(&python(&table, "run", &event)).unwrap();
    assert_eq!(
        python_run,
        json!({"result": {"receipt": "rust-2"}, "ran": false}),
        "Powertools must answer idem's stored answer without running"
    );
}

/// A Powertools record in progress (a Python invocation that is still running, or died) is
/// in progress until its `in_progress_expiration` (ms), then taken over.
#[tokio::test]
async fn a_powertools_claim_holds_until_its_in_progress_expiration() {
    let (store, table) = table().await;
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let put = |id: &str, in_progress_until: u64| {
        store
            .client()
            .put_item()
            .table_name(&table)
            .item("id", AttributeValue::S(id.into()))
            .item("status", AttributeValue::S("INPROGRESS".into()))
            .item(
                "expiration",
                AttributeValue::N((now_ms / 1000 + 3600).to_string()),
            )
            .item(
                "in_progress_expiration",
                AttributeValue::N(in_progress_until.to_string()),
            )
            .send()
    };
    put("orders#live", now_ms + 60_000).await.unwrap();
    put("orders#died", now_ms - 1).await.unwrap();
    let store = &store;
    let claim = |id: &'static str| async move {
        let key = Key::new(id).unwrap();
        store
            .claim(ClaimRequest {
                key: &key,
                fingerprint: None,
                lease: Duration::from_secs(30),
                token: None,
            })
            .await
            .unwrap()
    };
    assert!(matches!(
        claim("orders#live").await,
        Claim::InProgress { .. }
    ));
    assert!(
        matches!(
            claim("orders#died").await,
            Claim::Acquired {
                taken_over: true,
                ..
            }
        ),
        "a Powertools claim past its in-progress expiration is taken over"
    );
}
