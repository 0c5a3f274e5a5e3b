//! `examples/http_api.rs` as processes, against its contract: real servers on real ports, a real
//! HTTP client. One process on the embedded store for the rules of the layer; two processes on
//! one PostgreSQL database sharing a key; a client that gives up mid-request; a server killed
//! with SIGKILL mid-request.

mod example_process;

use example_process::{example_binary, read_until};
use std::io::BufReader;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `http_api` process; killed when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(example_binary("http_api"))
            .args(["--addr", "127.0.0.1:0"])
            .args(args)
            .env_remove("DATABASE_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run the http_api example");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let line = read_until(&mut out, "LISTENING ");
        let base = line.split_whitespace().nth(1).unwrap().to_owned();
        // Keep reading its output so the process never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Server { child, base }
    }

    fn on_postgres(schema: &str, extra: &[&str]) -> Server {
        let url = idem_store_postgres::testing::database_url();
        let mut args = vec!["--database-url", &url, "--schema", schema];
        args.extend_from_slice(extra);
        Server::start(&args)
    }

    async fn charges(&self) -> u64 {
        let text = reqwest::get(format!("{}/charges/stats", self.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let stats: serde_json::Value = serde_json::from_str(&text).unwrap();
        stats["charges"].as_u64().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What came back: status, headers, body.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&self.body));
        })
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

