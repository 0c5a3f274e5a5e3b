//! Schedules against a real PostgreSQL, on a manual clock (`Scheduler::pass_at`): any number of
//! replicas enqueue each tick once; after downtime the ticks within the catch-up window are
//! enqueued and the older ones counted as missed; a tick whose job did not complete within its
//! grace is missed, a completed one is the last success; a paused schedule enqueues nothing;
//! the queue's workers run each tick's job once and the job names its tick.

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use idem_queue::{Job, Queue, Schedule, Scheduler};
use idem_store_postgres::sqlx;
use support::TestStore;

/// The database's clock, to the second: the manual clock's start.
async fn database_now(queue: &Queue) -> SystemTime {
    let secs: i64 = sqlx::query_scalar("SELECT floor(extract(epoch from now()))::bigint")
        .fetch_one(queue.store().pool())
        .await
        .unwrap();
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64)
}

/// The keys of the scheduled jobs of `name` in the queue.
async fn tick_keys(queue: &Queue, name: &str) -> Vec<String> {
    let table = format!("{}_queue", queue.store().table().trim_end_matches('"'));
    sqlx::query_scalar(&format!(
        "SELECT key FROM {table}\" WHERE key LIKE $1 ORDER BY key"
    ))
    .bind(format!("schedule:{name}:%"))
    .fetch_all(queue.store().pool())
    .await
    .unwrap()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn every_second(name: &str) -> Schedule {
    Schedule::every(name, secs(1)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_enqueue_every_tick_once_and_skip_none() {
    let test = TestStore::new("sched_replicas", 12).await;
    let queue = support::queue(&test).await;
    let t0 = database_now(&queue).await;
    // Three replicas, each with a queue and a scheduler of its own on the same database.
    let replicas: Vec<Scheduler> = (0..3)
        .map(|_| {
            Queue::new(&test.store)
                .scheduler(vec![every_second("tick")])
                .unwrap()
        })
        .collect();
    for replica in &replicas {
        replica.declare_at(t0).await.unwrap();
    }
    let mut stored = 0;
    for n in 1..=10 {
        let now = t0 + secs(n);
        let passes = futures_util::future::join_all(replicas.iter().map(|r| r.pass_at(now))).await;
        for pass in passes {
            stored += pass.unwrap().iter().map(|p| p.stored).sum::<usize>();
        }
    }
    // The replicas raced for every tick: each was stored by one of them, the others found it.
    assert_eq!(stored, 10, "each tick stored once across the replicas");
    let keys = tick_keys(&queue, "tick").await;
    let expected: Vec<String> = (1..=10)
        .map(|n| {
            Schedule::every("tick", secs(1))
                .unwrap()
                .tick_key(t0 + secs(n))
        })
        .collect();
    let mut sorted = expected.clone();
    sorted.sort();
    assert_eq!(
        keys, sorted,
        "each of the 10 ticks enqueued once, none skipped"
    );
    let state = &queue.schedules().await.unwrap()[0];
    assert_eq!(state.missed, 0);
    assert_eq!(state.last_tick, Some(t0 + secs(10)));
    assert_eq!(state.next_tick, Some(t0 + secs(11)));
}

#[tokio::test]
async fn after_downtime_ticks_in_the_window_run_once_and_older_are_missed() {
    let test = TestStore::new("sched_catchup", 4).await;
    let queue = support::queue(&test).await;
    let t0 = database_now(&queue).await;
    let schedule = every_second("catchup").catch_up(secs(5));
    let scheduler = queue.scheduler(vec![schedule]).unwrap();
    scheduler.declare_at(t0).await.unwrap();
    // Every replica was down for 20 s; one comes back.
    let pass = scheduler.pass_at(t0 + secs(20)).await.unwrap();
    assert_eq!((pass[0].enqueued, pass[0].not_enqueued), (5, 15));
    let keys = tick_keys(&queue, "catchup").await;
    assert_eq!(keys.len(), 5);
    let first_kept = every_second("catchup").tick_key(t0 + secs(16));
    assert_eq!(keys[0], first_kept, "the ticks of the last 5 s, none older");
    let state = &queue.schedules().await.unwrap()[0];
    assert_eq!(state.missed, 15, "the older ticks are counted, not dropped");
    assert!(state.last_missed_at.is_some());
    // Another replica coming back at the same moment counts nothing twice.
    let again = queue
        .scheduler(vec![every_second("catchup").catch_up(secs(5))])
        .unwrap();
    let pass = again.pass_at(t0 + secs(20)).await.unwrap();
    assert_eq!((pass[0].enqueued, pass[0].not_enqueued), (0, 0));
    assert_eq!(queue.schedules().await.unwrap()[0].missed, 15);
}

#[tokio::test]
async fn a_tick_not_completed_within_its_grace_is_missed_and_a_completed_one_succeeds() {
    let test = TestStore::new("sched_grace", 4).await;
    let queue = support::queue(&test).await;
    let t0 = database_now(&queue).await;
    let schedule = || every_second("grace").grace(secs(5));
    let scheduler = queue.scheduler(vec![schedule()]).unwrap();
    scheduler.declare_at(t0).await.unwrap();
    scheduler.pass_at(t0 + secs(2)).await.unwrap();
    // The first tick's job completes; the second's never runs.
    let done = schedule().tick_key(t0 + secs(1));
    let table = format!("{}_queue", test.store.table().trim_end_matches('"'));
    sqlx::query(&format!(
        "UPDATE {table}\" SET state = 'done', finished_at = now() WHERE key = $1"
    ))
    .bind(&done)
    .execute(test.store.pool())
    .await
    .unwrap();
    // 7 s in, both ticks are past their 5 s grace.
    let pass = scheduler.pass_at(t0 + secs(7)).await.unwrap();
    assert_eq!(pass[0].not_completed, 1);
    let state = &queue.schedules().await.unwrap()[0];
    assert_eq!(
        state.missed, 1,
        "the second tick's job did not complete in time"
    );
    assert!(state.last_success_at.is_some(), "the first tick's did");
    // Checked once: the next pass does not count it again.
    let pass = scheduler.pass_at(t0 + secs(7)).await.unwrap();
    assert_eq!(pass[0].not_completed, 0);
}

#[tokio::test]
async fn a_paused_schedule_enqueues_and_misses_nothing_until_resumed() {
    let test = TestStore::new("sched_pause", 4).await;
    let queue = support::queue(&test).await;
    let t0 = database_now(&queue).await;
    let scheduler = queue.scheduler(vec![every_second("paused")]).unwrap();
    scheduler.declare_at(t0).await.unwrap();
    assert!(queue.pause_schedule("paused").await.unwrap());
    let pass = scheduler.pass_at(t0 + secs(5)).await.unwrap();
    assert_eq!((pass[0].enqueued, pass[0].not_enqueued), (0, 0));
    assert!(tick_keys(&queue, "paused").await.is_empty());
    assert!(queue.schedules().await.unwrap()[0].paused);
    assert!(queue.resume_schedule("paused").await.unwrap());
    let pass = scheduler.pass_at(t0 + secs(8)).await.unwrap();
    assert_eq!(
        pass[0].enqueued, 3,
        "from the resume on: the ticks of the pause stay passed"
    );
    assert_eq!(queue.schedules().await.unwrap()[0].missed, 0);
    assert!(!queue.pause_schedule("no-such").await.unwrap());
    assert!(queue.remove_schedule("paused").await.unwrap());
    assert!(queue.schedules().await.unwrap().is_empty());
}

/// A pause passes over the ticks after it only: ticks that fell due before it (no scheduler
/// ran then) are still enqueued. Resuming a schedule that is not paused changes nothing.
#[tokio::test]
async fn a_pause_keeps_the_ticks_due_before_it_and_resume_alone_skips_nothing() {
    let test = TestStore::new("sched_pause_before", 4).await;
    let queue = support::queue(&test).await;
    // Declared 20 s ago; no scheduler ran since; paused now.
    let t0 = database_now(&queue).await - secs(20);
    let scheduler = queue.scheduler(vec![every_second("before")]).unwrap();
    scheduler.declare_at(t0).await.unwrap();
    assert!(
        queue.resume_schedule("before").await.unwrap(),
        "not paused: nothing to end"
    );
    assert!(queue.pause_schedule("before").await.unwrap());
    // The ticks up to the pause's own time (20, or 21 if the clock passed a second since `t0`
    // was read).
    let paused: i64 = sqlx::query_scalar(&format!(
        "SELECT floor(extract(epoch from paused_at))::bigint
         FROM \"{}\".idem_records_schedules WHERE name = 'before'",
        test.schema
    ))
    .fetch_one(queue.store().pool())
    .await
    .unwrap();
    let since = t0.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64;
    let before = (paused - since) as usize;
    assert!((20..=21).contains(&before), "paused {before} s after t0");
    let pass = scheduler.pass_at(t0 + secs(25)).await.unwrap();
    assert_eq!(
        (pass[0].enqueued, pass[0].not_enqueued),
        (before, 0),
        "the {before} ticks before the pause, none of those after"
    );
}

/// What would fail at every tick is refused when the scheduler is built.
#[tokio::test]
async fn schedules_that_would_fail_at_every_tick_are_refused_up_front() {
    let test = TestStore::new("sched_refused", 2).await;
    let queue = support::queue(&test).await;
    let huge = every_second("huge").payload(serde_json::json!({"n": 1e20}));
    let error = queue.scheduler(vec![huge]).unwrap_err().to_string();
    assert!(error.contains("\"huge\""), "{error}");
    let instant = every_second("instant").catch_up(Duration::ZERO);
    assert!(queue.scheduler(vec![instant]).is_err());
    let twice = vec![every_second("same"), every_second("same")];
    assert!(queue.scheduler(twice).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_workers_run_each_ticks_job_once_and_it_names_its_tick() {
    let test = TestStore::new("sched_run", 12).await;
    let queue = support::queue(&test).await;
    // Ticks of the last few seconds: due at once.
    let t0 = database_now(&queue).await - secs(6);
    let scheduler = queue
        .scheduler(vec![
            every_second("run").payload(serde_json::json!({"report": "daily"}))
        ])
        .unwrap();
    scheduler.declare_at(t0).await.unwrap();
    scheduler.pass_at(t0 + secs(4)).await.unwrap();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let all_ran = Arc::new(tokio::sync::Notify::new());
    let (seen, gate) = (ran.clone(), all_ran.clone());
    let workers = queue
        .worker(move |job: Job| {
            let (seen, gate) = (seen.clone(), gate.clone());
            async move {
                let tick = job.tick().expect("a scheduled job names its tick");
                assert_eq!(job.payload()["report"], "daily");
                let mut seen = seen.lock().unwrap();
                seen.push((tick.schedule, tick.at));
                if seen.len() == 4 {
                    gate.notify_one();
                }
                Ok::<_, std::io::Error>(())
            }
        })
        .concurrency(4)
        .start();
    tokio::time::timeout(secs(30), all_ran.notified())
        .await
        .expect("the four ticks ran");
    let report = workers.shutdown(secs(5)).await;
    assert_eq!(report.released, 0);
    assert_eq!(queue.stats().await.unwrap().done, 4);
    let ran = ran.lock().unwrap().clone();
    let distinct: HashSet<_> = ran.iter().cloned().collect();
    assert_eq!(ran.len(), 4, "{ran:?}");
    assert_eq!(distinct.len(), 4);
    assert!(ran
        .iter()
        .all(|(name, at)| name == "run" && *at > t0 && *at <= t0 + secs(4)));
}

/// Two replicas that read a schedule's state at the same moment, both behind a row lock that
/// holds their updates: the first to update counts the missed ticks, the other finds the last
/// tick moved on and counts nothing (without that check, the 15 missed ticks count twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_that_race_count_the_missed_ticks_once() {
    let test = TestStore::new("sched_race", 12).await;
    let queue = support::queue(&test).await;
    let t0 = database_now(&queue).await;
    let replica = || {
        Queue::new(&test.store)
            .scheduler(vec![every_second("race").catch_up(secs(5))])
            .unwrap()
    };
    let (a, b) = (replica(), replica());
    a.declare_at(t0).await.unwrap();
    let table = format!("{}_schedules", test.store.table().trim_end_matches('"'));
    let lock = support::lock_row_where(&test, &format!("{table}\""), "name", "race").await;
    let (ra, rb) = (
        tokio::spawn(async move { a.pass_at(t0 + secs(20)).await }),
        tokio::spawn(async move { b.pass_at(t0 + secs(20)).await }),
    );
    support::until_lock_waits(&test, 2).await;
    lock.rollback().await.unwrap();
    let (pa, pb) = (ra.await.unwrap().unwrap(), rb.await.unwrap().unwrap());
    assert_eq!(pa[0].not_enqueued + pb[0].not_enqueued, 15);
    assert_eq!(queue.schedules().await.unwrap()[0].missed, 15);
    assert_eq!(
        tick_keys(&queue, "race").await.len(),
        5,
        "enqueued by both, stored once"
    );
}

/// The loop on the database's clock: started on two replicas, it enqueues the ticks as they
/// fall due, each once; shutdown stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_schedulers_enqueue_ticks_as_they_fall_due() {
    let test = TestStore::new("sched_loop", 8).await;
    let queue = support::queue(&test).await;
    let start = || async {
        Queue::new(&test.store)
            .scheduler(vec![every_second("loop")])
            .unwrap()
            .check_every(Duration::from_millis(100))
            .start()
            .await
            .unwrap()
    };
    let (a, b) = (start().await, start().await);
    let deadline = std::time::Instant::now() + secs(30);
    while tick_keys(&queue, "loop").await.len() < 2 {
        assert!(std::time::Instant::now() < deadline, "no ticks enqueued");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.shutdown().await;
    b.shutdown().await;
    let keys = tick_keys(&queue, "loop").await;
    // Stopped: once the database's clock is two ticks on, nothing more was enqueued.
    let stopped_at = database_now(&queue).await;
    while database_now(&queue).await < stopped_at + secs(2) {
        tokio::time::sleep(Duration::from_millis(50)).await; // polls the database's clock
    }
    assert_eq!(
        tick_keys(&queue, "loop").await,
        keys,
        "no tick enqueued after shutdown"
    );
    let distinct: HashSet<_> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len());
    assert!(
        keys.iter().all(|key| !key.contains('.')),
        "ticks on whole seconds, whenever each replica started: {keys:?}"
    );
    let state = &queue.schedules().await.unwrap()[0];
    assert_eq!(state.missed, 0);
}

/// A pass that enqueued ticks and then failed before it moved the schedule on leaves them in
/// the queue: when the next pass comes after the catch-up window, they are not missed.
#[tokio::test]
async fn ticks_enqueued_by_a_pass_that_failed_are_not_counted_missed_later() {
    let test = TestStore::new("sched_failed_pass", 4).await;
    let queue = support::queue(&test).await;
    let t0 = database_now(&queue).await;
    let schedule = every_second("interrupted").catch_up(secs(5));
    let scheduler = queue.scheduler(vec![schedule.clone()]).unwrap();
    scheduler.declare_at(t0).await.unwrap();
    // What the failed pass enqueued: the first three ticks.
    for n in 1..=3 {
        let job =
            idem_queue::NewJob::new(schedule.tick_key(t0 + secs(n)), &serde_json::Value::Null)
                .unwrap();
        let _ = queue.enqueue(job).await.unwrap();
    }
    let pass = scheduler.pass_at(t0 + secs(20)).await.unwrap();
    assert_eq!(
        (pass[0].enqueued, pass[0].not_enqueued),
        (8, 12),
        "ticks 1-3 were enqueued, 4-15 missed, 16-20 enqueued now"
    );
    assert_eq!(queue.schedules().await.unwrap()[0].missed, 12);
}

/// A stored schedule an operator removes stops firing, and its row stays removed: its
/// scheduler does not declare it again (one declared in code is).
#[tokio::test]
async fn a_removed_stored_schedule_is_not_written_again() {
    let test = TestStore::new("sched_removed", 4).await;
    let queue = support::queue(&test).await;
    let t0 = database_now(&queue).await;
    queue.store_schedule(&every_second("stored")).await.unwrap();
    let stored = queue.stored_schedules().await.unwrap();
    let scheduler = queue.scheduler(stored).unwrap();
    scheduler.declare_at(t0).await.unwrap();
    assert!(queue.remove_schedule("stored").await.unwrap());
    let pass = scheduler.pass_at(t0 + secs(3)).await.unwrap();
    assert_eq!(pass[0].enqueued, 0);
    assert!(
        queue.schedules().await.unwrap().is_empty(),
        "not written again"
    );
    // One declared in code comes back: the code still says it runs.
    let declared = queue.scheduler(vec![every_second("coded")]).unwrap();
    declared.declare_at(t0).await.unwrap();
    assert!(queue.remove_schedule("coded").await.unwrap());
    declared.pass_at(t0 + secs(3)).await.unwrap();
    assert_eq!(queue.schedules().await.unwrap()[0].name, "coded");
}
