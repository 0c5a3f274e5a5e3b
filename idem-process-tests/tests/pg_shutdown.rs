//! Graceful shutdown loses no finished work: a process whose callers were dropped right after
//! their bodies returned `Ok` (each call's completion then goes on in the background) and that
//! is told to stop records every completion before it exits (`idem_core::pending::drain`).

mod pg_support;

use pg_support::{lines, signal, spawn_worker, Schema};
use std::sync::mpsc;
use std::time::Duration;

const KEYS: u32 = 40;

fn next_line(lines: &mpsc::Receiver<String>, starting: &str) -> String {
    let line = lines
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("waiting for {starting}: {e}"));
    assert!(
        line.starts_with(starting),
        "expected {starting}, got {line}"
    );
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_stopped_after_its_callers_left_records_every_completion() {
    use idem_store_postgres::sqlx;
    let schema = Schema::new("drop_ok").await;
    let mut child = spawn_worker("drop-after-ok", &schema.name, &[("keys", KEYS.to_string())]);
    let lines = lines(child.stdout.take().expect("piped stdout"));
    next_line(&lines, "STARTED");
    // Every body runs, so every key is claimed. Their records locked here, each completion
    // waits on its row until after the process was told to stop.
    let mut lock = schema.pool.begin().await.unwrap();
    let locked = sqlx::query(&format!(
        "SELECT 1 FROM \"{}\".idem_records WHERE key LIKE 'drop:%' FOR UPDATE",
        schema.name
    ))
    .execute(&mut *lock)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(locked, u64::from(KEYS), "every key claimed");
    signal(&child, "USR1");
    assert_eq!(
        next_line(&lines, "DROPPED"),
        "DROPPED inline=0",
        "every call dropped while its completion was on its way"
    );
    signal(&child, "TERM");
    next_line(&lines, "STOPPING");
    lock.commit().await.unwrap();
    let drained = next_line(&lines, "drained");
    assert!(child.wait().unwrap().success());
    let completed = schema
        .scalar(
            "SELECT count(*) FROM {schema}.idem_records
             WHERE key LIKE 'drop:%' AND completed_at IS NOT NULL",
        )
        .await;
    assert_eq!(
        completed,
        i64::from(KEYS),
        "every finished body's completion recorded"
    );
    assert_eq!(drained, "drained=true left=0");
    schema.drop_schema().await;
}