async fn post(base: &str, token: Option<&str>, key: Option<&[u8]>, body: &str) -> Answer {
    let mut request = reqwest::Client::new()
        .post(format!("{base}/charges"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(key) = key {
        let value = reqwest::header::HeaderValue::from_bytes(key).unwrap();
        request = request.header("idempotency-key", value);
    }
    let response = request.send().await.unwrap();
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.bytes().await.unwrap().to_vec(),
    }
}

const CHARGE: &str = r#"{"customer":"c1","amount":100}"#;

/// 50 concurrent requests with one key: one charge; the rest are told it is in progress (409)
/// or get the first answer (201, replayed); none fails.
async fn fifty_concurrent_requests_charge_once(servers: &[&Server]) {
    let slow = r#"{"customer":"c1","amount":100,"delay_ms":300}"#;
    let mut tasks = Vec::new();
    for i in 0..50 {
        let base = servers[i % servers.len()].base.clone();
        tasks.push(tokio::spawn(async move {
            post(&base, Some("tok_1"), Some(b"storm-1"), slow).await
        }));
    }
    let mut created = 0;
    for task in tasks {
        let answer = task.await.unwrap();
        match answer.status {
            201 => created += 1,
            409 => assert!(answer.header("retry-after").is_some()),
            other => panic!(
                "unexpected {other}: {}",
                String::from_utf8_lossy(&answer.body)
            ),
        }
    }
    assert!(created >= 1);
    let mut charges = 0;
    for server in servers {
        charges += server.charges().await;
    }
    assert_eq!(charges, 1, "one key, one charge");
    // After the first answer, every retry replays it.
    let again = post(&servers[0].base, Some("tok_1"), Some(b"storm-1"), slow).await;
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
}

#[tokio::test]
async fn fifty_concurrent_requests_with_one_key_charge_once_in_memory() {
    let server = Server::start(&[]);
    fifty_concurrent_requests_charge_once(&[&server]).await;
}

#[tokio::test]
async fn two_servers_on_one_database_split_one_key_and_charge_once() {
    let schema = idem_store_postgres::testing::unique_schema("idem_t_http_two");
    let a = Server::on_postgres(&schema, &[]);
    let b = Server::on_postgres(&schema, &[]);
    fifty_concurrent_requests_charge_once(&[&a, &b]).await;
    drop_schema(&schema).await;
}

#[tokio::test]
async fn two_servers_on_one_sqlite_file_split_one_key_and_charge_once() {
    let dir = std::env::temp_dir().join(format!("idem-http-sqlite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("idem.db").display());
    let a = Server::start(&["--database-url", &url]);
    let b = Server::start(&["--database-url", &url]);
    fifty_concurrent_requests_charge_once(&[&a, &b]).await;
    drop((a, b));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_retry_after_success_replays_status_body_and_location_byte_for_byte() {
    let server = Server::start(&[]);
    let first = post(&server.base, Some("tok_1"), Some(b"k-replay"), CHARGE).await;
    assert_eq!(first.status, 201);
    let json = first.json();
    assert!(json["id"].as_str().unwrap().starts_with("ch_"));
    assert_eq!(
        (json["customer"].as_str(), json["amount"].as_u64()),
        (Some("c1"), Some(100))
    );
    let location = first.header("location").unwrap().to_owned();
    assert_eq!(
        location,
        format!("/charges/{}", json["id"].as_str().unwrap())
    );
    assert_eq!(first.header("idempotent-replayed"), None);

    let again = post(&server.base, Some("tok_1"), Some(b"k-replay"), CHARGE).await;
    assert_eq!(again.status, 201);
    assert_eq!(again.body, first.body, "the body, byte for byte");
    assert_eq!(again.header("location"), Some(location.as_str()));
    assert_eq!(again.header("content-type"), first.header("content-type"));
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    // The key sent as a structured-field string names the same record.
    let quoted = post(&server.base, Some("tok_1"), Some(b"\"k-replay\""), CHARGE).await;
    assert_eq!(quoted.body, first.body);
    assert_eq!(server.charges().await, 1);
}

#[tokio::test]
async fn the_same_key_with_another_body_is_refused_with_422() {
    let server = Server::start(&[]);
    assert_eq!(
        post(&server.base, Some("tok_1"), Some(b"k-422"), CHARGE)
            .await
            .status,
        201
    );
    let other = r#"{"customer":"c1","amount":200}"#;
    let refused = post(&server.base, Some("tok_1"), Some(b"k-422"), other).await;
    assert_eq!(refused.status, 422);
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    // No documentation named (`problem_base`): RFC 9457's `about:blank`, the status's title.
    assert_eq!(refused.json()["type"], "about:blank");
    assert_eq!(refused.json()["title"], "Unprocessable Entity");
    assert_eq!(server.charges().await, 1);
}

#[tokio::test]
async fn requests_without_a_valid_key_or_caller_are_refused_before_anything_runs() {
    let server = Server::start(&[]);
    let no_key = post(&server.base, Some("tok_1"), None, CHARGE).await;
    assert_eq!(no_key.status, 400);
    assert_eq!(no_key.json()["type"], "about:blank");
    assert!(no_key.json()["detail"]
        .as_str()
        .unwrap()
        .contains("must carry an Idempotency-Key"));
    let long = vec![b'k'; 256];
    for key in [
        &b""[..],
        &long,
        b"a\tb",
        b"caf\xc3\xa9",
        b"\"unterminated",
        b"\"a\"b",
    ] {
        let answer = post(&server.base, Some("tok_1"), Some(key), CHARGE).await;
        assert_eq!(answer.status, 400, "key {:?}", String::from_utf8_lossy(key));
        assert_eq!(
            answer.header("content-type"),
            Some("application/problem+json")
        );
    }
    // A key of exactly 255 characters is fine.
    let longest = vec![b'k'; 255];
    assert_eq!(
        post(&server.base, Some("tok_1"), Some(&longest), CHARGE)
            .await
            .status,
        201
    );
    // A control character the client library would not send: written on the socket by hand.
    let raw = raw_post(&server.base, "k\x01x").await;
    assert!(raw.starts_with("HTTP/1.1 400"), "{raw}");
    // No bearer token: 401 from the layer's scope.
    let anonymous = post(&server.base, None, Some(b"k-anon"), CHARGE).await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(
        server.charges().await,
        1,
        "only the 255-character key charged"
    );
}

#[tokio::test]
async fn two_callers_with_the_same_key_charge_twice() {
    let server = Server::start(&[]);
    let a = post(&server.base, Some("tok_a"), Some(b"shared-key"), CHARGE).await;
    let b = post(&server.base, Some("tok_b"), Some(b"shared-key"), CHARGE).await;
    assert_eq!((a.status, b.status), (201, 201));
    assert_ne!(
        a.json()["id"],
        b.json()["id"],
        "neither sees the other's charge"
    );
    assert_eq!(b.header("idempotent-replayed"), None);
    assert_eq!(server.charges().await, 2);
}

#[tokio::test]
async fn a_503_releases_the_key_and_the_retry_charges_once() {
    let server = Server::start(&[]);
    let flaky = r#"{"customer":"c1","amount":100,"fail_times":1}"#;
    let first = post(&server.base, Some("tok_1"), Some(b"k-503"), flaky).await;
    assert_eq!(first.status, 503);
    assert_eq!(server.charges().await, 0);
    let retry = post(&server.base, Some("tok_1"), Some(b"k-503"), flaky).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), None, "the retry ran");
    let again = post(&server.base, Some("tok_1"), Some(b"k-503"), flaky).await;
    assert_eq!(again.body, retry.body);
    assert_eq!(server.charges().await, 1);
}

#[tokio::test]
async fn a_validation_failure_is_kept_and_replayed() {
    let server = Server::start(&[]);
    let bad = r#"{"customer":"c1","amount":-5}"#;
    let first = post(&server.base, Some("tok_1"), Some(b"k-400"), bad).await;
    assert_eq!(first.status, 400);
    assert_eq!(
        first.header("content-type"),
        Some("application/problem+json")
    );
    let again = post(&server.base, Some("tok_1"), Some(b"k-400"), bad).await;
    assert_eq!((again.status, again.body.clone()), (400, first.body));
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
}

#[tokio::test]
async fn an_oversized_body_is_refused_with_413_before_anything_is_claimed() {
    let server = Server::start(&[]);
    let padding = "x".repeat(1024 * 1024 + 1);
    let big = format!(r#"{{"customer":"c1","amount":100,"pad":"{padding}"}}"#);
    let answer = post(&server.base, Some("tok_1"), Some(b"k-big"), &big).await;
    assert_eq!(answer.status, 413);
    // Nothing was claimed: the key is free for a request of the right size.
    let fine = post(&server.base, Some("tok_1"), Some(b"k-big"), CHARGE).await;
    assert_eq!(fine.status, 201);
}

#[tokio::test]
async fn a_server_killed_mid_request_is_taken_over_by_the_retry_after_its_lease() {
    let schema = idem_store_postgres::testing::unique_schema("idem_t_http_kill");
    let lease = ["--lease-ms", "1500"];
    let mut first = Server::on_postgres(&schema, &lease);
    // The provider takes 3 s: long enough to kill the server in the middle of it.
    let slow = r#"{"customer":"c1","amount":100,"delay_ms":3000}"#;
    let base = first.base.clone();
    let in_flight =
        tokio::spawn(
            async move { post_for(&base, b"k-kill", slow, Duration::from_secs(30)).await },
        );

    // Wait until the first server holds the key, as its record in the database says.
    wait_until_claimed(&schema, "k-kill").await;
    first.child.kill().unwrap(); // SIGKILL, mid-request
    first.child.wait().unwrap();
    assert_eq!(
        in_flight.await.unwrap(),
        None,
        "the client saw the server die"
    );

    // The retry on another server: 409 while the dead server's lease lasts, then it runs.
    let second = Server::on_postgres(&schema, &lease);
    let started = std::time::Instant::now();
    let mut refused = 0;
    let status = loop {
        match post_for(&second.base, b"k-kill", slow, Duration::from_secs(30)).await {
            Some(409) => {
                refused += 1;
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "never taken over"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => break other,
        }
    };
    assert_eq!(status, Some(201), "the retry after the lease charges");
    assert!(refused >= 1, "the dead server's lease was honoured");
    assert_eq!(second.charges().await, 1);
    drop(second);
    drop_schema(&schema).await;
}

#[tokio::test]
async fn a_client_that_gives_up_early_is_charged_once_and_its_retry_gets_the_charge() {
    let schema = idem_store_postgres::testing::unique_schema("idem_t_http_gone");
    let server = Server::on_postgres(&schema, &[]);
    // The provider takes 3 s; the client gives up as soon as the server holds its key.
    let slow = r#"{"customer":"c1","amount":100,"delay_ms":3000}"#;
    tokio::select! {
        status = post_for(&server.base, b"k-gone", slow, Duration::from_secs(30)) => {
            panic!("answered {status:?} before the client gave up")
        }
        () = wait_until_claimed(&schema, "k-gone") => {}
    }
    // The client's request is dropped: its connection closes. The charge goes on.
    let early = post(&server.base, Some("tok_1"), Some(b"k-gone"), slow).await;
    assert_eq!(
        early.status, 409,
        "the charge of the client that left still runs"
    );
    let started = std::time::Instant::now();
    let retry = loop {
        let answer = post(&server.base, Some("tok_1"), Some(b"k-gone"), slow).await;
        if answer.status != 409 {
            break answer;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never finished"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.json()["amount"], 100);
    assert_eq!(
        server.charges().await,
        1,
        "charged once, for the client that left"
    );
    drop(server);
    drop_schema(&schema).await;
}

/// Waits until a server on `schema` holds `client_key` (sent as `tok_1` to `POST /charges`), as
/// its record in the database says.
async fn wait_until_claimed(schema: &str, client_key: &str) {
    let store = idem_store_postgres::PgStore::builder(idem_store_postgres::testing::pool(2).await)
        .schema(schema.to_owned())
        .build()
        .unwrap();
    // The caller's scope is an HMAC under the server's secret: look the key up in any scope.
    let key = format!("POST /charges {client_key}");
    for _ in 0..200 {
        let found = idem_core::Inspect::find(&store, &key, None).await.unwrap();
        if let Some(found) = found
            .iter()
            .find(|r| r.record.key.scope().starts_with("http:key:"))
        {
            assert!(matches!(
                found.record.state,
                idem_core::RecordState::InProgress { .. }
            ));
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the server never claimed {client_key}");
}

/// Posts as `tok_1` and returns the status, or `None` when no answer came within `timeout`
/// (or the connection broke).
async fn post_for(base: &str, key: &[u8], body: &str, timeout: Duration) -> Option<u16> {
    let request = reqwest::Client::new()
        .post(format!("{base}/charges"))
        .header("authorization", "Bearer tok_1")
        .header(
            "idempotency-key",
            reqwest::header::HeaderValue::from_bytes(key).unwrap(),
        )
        .body(body.to_owned())
        .timeout(timeout)
        .send()
        .await;
    request.ok().map(|r| r.status().as_u16())
}

/// Sends a POST with `key` as the raw Idempotency-Key bytes and returns the raw answer.
async fn raw_post(base: &str, key: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /charges HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer tok_1\r\n\
         idempotency-key: {key}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{CHARGE}",
        CHARGE.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

async fn drop_schema(schema: &str) {
    let pool =
        idem_store_postgres::sqlx::PgPool::connect(&idem_store_postgres::testing::database_url())
            .await
            .unwrap();
    let _ =
        idem_store_postgres::sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .execute(&pool)
            .await;
}
