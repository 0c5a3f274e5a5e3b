//! The handlers called as the runtime calls them (`Service::call` with the event and its
//! context), on `DynamoDbStore` against the local server: an EventBridge event delivered twice
//! runs once, a duplicate gets the stored answer, an event without its key fails without
//! running, and a handler's error frees the key for the retry.

use aws_lambda_events::eventbridge::EventBridgeEvent;
use idem_lambda::{EventKey, Idempotency};
use idem_store_dynamodb::testing::{dynamodb_url, fresh_table, local_client};
use idem_store_dynamodb::{DynamoDbStore, TableLayout};
use lambda_runtime::{Context, LambdaEvent, Service};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

async fn idempotency() -> Idempotency {
    let client = local_client(&dynamodb_url());
    let table = fresh_table(&client, "handlers", &TableLayout::default()).await;
    Idempotency::new(DynamoDbStore::new(client, table))
}

fn scheduled(id: Option<&str>) -> EventBridgeEvent<Value> {
    serde_json::from_value(json!({
        "version": "0",
        "id": id,
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "000000000000",
        "time": "2026-12-07T06:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:000000000000:rule/daily-report"],
        "detail": {}
    }))
    .unwrap()
}

#[tokio::test]
async fn a_scheduled_event_delivered_twice_runs_once() {
    let runs = Arc::new(AtomicU32::new(0));
    let mut handler = idempotency().await.eventbridge({
        let runs = runs.clone();
        move |event: LambdaEvent<EventBridgeEvent<Value>>| {
            let runs = runs.clone();
            async move {
                let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                Ok::<_, lambda_runtime::Error>(format!("report {n} for {:?}", event.payload.time))
            }
        }
    });
    let tick = || LambdaEvent::new(scheduled(Some("tick-1")), Context::default());
    let first = handler.call(tick()).await.unwrap();
    let again = handler.call(tick()).await.unwrap();
    assert_eq!(
        again, first,
        "the second delivery gets the first run's answer"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let next = handler
        .call(LambdaEvent::new(
            scheduled(Some("tick-2")),
            Context::default(),
        ))
        .await
        .unwrap();
    assert_ne!(next, first, "the next tick is new work");
    let without_id = handler
        .call(LambdaEvent::new(scheduled(None), Context::default()))
        .await;
    assert!(without_id.is_err(), "an event without its id fails");
    assert_eq!(runs.load(Ordering::SeqCst), 2, "and does not run");
}

#[tokio::test]
async fn a_failed_invocation_frees_its_key_and_a_missing_key_runs_nothing() {
    let runs = Arc::new(AtomicU32::new(0));
    let mut handler = idempotency()
        .await
        .handler(EventKey::path("order_id").unwrap(), {
            let runs = runs.clone();
            move |event: LambdaEvent<Value>| {
                let runs = runs.clone();
                async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    if event.payload["fail"] == json!(true) && n == 1 {
                        return Err::<Value, lambda_runtime::Error>("the provider was down".into());
                    }
                    Ok(json!({ "charged": event.payload["order_id"], "run": n }))
                }
            }
        });
    let call = |payload: Value| LambdaEvent::new(payload, Context::default());
    let failed = handler
        .call(call(json!({"order_id": "o-1", "fail": true})))
        .await;
    assert_eq!(
        failed.unwrap_err().to_string(),
        "the provider was down",
        "the handler's own error"
    );
    let retried = handler
        .call(call(json!({"order_id": "o-1", "fail": true})))
        .await
        .unwrap();
    assert_eq!(
        retried,
        json!({"charged": "o-1", "run": 2}),
        "the retry runs"
    );
    let duplicate = handler
        .call(call(json!({"order_id": "o-1"})))
        .await
        .unwrap();
    assert_eq!(duplicate, retried, "then it is done");
    for missing in [
        json!({}),
        json!({"order_id": ""}),
        json!({"order_id": null}),
    ] {
        assert!(handler.call(call(missing)).await.is_err());
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "no event without its key ran"
    );
}
