//! Duplicate storm: 4 processes with 24 tasks each deliver every one of 10,000 keys twice,
//! concurrently (8 deliveries per key); every key's body runs exactly once.

mod pg_support;

use pg_support::{spawn_worker, summary, Schema};

const KEYS: u64 = 10_000;
const PROCESSES: usize = 4;
const ROUNDS_PER_PROCESS: u64 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_keys_delivered_eight_times_run_once_each() {
    let schema = Schema::new("storm").await;
    let workers: Vec<_> = (0..PROCESSES)
        .map(|i| {
            spawn_worker(
                "storm",
                &schema.name,
                &[
                    ("keys", KEYS.to_string()),
                    ("rounds", ROUNDS_PER_PROCESS.to_string()),
                    ("tasks", "24".into()),
                    ("seed", (i as u64 * 7919 + 1).to_string()),
                ],
            )
        })
        .collect();
    let mut totals = [0u64; 5];
    for worker in workers {
        let counts = tokio::task::spawn_blocking(move || summary(worker))
            .await
            .unwrap();
        for (total, count) in totals.iter_mut().zip(counts) {
            *total += count;
        }
    }
    let [executed, duplicate, in_progress, _errors, lost] = totals;
    let deliveries = KEYS * ROUNDS_PER_PROCESS * PROCESSES as u64;
    assert_eq!(
        executed + duplicate + in_progress,
        deliveries,
        "every delivery answered"
    );
    assert_eq!(executed, KEYS, "exactly one delivery per key executed");
    assert_eq!(lost, 0);
    assert_eq!(
        schema
            .scalar("SELECT count(*) FROM {schema}.executions")
            .await,
        KEYS as i64,
        "bodies ran 10,000 times in all"
    );
    assert_eq!(
        schema
            .scalar("SELECT count(*) FROM (SELECT key FROM {schema}.executions GROUP BY key HAVING count(*) > 1) twice")
            .await,
        0,
        "no body ran twice"
    );
    assert_eq!(
        schema
            .scalar("SELECT count(*) FROM {schema}.idem_records WHERE completed_at IS NOT NULL")
            .await,
        KEYS as i64,
        "every key is recorded completed"
    );
    eprintln!(
        "storm: {deliveries} deliveries by {PROCESSES} processes: {executed} executed, \
         {duplicate} duplicates, {in_progress} in progress elsewhere"
    );
    schema.drop_schema().await;
}
