//! `examples/cron.rs` as real processes on one PostgreSQL: replicas of a one-second schedule,
//! one of them killed with SIGKILL, run every tick of the window once between them, and a
//! replica that comes back after every replica was down catches up the ticks within its window
//! and counts the older ones as missed (`idem schedules list --json`).

mod example_process;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use example_process::example_binary;

/// A replica of the example, its `ran` lines collected as they come.
struct Replica {
    child: Child,
    ran: Arc<Ran>,
}

/// The tick times a replica printed as run, those it printed as started (with `--work-ms`),
/// and a gate to wait for them.
#[derive(Default)]
struct Ran {
    times: Mutex<Vec<String>>,
    started: Mutex<Vec<String>>,
    grew: Condvar,
}

impl Ran {
    fn push(&self, time: String) {
        self.times.lock().unwrap().push(time);
        self.grew.notify_all();
    }

    fn push_started(&self, time: String) {
        // Under the lock `grew` waits with, so a waiter never misses it.
        let _times = self.times.lock().unwrap();
        self.started.lock().unwrap().push(time);
        self.grew.notify_all();
    }

    /// Waits until a tick it started has not run yet: a job in flight; panics after `most`.
    fn wait_in_flight(&self, most: Duration) {
        let (_times, timeout) = self
            .grew
            .wait_timeout_while(self.lock(), most, |times| {
                let started = self.started.lock().unwrap();
                started.iter().all(|t| times.contains(t))
            })
            .unwrap();
        assert!(!timeout.timed_out(), "no tick in flight within {most:?}");
    }

    /// The ticks it started and never printed as run.
    fn unfinished(&self) -> Vec<String> {
        let times = self.lock();
        let started = self.started.lock().unwrap();
        started
            .iter()
            .filter(|t| !times.contains(t))
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.times.lock().unwrap()
    }

    /// Waits until it printed `n` ticks; panics with `why` after `most`.
    fn wait_for(&self, n: usize, most: Duration, why: &str) {
        let (times, timeout) = self
            .grew
            .wait_timeout_while(self.lock(), most, |times| times.len() < n)
            .unwrap();
        assert!(!timeout.timed_out() || times.len() >= n, "{why}");
    }
}

fn replica(schema: &str, catch_up: &str) -> Replica {
    replica_working(schema, catch_up, 0)
}

/// A replica whose runs each take `work_ms`.
fn replica_working(schema: &str, catch_up: &str, work_ms: u64) -> Replica {
    let mut child = Command::new(example_binary("cron"))
        .args([
            "--database-url",
            &idem_store_postgres::testing::database_url(),
        ])
        .args(["--schema", schema, "--name", "tick", "--catch-up", catch_up])
        // A job the killed replica held comes back to the others within the test.
        .args(["--lease", "2s", "--work-ms", &work_ms.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the cron example");
    let out = BufReader::new(child.stdout.take().unwrap());
    let ran = Arc::new(Ran::default());
    let lines = ran.clone();
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            let time = |rest: &str| {
                rest.split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            };
            if let Some(rest) = line.strip_prefix("ran tick ") {
                lines.push(time(rest));
            } else if let Some(rest) = line.strip_prefix("start tick ") {
                lines.push_started(time(rest));
            }
        }
    });
    Replica { child, ran }
}

/// SIGTERM, then wait: the replica stops scheduling and drains.
fn stop(replica: &mut Replica) {
    let pid = replica.child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    replica.child.wait().unwrap();
}

fn kill(replica: &mut Replica) {
    replica.child.kill().unwrap(); // SIGKILL
    replica.child.wait().unwrap();
}

/// The tick times (`2026-12-05T10:00:01Z`) as seconds since the epoch.
fn seconds(time: &str) -> i64 {
    let t = time.trim_end_matches('Z');
    let (date, clock) = t.split_once('T').unwrap();
    let d: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let c: Vec<i64> = clock.split(':').map(|x| x.parse().unwrap()).collect();
    // Days from civil (Howard Hinnant's algorithm), enough for a test's own timestamps.
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + c[0] * 3600 + c[1] * 60 + c[2]
}

async fn fresh_schema(prefix: &str) -> String {
    let schema = idem_store_postgres::testing::unique_schema(prefix);
    let pool = idem_store_postgres::testing::pool(1).await;
    idem_store_postgres::sqlx::raw_sql(&format!("CREATE SCHEMA {schema}"))
        .execute(&pool)
        .await
        .unwrap();
    schema
}

async fn drop_schema(schema: &str) {
    let pool = idem_store_postgres::testing::pool(1).await;
    let _ = idem_store_postgres::sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&pool)
        .await;
}

