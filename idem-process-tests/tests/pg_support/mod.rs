//! Support for the multi-process PostgreSQL tests: a real server from `DATABASE_URL`, a schema
//! of the test's own, and worker processes (`idem-pg-worker`).

#![allow(dead_code)]

use idem_store_postgres::sqlx::{self, PgPool, Row};
use idem_store_postgres::PgStore;
use std::process::{Child, Command, Stdio};

pub use idem_store_postgres::testing::database_url;

/// A migrated store in a fresh schema, with the `executions` and `lost_claims` tables the
/// worker writes to. The schema is dropped at the end.
pub struct Schema {
    pub name: String,
    pub pool: PgPool,
    pub store: PgStore,
}

impl Schema {
    pub async fn new(prefix: &str) -> Schema {
        let name = format!("idem_t_{prefix}_{}", std::process::id());
        let store = idem_store_postgres::testing::pg_store(&name, 4, None).await;
        let pool = store.pool().clone();
        sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
            .execute(&pool)
            .await
            .unwrap();
        idem_queue::Queue::new(&store).migrate().await.unwrap();
        sqlx::raw_sql(&format!(
            "CREATE TABLE \"{name}\".executions (
                 key text NOT NULL, pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp(),
                 ended_at timestamptz);
             CREATE TABLE \"{name}\".lost_claims (
                 key text NOT NULL, pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());"
        ))
        .execute(&pool)
        .await
        .unwrap();
        Schema { name, pool, store }
    }

    pub async fn scalar(&self, sql: &str) -> i64 {
        let sql = sql.replace("{schema}", &format!("\"{}\"", self.name));
        sqlx::query(&sql)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get::<i64, _>(0)
    }

    pub async fn rows(&self, sql: &str) -> Vec<(String, i32)> {
        let sql = sql.replace("{schema}", &format!("\"{}\"", self.name));
        sqlx::query(&sql)
            .fetch_all(&self.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    }

    pub async fn drop_schema(self) {
        let _ = sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name))
            .execute(&self.pool)
            .await;
        self.pool.close().await;
    }
}

/// A xorshift generator from `seed` (not zero): `random(below)` is in `0..below`. The tests
/// pick their victims and their pauses with it, so a failing schedule is the same on a re-run.
pub fn xorshift(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut rng = seed;
    move |below: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % below
    }
}

/// The lines `output` (a child's piped stdout or stderr) prints, as they come, read on a thread
/// of their own.
pub fn lines(output: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(output)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Sends `signal` (`KILL`, `TERM`, `STOP`, `CONT`) to `child`.
pub fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal} {}", child.id());
}

/// Starts a worker process: `idem-pg-worker MODE --schema .. ARGS..`.
pub fn spawn_worker(mode: &str, schema: &str, args: &[(&str, String)]) -> Child {
    spawn(
        env!("CARGO_BIN_EXE_idem-pg-worker"),
        Some(mode),
        schema,
        args,
    )
}

/// Starts `idem-pg-worker MODE` over keys `first..first + keys` with `tasks` delivery tasks,
/// its bodies sleeping up to `work_ms`, its timing seeded with `seed`.
pub fn spawn_keyed_worker(
    mode: &str,
    schema: &str,
    seed: u64,
    keys: (u32, u32),
    tasks: usize,
    work_ms: u64,
) -> Child {
    spawn_keyed_worker_with(mode, schema, seed, keys, tasks, work_ms, &[])
}

/// [`spawn_keyed_worker`] with more flags.
pub fn spawn_keyed_worker_with(
    mode: &str,
    schema: &str,
    seed: u64,
    (first, keys): (u32, u32),
    tasks: usize,
    work_ms: u64,
    more: &[(&str, String)],
) -> Child {
    let mut args = vec![
        ("first", first.to_string()),
        ("keys", keys.to_string()),
        ("tasks", tasks.to_string()),
        ("work-ms", work_ms.to_string()),
        ("seed", seed.to_string()),
    ];
    args.extend(more.iter().cloned());
    spawn_worker(mode, schema, &args)
}

/// Starts a work-queue worker process: `idem-queue-worker --schema .. ARGS..`.
pub fn spawn_queue_worker(schema: &str, args: &[(&str, String)]) -> Child {
    spawn(env!("CARGO_BIN_EXE_idem-queue-worker"), None, schema, args)
}

fn spawn(binary: &str, mode: Option<&str>, schema: &str, args: &[(&str, String)]) -> Child {
    let mut command = Command::new(binary);
    command.args(mode).arg("--schema").arg(schema);
    for (name, value) in args {
        command.arg(format!("--{name}")).arg(value);
    }
    command
        .env("DATABASE_URL", database_url())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {binary}: {e}"))
}

/// The summary a worker printed, its `name=N` fields in order: for `idem-pg-worker`
/// (executed, duplicate, in_progress, errors, lost), for `idem-queue-worker` (runs, finished,
/// released).
pub fn summary(child: Child) -> [u64; 5] {
    let output = child.wait_with_output().expect("worker output");
    assert!(
        output.status.success(),
        "worker failed: {:?}",
        output.status
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().last().unwrap_or_default();
    let mut values = [0u64; 5];
    for (slot, field) in values.iter_mut().zip(line.split_whitespace()) {
        *slot = field
            .split('=')
            .nth(1)
            .and_then(|v| v.parse().ok())
            .expect(line);
    }
    values
}
