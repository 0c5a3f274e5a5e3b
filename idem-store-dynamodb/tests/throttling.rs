//! Throttling, which the local server never does, played by a proxy between the store and the
//! server: it answers the first requests with DynamoDB's `ProvisionedThroughputExceededException`
//! and forwards the rest, counting both where they hit. The SDK's retry strategy sends a
//! throttled request again with backoff, so the call goes through; a conditional-check failure
//! (a duplicate's refused claim) is an answer, sent once and never again.

use idem_core::{Call, Outcome};
use idem_store_dynamodb::testing::{dynamodb_url, fresh_table, local_client};
use idem_store_dynamodb::{DynamoDbStore, TableLayout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const THROTTLED: &str = "{\"__type\":\"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException\",\"message\":\"The level of configured provisioned throughput for the table was exceeded.\"}";

/// Reads one HTTP/1.1 message (head and a `Content-Length` body) from `from`.
async fn message(from: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if from.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok()?;
            }
        }
        head.extend_from_slice(line.as_bytes());
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    from.read_exact(&mut body).await.ok()?;
    head.extend(body);
    Some(head)
}

/// Counts of what reached the proxy: throttled, and forwarded to the server.
#[derive(Default)]
struct Counts {
    throttled: AtomicU64,
    forwarded: AtomicU64,
}

/// A proxy that throttles the first `throttle` requests; returns its URL and its counts.
async fn throttling_proxy(throttle: u64) -> (String, Arc<Counts>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let upstream = dynamodb_url().trim_start_matches("http://").to_owned();
    let counts = Arc::new(Counts::default());
    let seen = counts.clone();
    tokio::spawn(async move {
        loop {
            let (client, _) = listener.accept().await.unwrap();
            let (upstream, counts) = (upstream.clone(), seen.clone());
            tokio::spawn(async move {
                let mut client = BufReader::new(client);
                let mut server = BufReader::new(TcpStream::connect(&upstream).await.unwrap());
                while let Some(request) = message(&mut client).await {
                    let throttled = counts.throttled.load(Ordering::SeqCst);
                    if throttled < throttle {
                        counts.throttled.fetch_add(1, Ordering::SeqCst);
                        let answer = format!(
                            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/x-amz-json-1.0\r\n\
                             x-amzn-errortype: ProvisionedThroughputExceededException\r\n\
                             content-length: {}\r\n\r\n{THROTTLED}",
                            THROTTLED.len()
                        );
                        client.get_mut().write_all(answer.as_bytes()).await.unwrap();
                        continue;
                    }
                    counts.forwarded.fetch_add(1, Ordering::SeqCst);
                    server.get_mut().write_all(&request).await.unwrap();
                    let Some(answer) = message(&mut server).await else {
                        return;
                    };
                    client.get_mut().write_all(&answer).await.unwrap();
                }
            });
        }
    });
    (url, counts)
}

#[tokio::test]
async fn throttled_requests_are_retried_and_a_refused_claim_is_not() {
    let client = local_client(&dynamodb_url());
    let table = fresh_table(&client, "throttling", &TableLayout::default()).await;
    let (url, counts) = throttling_proxy(2).await;
    let store = DynamoDbStore::new(local_client(&url), table);
    let first = Call::new(&store, "order-1")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .expect("the SDK retries the throttled requests");
    assert_eq!(first, Outcome::Executed(()));
    assert_eq!(counts.throttled.load(Ordering::SeqCst), 2);
    assert_eq!(
        counts.forwarded.load(Ordering::SeqCst),
        2,
        "a claim and a completion reached the server once each"
    );
    let again = Call::new(&store, "order-1")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(again.is_duplicate());
    assert_eq!(
        counts.forwarded.load(Ordering::SeqCst),
        3,
        "the duplicate's refused claim was sent once, not retried"
    );
}
