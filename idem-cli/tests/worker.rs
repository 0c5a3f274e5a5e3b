//! `idem schedules add` and `idem worker` as processes, against a real PostgreSQL and a real
//! HTTP receiver: a stored schedule POSTs on every tick with the tick's key as
//! `Idempotency-Key`; a receiver that answers 503 twice per key (with `Retry-After: 0`), then
//! 200, gets three requests per tick with one key, one success per tick, and the job's attempt
//! log holds the three attempts. Bad input is refused before anything is stored.

use std::collections::HashMap;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use idem_queue::Queue;
use idem_store_postgres::testing::TestStore;

fn idem(test: &TestStore, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args([
            "--database-url",
            &idem_store_postgres::testing::database_url(),
        ])
        .args(["--schema", &test.schema])
        .args(args)
        .output()
        .expect("run idem")
}

/// Each request's `Idempotency-Key` and body, and what it was answered.
type Seen = Arc<Mutex<Vec<(String, String, u16)>>>;

/// A receiver whose `/hook` answers each key's first request 409 and its second 503 (both
/// with `Retry-After: 0`), then 200; and whose `/moved` redirects.
async fn receiver(seen: Seen, succeeded: Arc<tokio::sync::Notify>) -> String {
    let hook = seen.clone();
    let app = Router::new().route(
        "/hook",
        post(move |headers: HeaderMap, body: String| {
            let (seen, succeeded) = (hook.clone(), succeeded.clone());
            async move {
                let key = headers
                    .get("idempotency-key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let mut seen = seen.lock().unwrap();
                let before = seen.iter().filter(|(k, _, _)| *k == key).count();
                // Still running elsewhere (as idem-http answers), then failing, then done.
                let status = match before {
                    0 => 409,
                    1 => 503,
                    _ => 200,
                };
                seen.push((key, body, status));
                if status == 200 && seen.iter().filter(|(_, _, s)| *s == 200).count() >= 2 {
                    succeeded.notify_one();
                }
                let mut answer = HeaderMap::new();
                if status != 200 {
                    answer.insert("retry-after", "0".parse().unwrap());
                }
                (
                    StatusCode::from_u16(status).unwrap(),
                    answer,
                    "busy, try again",
                )
            }
        }),
    );
    // A redirect: followed, the POST would arrive as a GET without its body.
    let app = app
        .route(
            "/moved",
            post(move |headers: HeaderMap| {
                let seen = seen.clone();
                async move {
                    let key = headers
                        .get("idempotency-key")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    seen.lock().unwrap().push((key, "moved".to_owned(), 302));
                    (StatusCode::FOUND, [("location", "/hook-get")], "")
                }
            }),
        )
        .route(
            "/hook-get",
            axum::routing::get(|| async { (StatusCode::OK, "a GET") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/hook")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_schedule_posts_each_tick_with_one_key_retrying_until_it_succeeds() {
    let test = TestStore::new("cli_worker", 4).await;
    let seen: Seen = Arc::default();
    let succeeded = Arc::new(tokio::sync::Notify::new());
    let url = receiver(seen.clone(), succeeded.clone()).await;

    // Refused before anything is stored: a bad expression, zone, URL or body.
    for bad in [
        &["--cron", "61 * * * *", "--post", url.as_str()][..],
        &[
            "--cron",
            "* * * * *",
            "--tz",
            "Mars/Olympus",
            "--post",
            url.as_str(),
        ][..],
        &["--cron", "* * * * *", "--post", "ftp://example.test/x"][..],
        &[
            "--cron",
            "* * * * *",
            "--post",
            url.as_str(),
            "--body",
            "{not json",
        ][..],
    ] {
        let mut args = vec!["schedules", "add", "hook"];
        args.extend_from_slice(bad);
        let output = idem(&test, &args);
        assert_eq!(output.status.code(), Some(2), "{bad:?}");
        assert!(String::from_utf8_lossy(&output.stdout).contains("nothing stored"));
    }
    // A program's job on the same tables, in the default queue: not the worker's to run.
    let program = Queue::new(&test.store);
    program.migrate().await.unwrap();
    let job = idem_queue::NewJob::new("program:1", &serde_json::json!(1)).unwrap();
    let _ = program.enqueue(job).await.unwrap();
    let add = idem(
        &test,
        &[
            "schedules",
            "add",
            "hook",
            "--cron",
            "* * * * * *",
            "--post",
            &url,
            "--body",
            r#"{"report":"daily"}"#,
        ],
    );
    assert_eq!(add.status.code(), Some(0), "{add:?}");
    let moved_url = url.replace("/hook", "/moved");
    let add = idem(
        &test,
        &[
            "schedules",
            "add",
            "moved",
            "--cron",
            "* * * * * *",
            "--post",
            &moved_url,
        ],
    );
    assert_eq!(add.status.code(), Some(0), "{add:?}");

    let mut worker = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args([
            "--database-url",
            &idem_store_postgres::testing::database_url(),
        ])
        .args(["--schema", &test.schema, "worker"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), succeeded.notified())
        .await
        .expect("two ticks delivered");
    Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    assert!(
        worker.wait().unwrap().success(),
        "the worker drains and exits 0"
    );

    let seen = seen.lock().unwrap().clone();
    let mut by_key: HashMap<&str, Vec<u16>> = HashMap::new();
    for (key, body, status) in seen.iter().filter(|(_, body, _)| body != "moved") {
        assert!(key.starts_with("schedule:hook:"), "{key}");
        assert_eq!(body, r#"{"report":"daily"}"#);
        by_key.entry(key).or_default().push(*status);
    }
    let delivered: Vec<_> = by_key.iter().filter(|(_, s)| s.contains(&200)).collect();
    assert!(delivered.len() >= 2, "{by_key:?}");
    for (key, statuses) in &delivered {
        assert_eq!(
            statuses.as_slice(),
            [409, 503, 200],
            "{key}: one key, one success"
        );
    }
    // The attempt log of a delivered tick: two retries with the answer's status, then done.
    let queue = Queue::new(&test.store);
    let (key, _) = delivered[0];
    let log = queue.status(key).await.unwrap().unwrap().attempt_log;
    let outcomes: Vec<&str> = log.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["retried", "retried", "done"], "{log:?}");
    // The delivery is the job's result: its status, time and the answer's first bytes.
    match queue.result(key).await.unwrap() {
        Some(idem_queue::JobResult::Done(Some(delivery))) => {
            assert_eq!(delivery["status"], 200, "{delivery}");
            assert!(delivery["elapsed_ms"].is_u64(), "{delivery}");
        }
        other => panic!("{key}: {other:?}"),
    }
    let info = queue.job(key).await.unwrap().unwrap();
    assert_eq!(info.queue, idem_queue::http::HTTP_QUEUE);
    assert_eq!(
        queue.status("program:1").await.unwrap().unwrap().state,
        idem_queue::JobState::Queued,
        "the program's job was left alone"
    );
    assert!(
        log[0].error.as_deref().unwrap().contains("answered 409"),
        "{log:?}"
    );
    assert!(
        log[1].error.as_deref().unwrap().contains("answered 503"),
        "{log:?}"
    );
    // A redirected tick is dead at once, never counted as delivered by a GET.
    let moved: Vec<_> = seen.iter().filter(|(_, body, _)| body == "moved").collect();
    assert!(!moved.is_empty(), "the moved schedule ran");
    let (moved_key, _, _) = moved[0];
    let status = queue.status(moved_key).await.unwrap().unwrap();
    assert_eq!(status.state, idem_queue::JobState::Dead);
    assert!(status
        .last_error
        .unwrap()
        .contains("a redirect is not a delivery"));
    let per_key = moved.iter().filter(|(k, _, _)| k == moved_key).count();
    assert_eq!(per_key, 1, "dead at once: one POST, no retry");
    let listed = idem(&test, &["--json", "schedules", "list"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["schedules"][0]["name"], "hook");
}

/// `idem worker` serves the HTTP jobs' named queue only: a program's jobs on the same tables
/// are never its to run. A job without an HTTP target put on that queue makes it refuse to
/// start (it would dead-letter the job), saying why.
#[tokio::test]
async fn the_worker_leaves_a_programs_jobs_and_refuses_foreign_jobs_on_its_queue() {
    let test = TestStore::new("cli_worker_refuse", 4).await;
    let queue = Queue::new(&test.store);
    queue.migrate().await.unwrap();
    let job = idem_queue::NewJob::new("welcome:1", &serde_json::json!({"user": 1})).unwrap();
    let _ = queue.enqueue(job).await.unwrap();
    let foreign = idem_queue::NewJob::new("welcome:2", &serde_json::json!({"user": 2}))
        .unwrap()
        .queue(idem_queue::http::HTTP_QUEUE);
    let _ = queue.enqueue(foreign).await.unwrap();
    let output = idem(&test, &["worker"]);
    assert_eq!(output.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("not HTTP jobs"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert_eq!(
        queue.stats().await.unwrap().queued,
        2,
        "the jobs are untouched"
    );
}
