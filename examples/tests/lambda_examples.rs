//! The Lambda examples as functions, end to end: each test starts the example's binary as the
//! function (the real `lambda_runtime` / `lambda_http` loop) against a Lambda Runtime API of the
//! test's own (`idem_lambda::testing`), on the local DynamoDB server (`DYNAMODB_URL`), delivers
//! events as Lambda would, and checks the effects in DynamoDB.

mod example_process;

use example_process::example_binary;
use idem_core::{Key, Store};
use idem_lambda::testing::{Answer, RuntimeApi};
use idem_store_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use idem_store_dynamodb::aws_sdk_dynamodb::Client;
use idem_store_dynamodb::testing::{dynamodb_url, fresh_table, local_client};
use idem_store_dynamodb::{DynamoDbStore, TableLayout};
use serde_json::{json, Value};
use std::process::{Child, Command};
use std::time::{Duration, SystemTime};

/// A function process; killed when dropped, as Lambda ends a sandbox.
struct Function(Child);

impl Drop for Function {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(example: &str, api: &RuntimeApi, name: &str, env: &[(&str, &str)]) -> Function {
    Function(
        Command::new(example_binary(example))
            .envs(api.function_env(name))
            .env("DYNAMODB_URL", dynamodb_url())
            .envs(env.iter().copied())
            .spawn()
            .unwrap_or_else(|e| panic!("start the {example} example: {e}")),
    )
}

fn message(id: &str, arn: &str, group: Option<&str>, body: Value) -> Value {
    let attributes = match group {
        Some(group) => json!({ "MessageGroupId": group }),
        None => json!({}),
    };
    json!({
        "messageId": id,
        "body": body.to_string(),
        "eventSource": "aws:sqs",
        "eventSourceARN": arn,
        "attributes": attributes,
        "messageAttributes": {}
    })
}

fn failures(answer: &Answer) -> Vec<String> {
    let answer = answer.json();
    answer["batchItemFailures"]
        .as_array()
        .expect("a partial batch response")
        .iter()
        .map(|failure| failure["itemIdentifier"].as_str().unwrap().to_owned())
        .collect()
}

async fn charges(client: &Client, ledger: &str, order: &str) -> u64 {
    let row = client
        .get_item()
        .table_name(ledger)
        .key("id", AttributeValue::S(order.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    match row.item().and_then(|item| item.get("charges")) {
        Some(AttributeValue::N(n)) => n.parse().unwrap(),
        _ => 0,
    }
}

struct Tables {
    client: Client,
    idem: String,
    ledger: String,
}

async fn tables() -> Tables {
    let client = local_client(&dynamodb_url());
    let idem = fresh_table(&client, "lambda-idem", &TableLayout::default()).await;
    let ledger = fresh_table(&client, "lambda-ledger", &TableLayout::default()).await;
    Tables {
        client,
        idem,
        ledger,
    }
}

const STANDARD: &str = "arn:aws:sqs:us-east-1:000000000000:orders";
const FIFO: &str = "arn:aws:sqs:us-east-1:000000000000:orders.fifo";

#[tokio::test]
async fn an_sqs_batch_delivered_twice_charges_each_order_once_and_reports_the_declined_one() {
    let t = tables().await;
    let api = RuntimeApi::start().await;
    let _function = start(
        "lambda_sqs",
        &api,
        "orders",
        &[("IDEM_TABLE", &t.idem), ("LEDGER_TABLE", &t.ledger)],
    );
    let batch = json!({"Records": [
        message("m-1", STANDARD, None, json!({"order_id": "o-1", "cents": 1250})),
        message("m-2", STANDARD, None, json!({"order_id": "o-2", "cents": 900, "declined": true})),
        message("m-3", STANDARD, None, json!({"order_id": "o-3", "cents": 310})),
    ]});
    let deadline = Duration::from_secs(30);
    assert_eq!(failures(&api.invoke(&batch, deadline).await), ["m-2"]);
    // SQS hands the batch out again (a visibility timeout): the done orders are acknowledged
    // without charging again, the declined one is reported again.
    assert_eq!(failures(&api.invoke(&batch, deadline).await), ["m-2"]);
    assert_eq!(charges(&t.client, &t.ledger, "o-1").await, 1);
    assert_eq!(charges(&t.client, &t.ledger, "o-2").await, 0);
    assert_eq!(charges(&t.client, &t.ledger, "o-3").await, 1);
    // The same order in another message (a producer that sent it twice) is the same work.
    let resent = json!({"Records": [
        message("m-4", STANDARD, None, json!({"order_id": "o-1", "cents": 1250})),
    ]});
    assert!(failures(&api.invoke(&resent, deadline).await).is_empty());
    assert_eq!(charges(&t.client, &t.ledger, "o-1").await, 1);
}

/// On a FIFO queue a failed message holds its group: the group's later messages in the batch
/// are reported failed without running (they must not overtake it); other groups go on.
#[tokio::test]
async fn a_fifo_group_stops_at_its_first_failure_and_other_groups_go_on() {
    let t = tables().await;
    let api = RuntimeApi::start().await;
    let _function = start(
        "lambda_sqs",
        &api,
        "orders-fifo",
        &[("IDEM_TABLE", &t.idem), ("LEDGER_TABLE", &t.ledger)],
    );
    let batch = json!({"Records": [
        message("a-1", FIFO, Some("a"), json!({"order_id": "fa-1", "cents": 1})),
        message("a-2", FIFO, Some("a"), json!({"order_id": "fa-2", "cents": 1, "declined": true})),
        message("b-1", FIFO, Some("b"), json!({"order_id": "fb-1", "cents": 1})),
        message("a-3", FIFO, Some("a"), json!({"order_id": "fa-3", "cents": 1})),
        message("b-2", FIFO, Some("b"), json!({"order_id": "fb-2", "cents": 1})),
    ]});
    let answer = api.invoke(&batch, Duration::from_secs(30)).await;
    assert_eq!(failures(&answer), ["a-2", "a-3"]);
    for (order, expected) in [
        ("fa-1", 1),
        ("fa-2", 0),
        ("fa-3", 0),
        ("fb-1", 1),
        ("fb-2", 1),
    ] {
        assert_eq!(
            charges(&t.client, &t.ledger, order).await,
            expected,
            "{order}"
        );
    }
}

/// The claim lasts until the invocation's deadline, not idem's default lease: a redelivery
/// while the first invocation runs is refused (in progress), and one after its deadline (when
/// Lambda has stopped it) runs at once.
#[tokio::test]
async fn a_claim_ends_with_its_invocations_deadline() {
    let t = tables().await;
    let (slow_api, api) = (RuntimeApi::start().await, RuntimeApi::start().await);
    let env = [
        ("IDEM_TABLE", t.idem.as_str()),
        ("LEDGER_TABLE", t.ledger.as_str()),
    ];
    let mut slow_env = env.to_vec();
    slow_env.push(("CHARGE_DELAY_MS", "600000"));
    let slow = start("lambda_sqs", &slow_api, "orders", &slow_env);
    let _function = start("lambda_sqs", &api, "orders", &env);
    let batch = json!({"Records": [
        message("m-9", STANDARD, None, json!({"order_id": "o-9", "cents": 500})),
    ]});
    let timeout = Duration::from_secs(3);
    let deadline = SystemTime::now() + timeout;
    let first = tokio::spawn(async move {
        let _ = slow_api.invoke(&batch_of("m-9", "o-9"), timeout).await;
    });
    // The slow invocation's claim is in the table (its lease ends at its deadline).
    let store = DynamoDbStore::new(t.client.clone(), &t.idem);
    let key = Key::new("o-9").unwrap().with_scope("orders").unwrap();
    let record = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(record) = store.get(&key).await.unwrap() {
                break record;
            }
            // The server answers one request at a time: poll it gently.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the slow invocation claims its event");
    match record.state {
        idem_core::RecordState::InProgress { lease_expires_at } => {
            let early = deadline
                .duration_since(lease_expires_at)
                .unwrap_or_default();
            let late = lease_expires_at
                .duration_since(deadline)
                .unwrap_or_default();
            assert!(
                early < Duration::from_secs(1) && late < Duration::from_millis(100),
                "the lease ends at the invocation's deadline"
            );
        }
        other => panic!("expected the slow charge's claim, got {other:?}"),
    }
    assert_eq!(
        failures(&api.invoke(&batch, Duration::from_secs(30)).await),
        ["m-9"],
        "a redelivery while the first invocation runs is refused"
    );
    // Lambda stops the slow invocation at its deadline.
    if let Ok(left) = deadline.duration_since(SystemTime::now()) {
        tokio::time::sleep(left + Duration::from_millis(50)).await;
    }
    drop(slow);
    first.abort();
    assert!(failures(&api.invoke(&batch, Duration::from_secs(30)).await).is_empty());
    assert_eq!(charges(&t.client, &t.ledger, "o-9").await, 1);
}

fn batch_of(id: &str, order: &str) -> Value {
    json!({"Records": [message(id, STANDARD, None, json!({"order_id": order, "cents": 500}))]})
}

#[tokio::test]
async fn an_http_retry_through_api_gateway_gets_the_first_answer() {
    let t = tables().await;
    let api = RuntimeApi::start().await;
    let _function = start("lambda_http", &api, "charges", &[("IDEM_TABLE", &t.idem)]);
    let event = |key: &str, token: &str| {
        let mut event = json!({
            "version": "2.0",
            "routeKey": "POST /charges",
            "rawPath": "/charges",
            "rawQueryString": "",
            "headers": {
                "idempotency-key": key,
                "content-type": "application/json",
                "host": "api.example.com"
            },
            "requestContext": {
                "accountId": "000000000000", "apiId": "api", "domainName": "api.example.com",
                "domainPrefix": "api", "requestId": "request", "routeKey": "POST /charges",
                "stage": "$default", "time": "07/Dec/2026:00:00:00 +0000", "timeEpoch": 0,
                "http": {"method": "POST", "path": "/charges", "protocol": "HTTP/1.1",
                         "sourceIp": "127.0.0.1", "userAgent": "test"}
            },
            "body": "{\"cents\": 1250}",
            "isBase64Encoded": false
        });
        if !token.is_empty() {
            event["headers"]["authorization"] = json!(format!("Bearer {token}"));
        }
        event
    };
    let deadline = Duration::from_secs(30);
    let first = api.invoke(&event("k-1", "alice"), deadline).await.json();
    assert_eq!(first["statusCode"], 201);
    assert_eq!(first["body"], "charge 1 in this process");
    let retry = api.invoke(&event("k-1", "alice"), deadline).await.json();
    assert_eq!(
        retry["body"], first["body"],
        "the retry gets the first answer"
    );
    assert_eq!(retry["headers"]["idempotent-replayed"], "true");
    // Another caller's request with the same key is its own work, never alice's answer.
    let other = api.invoke(&event("k-1", "bob"), deadline).await.json();
    assert_eq!(other["body"], "charge 2 in this process");
    // Without credentials, nothing runs.
    let anonymous = api.invoke(&event("k-1", ""), deadline).await.json();
    assert_eq!(anonymous["statusCode"], 401);
    let after = api.invoke(&event("k-9", "alice"), deadline).await.json();
    assert_eq!(
        after["body"], "charge 3 in this process",
        "the charges ran three times in all"
    );
}

/// The examples' own scenario, run as a user runs it (`cargo run --example lambda_sqs`): it
/// plays Lambda and SQS by itself.
#[test]
fn the_sqs_example_runs_by_itself() {
    let out = Command::new(example_binary("lambda_sqs"))
        .env("DYNAMODB_URL", dynamodb_url())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("o-1 charged 1 time(s)"), "{stdout}");
    assert!(stdout.contains("o-2 charged 0 time(s)"), "{stdout}");
    assert_eq!(
        stdout.matches(r#"[{"itemIdentifier":"m-2"}]"#).count(),
        2,
        "{stdout}"
    );
}
