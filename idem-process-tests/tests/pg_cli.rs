//! The operator's command after a crash: a worker killed with SIGKILL mid-run shows up in
//! `idem list --state stale` with its host and pid, and `idem release` lets the next delivery
//! run the key, once.

mod pg_support;

use idem_core::Call;
use pg_support::{spawn_worker, Schema};
use serde_json::Value;
use std::time::Duration;

/// Runs `idem` in process against the test's schema; returns (exit status, stdout).
async fn idem(schema: &Schema, args: &[&str]) -> (i32, String) {
    let url = idem_store_postgres::testing::database_url();
    let mut argv = vec!["idem", "--database-url", &url, "--schema", &schema.name];
    argv.extend_from_slice(args);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = idem_cli::run(argv, &mut out, &mut err).await;
    assert!(err.is_empty(), "{}", String::from_utf8_lossy(&err));
    (status, String::from_utf8(out).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_claims_are_listed_stale_with_its_pid_and_release_lets_them_run_once() {
    let schema = Schema::new("cli_kill").await;
    // Five keys whose bodies sleep up to a minute; their lease is 1 s, renewed while alive.
    let mut worker = spawn_worker(
        "crash",
        &schema.name,
        &[
            ("keys", "5".into()),
            ("tasks", "5".into()),
            ("work-ms", "60000".into()),
        ],
    );
    let pid = worker.id();
    for _ in 0..400 {
        if schema
            .scalar("SELECT count(*) FROM {schema}.executions")
            .await
            == 5
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        schema
            .scalar("SELECT count(*) FROM {schema}.executions")
            .await,
        5
    );
    let (_, live) = idem(&schema, &["list", "--state", "claimed", "--json"]).await;
    let live: Value = serde_json::from_str(&live).unwrap();
    assert_eq!(
        live["records"].as_array().unwrap().len(),
        5,
        "all five held, leases renewed"
    );

    worker.kill().unwrap(); // SIGKILL, mid-body
    worker.wait().unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await; // past the 1 s lease

    let (status, stale) = idem(&schema, &["list", "--state", "stale", "--json"]).await;
    assert_eq!(status, 0);
    let stale: Value = serde_json::from_str(&stale).unwrap();
    let records = stale["records"].as_array().unwrap();
    assert_eq!(records.len(), 5, "{stale}");
    let holder = idem_core::holder().rsplit_once(':').unwrap().0;
    for record in records {
        assert_eq!(
            record["holder"],
            format!("{holder}:{pid}"),
            "names the process that died"
        );
        assert_eq!(record["state"], "stale");
    }
    let (_, table) = idem(&schema, &["list", "--state", "stale"]).await;
    assert!(table.contains(&format!(":{pid}")), "{table}");

    // Released, the next delivery runs it, once.
    let (status, released) = idem(&schema, &["release", "crash:0", "--scope", "crash_job"]).await;
    assert_eq!(status, 0, "{released}");
    assert!(released.contains(&format!(":{pid}")), "{released}");
    let (status, gone) = idem(&schema, &["show", "crash:0"]).await;
    assert_eq!(status, 1, "{gone}");
    let store = idem_store_postgres::testing::pg_store(&schema.name, 2, None).await;
    let first = Call::new(&store, "crash:0")
        .scope("crash_job")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(first.is_executed());
    let again = Call::new(&store, "crash:0")
        .scope("crash_job")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(again.is_duplicate(), "once");
    let (_, shown) = idem(&schema, &["show", "crash:0", "--json"]).await;
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["records"][0]["state"], "completed");
    assert_eq!(shown["records"][0]["holder"], idem_core::holder());
    schema.drop_schema().await;
}
