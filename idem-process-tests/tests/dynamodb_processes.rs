//! `DynamoDbStore` across processes on one DynamoDB-compatible server (`DYNAMODB_URL`, moto's,
//! which `scripts/test` starts), through `dyn Store` as the other stores' process tests: a
//! duplicate storm (4 processes x 16 tasks x 500 keys, 8 deliveries per key) runs every body
//! once; workers killed with SIGKILL mid-run lose nothing and repeat only the bodies they had
//! in flight.
//!
//! The storm has fewer keys than on Redis: the local server answers one request at a time.
//! Bodies append `key pid` to a file (see `idem-pg-worker`), so a body that ran twice shows up
//! twice.

mod logged_runs;
mod pg_support;

use idem_store_dynamodb::testing::{dynamodb_url, fresh_table, local_client};
use idem_store_dynamodb::{DynamoDbStore, TableLayout};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// A table and a log file of the test's own; the log is removed when dropped.
struct Run {
    table: String,
    dir: PathBuf,
}

impl Run {
    async fn new(name: &str) -> Run {
        let client = local_client(&dynamodb_url());
        let table = fresh_table(&client, &format!("proc-{name}"), &TableLayout::default()).await;
        let dir = std::env::temp_dir().join(&table);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Run { table, dir }
    }

    fn log(&self) -> PathBuf {
        self.dir.join("runs")
    }

    fn worker(&self, mode: &str, args: &[(&str, String)]) -> Child {
        let mut command = Command::new(env!("CARGO_BIN_EXE_idem-pg-worker"));
        command
            .arg(mode)
            .arg("--dynamodb")
            .arg(dynamodb_url())
            .arg("--log")
            .arg(self.log())
            .args(["--schema", &self.table]);
        for (name, value) in args {
            command.arg(format!("--{name}")).arg(value);
        }
        command
            .env_remove("DATABASE_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn idem-pg-worker")
    }

    fn store(&self) -> DynamoDbStore {
        DynamoDbStore::new(local_client(&dynamodb_url()), &self.table)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_deliver_five_hundred_keys_eight_times_and_run_each_once() {
    let run = Run::new("storm").await;
    logged_runs::storm_of(
        500,
        &|mode, args| run.worker(mode, args),
        &run.log().with_extension("executions"),
        &run.store(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_mid_run_lose_nothing_and_repeat_only_what_they_had_in_flight() {
    let run = Run::new("crash").await;
    let log = run.log().with_extension("executions");
    let repeats =
        logged_runs::killed_workers(&|mode, args| run.worker(mode, args), &log, &run.store()).await;
    eprintln!("dynamodb crash: 4 kills, {repeats} bodies repeated");
}
