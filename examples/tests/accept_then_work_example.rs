//! `examples/accept_then_work.rs` as a process, on a real PostgreSQL: concurrent requests, each
//! key twice, are answered 202 `queued` once and `duplicate` once; the workers run each item
//! once; bad input gets a 4xx JSON error and stores nothing; a failing item is retried; SIGTERM
//! stops the server and its workers. (`cargo test` builds the example; this test runs it.)

mod example_process;

use example_process::{example_binary, read_until};
use serde_json::{json, Value};
use std::io::BufReader;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const ITEMS: usize = 100;

struct Server {
    child: Child,
    out: BufReader<ChildStdout>,
    base: String,
    schema: String,
}

/// A failing test must not leave the server running (it would hold the test run's output open).
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(schema: &str) -> Server {
    let mut child = Command::new(example_binary("accept_then_work"))
        .args([
            "--addr",
            "127.0.0.1:0",
            "--database-url",
            &idem_store_postgres::testing::database_url(),
        ])
        .args(["--schema", schema, "--workers", "4", "--work-ms", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run the accept_then_work example");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let line = read_until(&mut out, "LISTENING ");
    let base = line.split_whitespace().nth(1).unwrap().to_owned();
    Server {
        child,
        out,
        base,
        schema: schema.to_owned(),
    }
}

async fn request(
    method: reqwest::Method,
    url: String,
    content_type: &str,
    body: String,
) -> (u16, Value) {
    let response = reqwest::Client::new()
        .request(method, url)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|_| panic!("every answer is JSON; got {status} {text:?}"));
    (status, body)
}

async fn post(server: &Server, body: impl Into<String>) -> (u16, Value) {
    let url = format!("{}/work", server.base);
    request(reqwest::Method::POST, url, "application/json", body.into()).await
}

async fn get(server: &Server, path: &str) -> (u16, Value) {
    let url = format!("{}{path}", server.base);
    request(reqwest::Method::GET, url, "application/json", String::new()).await
}

async fn stats(server: &Server) -> Value {
    let (status, body) = get(server, "/work/stats").await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepts_at_once_runs_each_item_once_and_refuses_bad_input() {
    let schema = format!("idem_t_accept_{}", std::process::id());
    let mut server = start(&schema);

    // Every key posted twice, all at once: one "queued", one "duplicate", all 202.
    let requests: Vec<_> = (0..ITEMS * 2)
        .map(|i| {
            let url = format!("{}/work", server.base);
            let body = json!({"key": format!("item:{}", i % ITEMS), "payload": {"n": i % ITEMS}});
            tokio::spawn(request(
                reqwest::Method::POST,
                url,
                "application/json",
                body.to_string(),
            ))
        })
        .collect();
    let (mut queued, mut duplicate) = (0, 0);
    for r in requests {
        let (status, body) = r.await.unwrap();
        assert_eq!(status, 202, "{body}");
        match body["status"].as_str() {
            Some("queued") => queued += 1,
            Some("duplicate") => duplicate += 1,
            other => panic!("unexpected status {other:?} in {body}"),
        }
    }
    assert_eq!((queued, duplicate), (ITEMS, ITEMS));

    // Bad input: a clear 4xx JSON error, nothing stored.
    let too_long = "k".repeat(600);
    let bad: Vec<(String, u16)> = vec![
        ("{not json".into(), 400),
        (json!({"payload": {}}).to_string(), 422),
        (json!({"key": "item:x"}).to_string(), 422),
        (json!({"key": 7, "payload": {}}).to_string(), 422),
        (json!({"key": "", "payload": {}}).to_string(), 422),
        (json!({"key": too_long, "payload": {}}).to_string(), 422),
        (json!({"key": "a\nb", "payload": {}}).to_string(), 422),
        // What PostgreSQL's jsonb cannot store, or cannot store as sent: a 422, not a 503.
        (
            json!({"key": "item:nul", "payload": {"note": "a\u{0}b"}}).to_string(),
            422,
        ),
        (
            r#"{"key":"item:huge","payload":{"n":123456789012345678901234567890}}"#.to_owned(),
            422,
        ),
        (
            json!({"key": "item:y", "payload": {}, "extra": 1}).to_string(),
            422,
        ),
        // An existing key with another payload names other work.
        (
            json!({"key": "item:1", "payload": {"n": 999}}).to_string(),
            409,
        ),
        (
            format!(r#"{{"key":"big","payload":"{}"}}"#, "x".repeat(70_000)),
            413,
        ),
    ];
    for (body, expected) in bad {
        let (status, answer) = post(&server, body.clone()).await;
        assert_eq!(status, expected, "{answer} for {:.80}", body);
        assert!(
            answer["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{answer}"
        );
    }
    let url = format!("{}/work", server.base);
    let body = json!({"key": "item:z", "payload": {}}).to_string();
    let (status, answer) = request(reqwest::Method::POST, url, "text/plain", body).await;
    assert_eq!(status, 415, "{answer}");

    // The workers run every item once; the bad requests stored nothing.
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let s = stats(&server).await;
        if s["done"] == ITEMS {
            break s;
        }
        assert!(Instant::now() < deadline, "items not done in time: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        done,
        json!({"queued": 0, "running": 0, "done": ITEMS, "dead": 0, "runs": ITEMS})
    );
    let (status, item) = get(&server, "/work/item:7").await;
    assert_eq!(status, 200);
    assert_eq!(
        (item["state"].as_str(), item["attempts"].as_u64()),
        (Some("done"), Some(1))
    );
    let (status, _) = get(&server, "/work/item:x").await;
    assert_eq!(status, 404, "a refused request stored nothing");

    // A failing item is retried (backoff 1 s) and then done.
    let (status, _) = post(
        &server,
        json!({"key": "flaky", "payload": {"fail_times": 1}}).to_string(),
    )
    .await;
    assert_eq!(status, 202);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, item) = get(&server, "/work/flaky").await;
        if item["state"] == "done" {
            assert_eq!(item["attempts"], 2, "{item}");
            assert!(
                item["last_error"].as_str().unwrap().contains("attempt 1"),
                "{item}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the flaky item was not retried: {item}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stats(&server).await["runs"], ITEMS + 2);

    // SIGTERM: the server and its workers stop cleanly.
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let stopped = read_until(&mut server.out, "STOPPED");
    assert_eq!(stopped, "STOPPED finished=0 released=0");
    assert!(server.child.wait().unwrap().success());

    let pool =
        idem_store_postgres::sqlx::PgPool::connect(&idem_store_postgres::testing::database_url())
            .await
            .unwrap();
    let _ = idem_store_postgres::sqlx::raw_sql(&format!(
        "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
        server.schema
    ))
    .execute(&pool)
    .await;
}