fn runs(replicas: &[Replica]) -> HashMap<i64, usize> {
    let mut runs = HashMap::new();
    for replica in replicas {
        for time in replica.ran.lock().iter() {
            *runs.entry(seconds(time)).or_insert(0) += 1;
        }
    }
    runs
}

#[tokio::test]
async fn three_replicas_one_killed_run_every_tick_once() {
    let schema = fresh_schema("cron3").await;
    // Each run takes 1.5 s, so that jobs are in flight when the kill comes.
    let mut replicas: Vec<Replica> = (0..3)
        .map(|_| replica_working(&schema, "1h", 1_500))
        .collect();
    // Killed once it has run a tick (which replica wins a tick is the replicas' race), so that
    // its runs are part of what is counted, and while it runs another: the kill lands mid-job.
    replicas[0].ran.wait_for(
        1,
        Duration::from_secs(30),
        "the first replica ran no tick in 30 s",
    );
    replicas[0].ran.wait_in_flight(Duration::from_secs(30));
    kill(&mut replicas[0]);
    let killed_ran = replicas[0].ran.lock().len();
    let in_flight = replicas[0].ran.unfinished();
    assert!(!in_flight.is_empty(), "the kill landed mid-job");
    // The killed replica's jobs come back after their lease, and another replica runs them.
    let others_ran = |replicas: &[Replica], tick: &String| {
        replicas[1..].iter().any(|r| r.ran.lock().contains(tick))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !in_flight.iter().all(|tick| others_ran(&replicas, tick)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the ticks the killed replica had in flight never ran again: {in_flight:?}"
        );
        std::thread::sleep(Duration::from_millis(20)); // polls the replicas' lines
    }
    for replica in &mut replicas[1..] {
        stop(replica);
    }
    let runs = runs(&replicas);
    let (first, last) = (*runs.keys().min().unwrap(), *runs.keys().max().unwrap());
    assert!(last - first >= 5, "several seconds of ticks: {runs:?}");
    // Every tick from the first to the last ran: none skipped, the kill included.
    let skipped: Vec<i64> = (first..=last).filter(|t| !runs.contains_key(t)).collect();
    assert!(skipped.is_empty(), "ticks that never ran: {skipped:?}");
    // Each once, but for what the kill cut between a run and its record: a tick in flight in
    // the killed replica had not printed its line and ran once elsewhere after its lease; one
    // whose line it had printed, and not yet recorded done, runs again (at least once). Only
    // ticks the killed replica ran repeat, at most once each, and no more than it ran at once.
    let killed_times: std::collections::HashSet<i64> =
        replicas[0].ran.lock().iter().map(|t| seconds(t)).collect();
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice
            .iter()
            .all(|(t, n)| **n == 2 && killed_times.contains(*t)),
        "ticks run twice that the kill did not cut: {twice:?}"
    );
    assert!(
        twice.len() <= 4,
        "more repeats than the killed replica's slots: {twice:?}"
    );
    assert!(
        killed_ran > 0,
        "the killed replica ran ticks before it died"
    );
    drop_schema(&schema).await;
}

#[tokio::test]
async fn a_replica_back_after_downtime_catches_up_its_window_and_counts_the_rest_missed() {
    let schema = fresh_schema("cron_catchup").await;
    let mut first = replica(&schema, "3s");
    first
        .ran
        .wait_for(2, Duration::from_secs(30), "no tick ran");
    stop(&mut first);
    let last_before = first.ran.lock().iter().map(|t| seconds(t)).max().unwrap();
    // Every replica down for 10 s.
    std::thread::sleep(Duration::from_secs(10));
    let mut back = replica(&schema, "3s");
    back.ran
        .wait_for(4, Duration::from_secs(30), "nothing caught up");
    stop(&mut back);
    let both = [first, back];
    let runs = runs(&both);
    let (earliest, latest) = (*runs.keys().min().unwrap(), *runs.keys().max().unwrap());
    let not_run: Vec<i64> = (earliest..=latest)
        .filter(|t| !runs.contains_key(t))
        .collect();
    // About 10 s down with a 3 s window: the older ticks were not run...
    assert!(
        not_run.len() >= 5,
        "ran before {last_before}, then {runs:?}"
    );
    assert!(runs.values().all(|n| *n == 1), "each tick once: {runs:?}");
    // ... and each was counted as missed, none silently dropped.
    let pool = idem_store_postgres::testing::pool(2).await;
    let store = idem_store_postgres::PgStore::builder(pool)
        .schema(schema.clone())
        .build()
        .unwrap();
    let states = idem_queue::Queue::new(&store).schedules().await.unwrap();
    assert_eq!(states[0].missed, not_run.len() as u64, "{states:?}");
    drop_schema(&schema).await;
}
