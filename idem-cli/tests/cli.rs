//! `idem` as a process against a real PostgreSQL (each test in a schema of its own): exit
//! statuses, what each command prints, `--json` matching the human output, and the safety
//! refusals.

use idem_core::{Call, Claim, ClaimRequest, Key, Outcome, Store};
use idem_queue::{Job, NewJob, Queue};
use idem_store_postgres::testing::TestStore;
use serde_json::Value;
use std::process::{Command, Output};
use std::time::Duration;

fn idem(test: &TestStore, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args([
            "--database-url",
            &idem_store_postgres::testing::database_url(),
            "--schema",
            &test.schema,
        ])
        .args(args)
        .output()
        .expect("run idem")
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn json(test: &TestStore, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let output = idem(test, &args);
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&output)))
}

fn status(output: &Output) -> i32 {
    output.status.code().expect("exited")
}

async fn complete(test: &TestStore, key: &str, scope: &str) {
    let outcome = Call::new(&test.store, key)
        .scope(scope.to_owned())
        .run_replay(async { Ok::<_, std::io::Error>("receipt".to_owned()) })
        .await
        .unwrap();
    assert!(outcome.is_executed());
}

async fn claim(test: &TestStore, key: &str, scope: &str, lease: Duration) {
    let key = Key::new(key).unwrap().with_scope(scope.to_owned()).unwrap();
    let claim = test
        .store
        .claim(ClaimRequest {
            key: &key,
            fingerprint: None,
            lease,
            token: None,
        })
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Acquired { .. }));
}

#[tokio::test]
async fn usage_errors_exit_2_with_the_usage() {
    let test = TestStore::new("cli_usage", 2).await;
    for args in [
        &["lsit"][..],
        &["show"][..],
        &["list", "--state", "sleeping"][..],
        &["jobs", "retry"][..],
        &["release", "k", "--froce"][..],
    ] {
        let output = idem(&test, args);
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(status(&output), 2, "{args:?}: {err}");
        assert!(
            err.contains("Usage") || err.contains("--help"),
            "{args:?}: {err}"
        );
    }
    let output = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["list"])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert_eq!(status(&output), 2);
    assert!(String::from_utf8_lossy(&output.stderr).contains("--database-url"));
}

/// A table that was never created (here the work queue's: the schema's store is migrated, its
/// queue is not) fails the command with status 4 and says how to create it.
#[tokio::test]
async fn a_table_never_migrated_is_named_with_the_command_that_creates_it() {
    let test = TestStore::new("cli_unmigrated", 2).await;
    let output = idem(&test, &["jobs", "list"]);
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(status(&output), 4, "{err}");
    assert!(err.contains("the database failed"), "{err}");
    assert!(err.contains("run `idem migrate`"), "{err}");
}

#[tokio::test]
async fn a_missing_key_or_job_exits_1() {
    let test = TestStore::new("cli_missing", 2).await;
    Queue::new(&test.store).migrate().await.unwrap();
    for args in [
        &["show", "nope"][..],
        &["release", "nope"][..],
        &["forget", "nope", "--yes"][..],
        &["effects", "nope"][..],
        &["jobs", "show", "nope"][..],
        &["jobs", "retry", "nope"][..],
        &["jobs", "discard", "nope"][..],
    ] {
        let output = idem(&test, args);
        assert_eq!(status(&output), 1, "{args:?}: {}", text(&output));
    }
    let nope = json(&test, &["show", "nope"]);
    assert_eq!(
        (&nope["found"], &nope["job_state"]),
        (&false.into(), &Value::Null)
    );
}

