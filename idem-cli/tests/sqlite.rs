//! `idem` on a SQLite store (`--database-url sqlite://PATH`): the same commands and fields as on
//! PostgreSQL; the work queue's commands say they need PostgreSQL.

use idem_core::{Call, Claim, ClaimRequest, Key, Store};
use idem_store_sqlite::SqliteStore;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

struct Db {
    dir: PathBuf,
    url: String,
    store: SqliteStore,
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn db(name: &str) -> Db {
    let dir = std::env::temp_dir().join(format!("idem-cli-sqlite-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("idem.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store.migrate().await.unwrap();
    Db {
        url: format!("sqlite://{}", path.display()),
        dir,
        store,
    }
}

fn idem(db: &Db, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["--database-url", &db.url])
        .args(args)
        .output()
        .expect("run idem")
}

fn json(db: &Db, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let output = idem(db, &args);
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&output.stdout)))
}

fn status(output: &Output) -> i32 {
    output.status.code().unwrap()
}

#[tokio::test]
async fn the_records_commands_work_on_a_sqlite_file() {
    let db = db("records").await;
    let done = Call::new(&db.store, "report:1")
        .scope("reports")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(done.is_executed());
    let key = Key::new("report:2").unwrap().with_scope("reports").unwrap();
    let claimed = db
        .store
        .claim(ClaimRequest {
            key: &key,
            fingerprint: None,
            lease: Duration::from_millis(200),
            token: None,
        })
        .await
        .unwrap();
    assert!(matches!(claimed, Claim::Acquired { .. }));

    let shown = json(&db, &["show", "report:1"]);
    assert_eq!(shown["records"][0]["state"], "completed");
    assert_eq!(shown["records"][0]["holder"], idem_core::holder());
    assert!(shown["records"][0]["keep_until"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    assert_eq!(status(&idem(&db, &["show", "nope"])), 1);

    tokio::time::sleep(Duration::from_millis(400)).await;
    let stale = json(&db, &["list", "--state", "stale"]);
    assert_eq!(stale["records"][0]["key"], "report:2");
    assert_eq!(
        stale["records"][0]["holder"],
        idem_core::holder(),
        "names this process"
    );
    assert_eq!(json(&db, &["list"])["records"].as_array().unwrap().len(), 2);
    let released = idem(&db, &["release", "report:2"]);
    assert_eq!(
        status(&released),
        0,
        "{}",
        String::from_utf8_lossy(&released.stdout)
    );
    let again = Call::new(&db.store, "report:2")
        .scope("reports")
        .run(async { Ok::<_, std::io::Error>(()) })
        .await
        .unwrap();
    assert!(again.is_executed(), "the next delivery runs it");

    assert_eq!(
        status(&idem(&db, &["forget", "report:1"])),
        3,
        "asks for --yes"
    );
    assert_eq!(status(&idem(&db, &["forget", "report:1", "--yes"])), 0);
    assert_eq!(status(&idem(&db, &["show", "report:1"])), 1);
    assert_eq!(json(&db, &["purge", "--dry-run"])["records"], 0);
    assert_eq!(status(&idem(&db, &["migrate"])), 0);

    let jobs = idem(&db, &["jobs", "stats"]);
    assert_eq!(status(&jobs), 2);
    assert!(String::from_utf8_lossy(&jobs.stdout).contains("PostgreSQL"));
}

#[tokio::test]
async fn a_missing_sqlite_file_is_an_error_not_a_new_empty_store() {
    let output = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["--database-url", "sqlite:///nonexistent/idem.db", "list"])
        .output()
        .unwrap();
    assert_eq!(status(&output), 4);
    assert!(String::from_utf8_lossy(&output.stderr).contains("no SQLite database"));
}
