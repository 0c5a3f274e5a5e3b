//! Crashes in transactional mode: worker processes whose handlers write their run inside the
//! call's transaction are killed with SIGKILL mid-body. A fresh key's record is written
//! completed by the claim itself (the commit is the completion), so this proves that such a
//! record never outlives a killed transaction: every key's run commits exactly once, with its
//! record, and a key whose body was cut runs again. Workers of odd seed build their store with
//! `claim_with_begin` (a fresh key's claim sent with the BEGIN), the others with the default,
//! on one table, as in a rolling deploy.

mod pg_support;

use pg_support::{spawn_keyed_worker_with, summary, xorshift, Schema};
use std::process::Child;
use std::time::{Duration, Instant};

const KEYS: u32 = 300;
const TASKS: usize = 8;
const WORKERS: usize = 3;
const KILLS: usize = 5;
/// Fresh keys for the last worker, killed mid-run right before the sweep.
const LAST_KEYS: u32 = 60;

fn tx_worker(schema: &str, seed: u64, first: u32, keys: u32, work_ms: u64) -> Child {
    let with_begin = ("claim-with-begin", (seed % 2 == 1).to_string());
    spawn_keyed_worker_with(
        "tx-crash",
        schema,
        seed,
        (first, keys),
        TASKS,
        work_ms,
        &[with_begin],
    )
}

async fn wait_summary(child: Child) -> [u64; 5] {
    tokio::task::spawn_blocking(move || summary(child))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_transactional_workers_commit_each_run_exactly_once() {
    let schema = Schema::new("txcrash").await;
    let mut seed = 40u64;
    let mut live: Vec<Child> = (0..WORKERS)
        .map(|_| {
            seed += 1;
            tx_worker(&schema.name, seed, 0, KEYS, 300)
        })
        .collect();
    let mut random = xorshift(0x9E37_79B9_7F4A_7C15u64);
    let mut killed = Vec::new();
    for _ in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(300 + random(400))).await;
        let mut victim = live.remove(random(live.len() as u64) as usize);
        killed.push(victim.id() as i32);
        victim.kill().expect("SIGKILL"); // std's kill is SIGKILL on Unix
        victim.wait().unwrap();
        seed += 1;
        live.push(tx_worker(&schema.name, seed, 0, KEYS, 300));
    }
    // Every live worker delivers every key: each is run by exactly one of them, or was
    // committed before by a worker killed later.
    let mut executed_live = 0;
    for worker in live {
        let [executed, _, in_progress, errors, lost] = wait_summary(worker).await;
        assert_eq!(
            (in_progress, errors, lost),
            (0, 0, 0),
            "a transactional claim waits for the row, it is never in progress elsewhere"
        );
        executed_live += executed;
    }
    let by_killed = |pids: &[i32], first: u32, keys: u32| {
        format!(
            "SELECT count(*) FROM {{schema}}.executions WHERE pid = ANY('{{{}}}'::int[])
               AND substr(key, 4)::int >= {first} AND substr(key, 4)::int < {}",
            pids.iter()
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            first + keys
        )
    };
    let committed_by_killed = schema.scalar(&by_killed(&killed, 0, KEYS)).await;
    assert_eq!(
        executed_live as i64 + committed_by_killed,
        i64::from(KEYS),
        "each key ran once: by a live worker, or by a killed one before it was killed"
    );

    // One last worker takes fresh keys with long bodies, and is killed once it has committed
    // some: the bodies it had in flight are cut, their transactions rolled back.
    let mut last = tx_worker(&schema.name, seed + 1, KEYS, LAST_KEYS, 1500);
    let last_pid = last.id() as i32;
    let started = Instant::now();
    while schema
        .scalar(&by_killed(&[last_pid], KEYS, LAST_KEYS))
        .await
        == 0
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the last worker committed nothing in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    last.kill().expect("SIGKILL");
    last.wait().unwrap();
    let committed_by_last = schema
        .scalar(&by_killed(&[last_pid], KEYS, LAST_KEYS))
        .await;
    assert!(
        committed_by_last < i64::from(LAST_KEYS),
        "the last worker was killed before it finished"
    );

    // The sweep delivers every key once more: it runs exactly the keys no transaction
    // committed, and finds every other one completed.
    let sweep = tx_worker(&schema.name, seed + 2, 0, KEYS + LAST_KEYS, 0);
    let [executed, duplicate, in_progress, errors, lost] = wait_summary(sweep).await;
    assert_eq!((in_progress, errors, lost), (0, 0, 0));
    assert_eq!(
        executed as i64,
        i64::from(LAST_KEYS) - committed_by_last,
        "the sweep ran exactly the keys whose runs were cut"
    );
    assert_eq!(executed + duplicate, u64::from(KEYS + LAST_KEYS));

    let all = i64::from(KEYS + LAST_KEYS);
    assert_eq!(
        schema
            .scalar("SELECT count(*) FROM {schema}.executions WHERE key LIKE 'tx:%'")
            .await,
        all,
        "one committed run per key"
    );
    assert_eq!(
        schema
            .scalar("SELECT count(DISTINCT key) FROM {schema}.executions WHERE key LIKE 'tx:%'")
            .await,
        all
    );
    assert_eq!(
        schema
            .scalar(
                "SELECT count(*) FROM {schema}.idem_records
                 WHERE key LIKE 'tx:%' AND completed_at IS NOT NULL"
            )
            .await,
        all,
        "every key's record committed completed, with its run"
    );
    eprintln!(
        "tx crash: {} killed workers committed {committed_by_killed} runs; the last one \
         {committed_by_last} of {LAST_KEYS} before it was killed; the sweep ran {executed}",
        KILLS
    );
    schema.drop_schema().await;
}