#[tokio::test]
async fn show_and_list_print_records_and_json_matches_the_human_output() {
    let test = TestStore::new("cli_show", 2).await;
    complete(&test, "invoice:1", "billing").await;
    claim(&test, "invoice:2", "billing", Duration::from_secs(600)).await;
    let output = idem(&test, &["show", "invoice:1"]);
    assert_eq!(status(&output), 0);
    let shown = text(&output);
    let doc = json(&test, &["show", "invoice:1"]);
    let record = &doc["records"][0];
    assert_eq!(record["state"], "completed");
    assert_eq!(record["scope"], "billing");
    assert_eq!(record["output_bytes"], 9, "the replayed \"receipt\"");
    assert_eq!(record["holder"], idem_core::holder());
    // Every field the JSON has is a line of the human output, with the same value.
    for (field, value) in record.as_object().unwrap() {
        let shown_value = match value {
            Value::Null => "-".to_owned(),
            Value::String(s) => s.clone(),
            Value::Array(a) if a.is_empty() => "(none)".to_owned(),
            other => other.to_string(),
        };
        assert!(
            shown.contains(&format!("{field}: {shown_value}")),
            "{field}: {shown}"
        );
    }

    let listed = json(&test, &["list"]);
    let keys: Vec<&str> = listed["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 2);
    let claimed = json(&test, &["list", "--state", "claimed"]);
    assert_eq!(claimed["records"][0]["key"], "invoice:2");
    assert_eq!(
        json(&test, &["list", "--state", "stale"])["records"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        json(&test, &["list", "--prefix", "invoice:1"])["records"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let table = text(&idem(&test, &["list"]));
    assert!(table.starts_with("KEY"), "{table}");
    assert!(
        table.contains("invoice:2") && table.contains("claimed"),
        "{table}"
    );
}

#[tokio::test]
async fn release_refuses_a_live_claim_unless_forced_and_frees_a_stale_one() {
    let test = TestStore::new("cli_release", 2).await;
    claim(&test, "live", "s", Duration::from_secs(600)).await;
    let refused = idem(&test, &["release", "live"]);
    assert_eq!(status(&refused), 3);
    assert!(text(&refused).contains("double run"), "{}", text(&refused));
    assert_eq!(
        json(&test, &["show", "live"])["records"][0]["state"],
        "claimed",
        "still held"
    );
    let forced = idem(&test, &["release", "live", "--force"]);
    assert_eq!(status(&forced), 0, "{}", text(&forced));
    assert!(text(&forced).contains("released"));

    claim(&test, "stale", "s", Duration::from_millis(200)).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        json(&test, &["list", "--state", "stale"])["records"][0]["key"],
        "stale"
    );
    assert_eq!(
        status(&idem(&test, &["release", "stale", "--scope", "s"])),
        0
    );
    let outcome = Call::new(&test.store, "stale")
        .scope("s")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(outcome.is_executed(), "the next delivery runs it");
    assert_eq!(
        status(&idem(&test, &["release", "stale"])),
        3,
        "completed: nothing to release"
    );
}

#[tokio::test]
async fn forget_asks_for_yes_then_the_work_runs_again() {
    let test = TestStore::new("cli_forget", 2).await;
    complete(&test, "done", "s").await;
    let asked = idem(&test, &["forget", "done"]);
    assert_eq!(status(&asked), 3);
    assert!(text(&asked).contains("--yes"));
    assert_eq!(
        status(&idem(&test, &["show", "done"])),
        0,
        "nothing deleted without --yes"
    );
    let forgot = idem(&test, &["forget", "done", "--yes"]);
    assert_eq!(status(&forgot), 0);
    assert!(text(&forgot).contains("forgot"));
    assert_eq!(status(&idem(&test, &["show", "done"])), 1);
    let again = Call::new(&test.store, "done")
        .scope("s")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(again.is_executed());
}

#[tokio::test]
async fn effects_and_purge() {
    let test = TestStore::new("cli_effects", 2).await;
    let outcome = Call::new(&test.store, "order:7")
        .scope("orders")
        .run(async {
            idem_core::journal::Journal::new()
                .at_least_once("send-receipt", async { Ok::<_, std::io::Error>(()) })
                .await
                .map_err(std::io::Error::other)?;
            Ok::<_, std::io::Error>(())
        })
        .await;
    assert!(outcome.unwrap().is_executed());
    let effects = json(&test, &["effects", "order:7"]);
    assert_eq!(effects["effects"][0]["effect"], "send-receipt");
    assert_eq!(effects["effects"][0]["state"], "done");

    claim(&test, "lapsed", "s", Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dry = json(&test, &["purge", "--dry-run"]);
    assert_eq!(dry["records"], 1);
    assert_eq!(
        status(&idem(&test, &["show", "lapsed"])),
        0,
        "a dry run deletes nothing"
    );
    let purged = json(&test, &["purge"]);
    assert_eq!(purged["purged"], 1);
    assert_eq!(status(&idem(&test, &["show", "lapsed"])), 1);
}

/// `idem purge` drains a backlog the store's way (each batch from where the one before ended),
/// printing each batch as it goes: every expired record goes, a live one stays.
#[tokio::test]
async fn purge_drains_a_backlog_batch_by_batch() {
    let test = TestStore::new("cli_purge", 2).await;
    idem_store_postgres::sqlx::query(&format!(
        "INSERT INTO \"{}\".idem_records (key, fence, expires_at, purge_at)
         SELECT 'old:' || i, i, now() - interval '1 hour',
                now() - interval '1 hour' + (i / 3) * interval '1 microsecond'
         FROM generate_series(1, 2500) i",
        test.schema
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    complete(&test, "live", "s").await;
    let output = idem(&test, &["purge", "--batch", "1000"]);
    assert_eq!(status(&output), 0, "{}", text(&output));
    assert_eq!(
        text(&output),
        "purged 1000 rows\npurged 1000 rows\npurged 500 rows\n\
         purged 2500 expired rows (records and journal entries) in 3 batches\n"
    );
    assert_eq!(json(&test, &["purge", "--dry-run"])["records"], 0);
    assert_eq!(
        status(&idem(&test, &["show", "live"])),
        0,
        "a live record stays"
    );
}

#[tokio::test]
async fn a_dead_job_is_retried_and_then_runs_once() {
    let test = TestStore::new("cli_jobs", 8).await;
    let queue = Queue::new(&test.store);
    queue.migrate().await.unwrap();
    let job = NewJob::new("report:1", &serde_json::json!({"n": 1}))
        .unwrap()
        .max_attempts(1);
    let _ = queue.enqueue(job).await.unwrap();
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let handler_runs = runs.clone();
    let workers = queue
        .worker(move |_job: Job| {
            let runs = handler_runs.clone();
            async move {
                if runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    return Err("the provider was down".to_owned());
                }
                Ok(())
            }
        })
        .poll_interval(Duration::from_millis(20))
        .start();
    for _ in 0..250 {
        if queue.stats().await.unwrap().dead == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let dead = json(&test, &["jobs", "list", "--state", "dead"]);
    assert_eq!(dead["jobs"][0]["id"], "report:1");
    assert_eq!(dead["jobs"][0]["last_error"], "the provider was down");
    assert_eq!(json(&test, &["jobs", "stats"])["dead"], 1);
    // Its attempt log: the one attempt, its start and end, how it ended and why.
    let shown = json(&test, &["jobs", "show", "report:1"]);
    let log = &shown["attempt_log"];
    assert_eq!(log.as_array().map(Vec::len), Some(1), "{shown}");
    assert_eq!(log[0]["attempt"], 1);
    assert_eq!(log[0]["outcome"], "dead");
    assert_eq!(log[0]["error"], "the provider was down");
    assert!(
        log[0]["started_at"].is_string() && log[0]["ended_at"].is_string(),
        "{shown}"
    );
    assert_eq!(
        status(&idem(&test, &["jobs", "discard", "report:1", "--json"])),
        0,
        "discard works on dead jobs"
    );
    // Enqueued again, dead again, then retried. (The count is reset first: the idle worker
    // may run the job as soon as it is enqueued.)
    runs.store(0, std::sync::atomic::Ordering::SeqCst);
    let job = NewJob::new("report:1", &serde_json::json!({"n": 1}))
        .unwrap()
        .max_attempts(1);
    let _ = queue.enqueue(job).await.unwrap();
    for _ in 0..250 {
        if queue.stats().await.unwrap().dead == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let retried = idem(&test, &["jobs", "retry", "report:1"]);
    assert_eq!(status(&retried), 0, "{}", text(&retried));
    for _ in 0..250 {
        if queue.stats().await.unwrap().done == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(json(&test, &["jobs", "show", "report:1"])["state"], "done");
    // The job ran once, briefly, so it wrote no record: `idem show` points at its row.
    let shown = idem(&test, &["show", "report:1"]);
    assert_eq!(status(&shown), 1, "{}", text(&shown));
    assert!(
        text(&shown).contains("job \"report:1\" is done"),
        "{}",
        text(&shown)
    );
    let shown = json(&test, &["show", "report:1", "--scope", "idem:queue"]);
    assert_eq!(
        (&shown["found"], &shown["job_state"]),
        (&false.into(), &"done".into())
    );
    assert_eq!(
        json(&test, &["show", "report:1", "--scope", "other"])["job_state"],
        Value::Null
    );
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "failed once, then ran once"
    );
    assert_eq!(
        status(&idem(&test, &["jobs", "retry", "report:1"])),
        3,
        "not dead"
    );
    assert_eq!(status(&idem(&test, &["jobs", "retry", "--all-dead"])), 0);
    workers.shutdown(Duration::from_secs(5)).await;
}

/// A job claimed by a worker that died (its lease lapsed) is listed as `stale`, naming the
/// worker, and not among the running jobs: its row is its record, so `idem list --state stale`
/// may have nothing to show for it.
#[tokio::test]
async fn a_job_whose_worker_died_is_listed_as_stale() {
    let test = TestStore::new("cli_stale_jobs", 4).await;
    let queue = Queue::new(&test.store);
    queue.migrate().await.unwrap();
    for key in ["crashed", "running"] {
        let _ = queue
            .enqueue(NewJob::new(key, &serde_json::json!({})).unwrap())
            .await
            .unwrap();
    }
    // Claimed by two workers; the first died a second ago (its lease lapsed), the second is
    // alive (a minute of lease left).
    idem_store_postgres::sqlx::query(&format!(
        "UPDATE \"{}\".idem_records_queue SET state = 'running', attempts = 1,
             worker = 'vm:' || key,
             available_at = now() + CASE key WHEN 'crashed' THEN interval '-1 second'
                                             ELSE interval '1 minute' END",
        test.schema
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    let stale = json(&test, &["jobs", "list", "--state", "stale"]);
    assert_eq!(stale["jobs"].as_array().unwrap().len(), 1, "{stale}");
    assert_eq!(stale["jobs"][0]["id"], "crashed");
    assert_eq!(stale["jobs"][0]["state"], "stale");
    assert_eq!(stale["jobs"][0]["worker"], "vm:crashed");
    let running = json(&test, &["jobs", "list", "--state", "running"]);
    assert_eq!(running["jobs"].as_array().unwrap().len(), 1, "{running}");
    assert_eq!(running["jobs"][0]["id"], "running");
    assert_eq!(json(&test, &["jobs", "show", "crashed"])["state"], "stale");
    let stats = json(&test, &["jobs", "stats"]);
    assert_eq!(
        (&stats["running"], &stats["stale"]),
        (&1.into(), &1.into()),
        "{stats}"
    );
    assert_eq!(
        json(&test, &["jobs", "list"])["jobs"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

/// `idem schedules`: a declared schedule is listed with its spec and missed ticks, paused and
/// resumed, and removed; an unknown name exits 1.
#[tokio::test]
async fn schedules_are_listed_paused_resumed_and_removed() {
    let test = TestStore::new("cli_schedules", 4).await;
    let queue = Queue::new(&test.store);
    queue.migrate().await.unwrap();
    let schedule = idem_queue::Schedule::cron("nightly", "0 3 * * *")
        .unwrap()
        .time_zone("Europe/Paris")
        .unwrap();
    let scheduler = queue.scheduler(vec![schedule]).unwrap();
    let now = std::time::SystemTime::now();
    scheduler.declare_at(now).await.unwrap();
    scheduler.pass_at(now).await.unwrap();
    let list = json(&test, &["schedules", "list"]);
    let row = &list["schedules"][0];
    assert_eq!(row["name"], "nightly");
    assert_eq!(row["spec"], "0 3 * * * (Europe/Paris)");
    assert_eq!(row["paused"], false);
    assert_eq!(row["missed"], 0);
    assert!(row["next_tick"].is_string(), "{row}");
    assert_eq!(status(&idem(&test, &["schedules", "pause", "nightly"])), 0);
    assert_eq!(
        json(&test, &["schedules", "list"])["schedules"][0]["paused"],
        true
    );
    assert_eq!(status(&idem(&test, &["schedules", "resume", "nightly"])), 0);
    assert_eq!(
        json(&test, &["schedules", "list"])["schedules"][0]["paused"],
        false
    );
    assert_eq!(status(&idem(&test, &["schedules", "pause", "nope"])), 1);
    assert_eq!(status(&idem(&test, &["schedules", "remove", "nightly"])), 0);
    assert_eq!(
        json(&test, &["schedules", "list"])["schedules"],
        serde_json::json!([])
    );
}

#[tokio::test]
async fn jobs_cancel_stops_a_waiting_job_and_jobs_show_its_queue_and_outcome() {
    let test = TestStore::new("cli_cancel", 8).await;
    let queue = Queue::new(&test.store);
    queue.migrate().await.unwrap();
    let job = NewJob::new("export:9", &serde_json::json!({"n": 9}))
        .unwrap()
        .queue("exports")
        .priority(4)
        .run_at(std::time::SystemTime::now() + Duration::from_secs(3600));
    let _ = queue.enqueue(job).await.unwrap();
    let listed = json(&test, &["jobs", "list"]);
    assert_eq!(listed["jobs"][0]["queue"], "exports");
    assert_eq!(listed["jobs"][0]["priority"], 4);
    let cancelled = idem(
        &test,
        &["jobs", "cancel", "export:9", "--reason", "customer left"],
    );
    assert_eq!(status(&cancelled), 0, "{}", text(&cancelled));
    assert!(
        text(&cancelled).contains("it will not run"),
        "{}",
        text(&cancelled)
    );
    let shown = json(&test, &["jobs", "show", "export:9"]);
    assert_eq!(shown["state"], "cancelled");
    assert_eq!(shown["last_error"], "customer left");
    assert_eq!(json(&test, &["jobs", "stats"])["cancelled"], 1);
    let again = idem(&test, &["jobs", "cancel", "export:9"]);
    assert_eq!(status(&again), 3, "nothing to cancel: {}", text(&again));
    assert_eq!(status(&idem(&test, &["jobs", "cancel", "nope"])), 1);
    let cancelled_list = json(&test, &["jobs", "list", "--state", "cancelled"]);
    assert_eq!(cancelled_list["jobs"][0]["id"], "export:9");
    assert_eq!(status(&idem(&test, &["jobs", "discard", "export:9"])), 0);
    assert_eq!(queue.status("export:9").await.unwrap(), None);
}

/// A record written before keys had scopes (in the scope `''`, as the scopes migration left
/// it) stands for its key in every scope until it expires, so an operator must be able to
/// release or forget it like any other: a claim held for a crashed old worker, or work done
/// that should run again.
#[tokio::test]
async fn a_record_of_the_legacy_scope_is_released_and_forgotten() {
    use idem_store_postgres::sqlx;
    let test = TestStore::new("cli_legacy", 2).await;
    claim(&test, "old-claim", "s", Duration::from_secs(600)).await;
    complete(&test, "old-done", "s").await;
    sqlx::query(&format!(
        "UPDATE \"{}\".idem_records SET scope = '' WHERE key IN ('old-claim', 'old-done')",
        test.schema
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    let call = |key: &'static str| {
        let store = test.store.clone();
        async move {
            Call::new(&store, key)
                .scope("s")
                .run(async { Ok::<_, std::io::Error>(()) })
                .await
                .unwrap()
        }
    };
    assert!(
        matches!(call("old-claim").await, Outcome::InProgress { .. }),
        "the legacy claim holds the key"
    );
    let listed = json(&test, &["list"]);
    assert_eq!(
        listed["records"].as_array().map(Vec::len),
        Some(2),
        "both listed: {listed}"
    );
    let released = idem(&test, &["release", "old-claim", "--force"]);
    assert_eq!(
        status(&released),
        0,
        "{}{}",
        text(&released),
        String::from_utf8_lossy(&released.stderr)
    );
    assert!(call("old-claim").await.is_executed(), "released, it runs");

    assert!(
        matches!(call("old-done").await, Outcome::Duplicate { .. }),
        "the legacy record is done work"
    );
    let forgot = idem(&test, &["forget", "old-done", "--yes"]);
    assert_eq!(status(&forgot), 0, "{}", text(&forgot));
    assert!(
        call("old-done").await.is_executed(),
        "forgotten, it runs again"
    );

    // The operator's key reaches no claim: nothing new is written in the legacy scope.
    let legacy = Key::new("new-work")
        .unwrap()
        .with_stored_scope(idem_core::LEGACY_SCOPE)
        .unwrap();
    let refused = test
        .store
        .claim(ClaimRequest {
            key: &legacy,
            fingerprint: None,
            lease: Duration::from_secs(60),
            token: None,
        })
        .await;
    assert!(refused.is_err(), "{refused:?}");
}

/// A database that cannot be reached is reported within seconds, not after the pool's wait,
/// naming where it was looked for (host, port, database, user) and never the password, and
/// saying what to check: a port that refuses, and one that accepts and never answers.
#[test]
fn an_unreachable_database_is_named_at_once_without_its_password() {
    let refused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused_port = refused.local_addr().unwrap().port();
    drop(refused);
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    for (port, why) in [
        (refused_port, "refused"),
        (silent_port, "no answer within 3 s"),
    ] {
        let started = std::time::Instant::now();
        let output = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args([
                "--database-url",
                &format!("postgres://app:s3cret@127.0.0.1:{port}/appdb"),
                "list",
            ])
            .output()
            .expect("run idem");
        let said = String::from_utf8_lossy(&output.stderr).to_lowercase();
        assert_eq!(status(&output), 4, "{said}");
        assert!(said.contains(&format!("127.0.0.1:{port}")), "{said}");
        assert!(said.contains("appdb") && said.contains("app"), "{said}");
        assert!(said.contains(why), "{said}");
        assert!(said.contains("check that the server runs"), "{said}");
        assert!(
            !said.contains("s3cret"),
            "the password is never shown: {said}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "reported after {:?}",
            started.elapsed()
        );
    }
    drop(silent);
}
