//! `idem` on a Redis store (`--database-url redis://..`, `--redis-prefix`), on one node
//! (`REDIS_URL`) and on a 3-master cluster (`REDIS_CLUSTER_URLS`): the same commands and fields
//! as on PostgreSQL.

use idem_core::{Call, Claim, ClaimRequest, Key, Store};
use idem_store_redis::RedisStore;
use serde_json::Value;
use std::process::{Command, Output};
use std::time::Duration;

fn idem(url: &str, prefix: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["--database-url", url, "--redis-prefix", prefix])
        .args(args)
        .output()
        .expect("run idem")
}

fn json(url: &str, prefix: &str, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let output = idem(url, prefix, &args);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: {e}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn status(output: &Output) -> i32 {
    output.status.code().unwrap()
}

async fn records_commands(url: &str, store: RedisStore, prefix: &str) {
    let done = Call::new(&store, "report:1")
        .scope("reports")
        .run(async {
            idem_core::journal::Journal::new()
                .at_least_once("send", async { Ok::<_, std::io::Error>(()) })
                .await
                .map_err(std::io::Error::other)?;
            Ok::<_, std::io::Error>(())
        })
        .await
        .unwrap();
    assert!(done.is_executed());
    let key = Key::new("report:2").unwrap().with_scope("reports").unwrap();
    let claimed = store
        .claim(ClaimRequest {
            key: &key,
            fingerprint: None,
            lease: Duration::from_millis(200),
            token: None,
        })
        .await
        .unwrap();
    assert!(matches!(claimed, Claim::Acquired { .. }));

    let shown = json(url, prefix, &["show", "report:1"]);
    assert_eq!(shown["records"][0]["state"], "completed");
    assert_eq!(shown["records"][0]["holder"], idem_core::holder());
    assert_eq!(shown["records"][0]["journal"][0]["effect"], "send");
    assert_eq!(
        json(url, prefix, &["effects", "report:1"])["effects"][0]["state"],
        "done"
    );
    assert_eq!(status(&idem(url, prefix, &["show", "nope"])), 1);

    tokio::time::sleep(Duration::from_millis(400)).await;
    let stale = json(url, prefix, &["list", "--state", "stale"]);
    assert_eq!(stale["records"][0]["key"], "report:2");
    assert_eq!(stale["records"][0]["holder"], idem_core::holder());
    assert_eq!(
        json(url, prefix, &["list"])["records"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(json(url, prefix, &["purge", "--dry-run"])["records"], 1);
    assert_eq!(
        status(&idem(
            url,
            prefix,
            &["release", "report:2", "--scope", "reports"]
        )),
        0
    );
    let again = Call::new(&store, "report:2")
        .scope("reports")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(again.is_executed(), "the next delivery runs it");

    assert_eq!(
        status(&idem(url, prefix, &["forget", "report:1"])),
        3,
        "asks for --yes"
    );
    assert_eq!(
        status(&idem(url, prefix, &["forget", "report:1", "--yes"])),
        0
    );
    assert_eq!(status(&idem(url, prefix, &["show", "report:1"])), 1);
    assert_eq!(status(&idem(url, prefix, &["migrate"])), 0);
    assert_eq!(
        status(&idem(url, prefix, &["jobs", "stats"])),
        2,
        "the queue is PostgreSQL's"
    );
}

#[tokio::test]
async fn the_records_commands_work_on_redis() {
    let url = idem_testdb::redis_url();
    let prefix = format!("idem-cli-{}", std::process::id());
    let store = RedisStore::connect(&url).await.unwrap().prefix(&prefix);
    records_commands(&url, store, &prefix).await;
}

#[tokio::test]
async fn the_records_commands_work_on_a_redis_cluster() {
    let urls = idem_testdb::redis_cluster_urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let prefix = format!("idem-cli-cluster-{}", std::process::id());
    let store = RedisStore::connect_cluster(&nodes)
        .await
        .unwrap()
        .prefix(&prefix);
    records_commands(&urls.join(","), store, &prefix).await;
}
