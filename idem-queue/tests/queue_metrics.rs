//! The work queue's metrics on a real PostgreSQL, read back with metrics-util's debugging
//! recorder: attempts by outcome, their duration, the gauges of jobs by state, and the per-call
//! counters of idem-core for the jobs' calls.

mod support;

use idem_queue::{Backoff, Job, NewJob};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::TestStore;

/// Runs `work` on a one-thread runtime (so every task the workers spawn records into this
/// thread's recorder) with a recorder of its own, and returns what it recorded.
fn recorded(
    work: impl std::future::Future<Output = ()>,
) -> Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work)
    });
    snapshotter.snapshot().into_vec()
}

#[test]
fn attempts_durations_and_gauges_are_recorded() {
    let snapshot = recorded(async {
        let test = TestStore::new("q_metrics", 8).await;
        let queue = support::queue(&test).await;
        for key in ["m:1", "m:2", "m:flaky"] {
            let job = NewJob::new(key, &serde_json::json!({}))
                .unwrap()
                .max_attempts(1 + usize::from(key == "m:flaky") as u32);
            let _ = queue.enqueue(job).await.unwrap();
        }
        let failures = Arc::new(AtomicUsize::new(0));
        let workers = queue
            .worker(move |job: Job| {
                let failures = failures.clone();
                async move {
                    if job.key() == "m:flaky" && failures.fetch_add(1, Ordering::SeqCst) == 0 {
                        return Err("the provider said no".to_owned());
                    }
                    Ok(())
                }
            })
            .backoff(Backoff::new(
                Duration::from_millis(10),
                Duration::from_millis(20),
            ))
            .poll_interval(Duration::from_millis(10))
            .start();
        for _ in 0..500 {
            if queue.stats().await.unwrap().done == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(queue.stats().await.unwrap().done, 3);
        workers.shutdown(Duration::from_secs(5)).await;
    });
    let find = |kind: MetricKind, name: &str, label: Option<(&str, &str)>| {
        snapshot
            .iter()
            .filter(|(key, _, _, _)| {
                key.kind() == kind
                    && key.key().name() == name
                    && label.is_none_or(|(l, v)| {
                        key.key().labels().any(|x| x.key() == l && x.value() == v)
                    })
            })
            .map(|(_, _, _, value)| value)
            .collect::<Vec<_>>()
    };
    let counter = |name, label| match find(MetricKind::Counter, name, Some(label)).as_slice() {
        [DebugValue::Counter(n)] => *n,
        other => panic!("{name} {label:?}: {other:?}"),
    };
    assert_eq!(counter("idem_queue_jobs_total", ("outcome", "done")), 3);
    assert_eq!(counter("idem_queue_jobs_total", ("outcome", "retried")), 1);
    assert_eq!(counter("idem_calls_total", ("outcome", "executed")), 3);
    assert_eq!(counter("idem_calls_total", ("outcome", "handler_error")), 1);
    let durations: usize = find(MetricKind::Histogram, "idem_queue_job_seconds", None)
        .iter()
        .map(|v| match v {
            DebugValue::Histogram(values) => values.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(durations, 4, "one per attempt");
    match find(
        MetricKind::Gauge,
        "idem_queue_jobs",
        Some(("state", "done")),
    )
    .as_slice()
    {
        [DebugValue::Gauge(done)] => assert_eq!(done.into_inner(), 3.0),
        other => panic!("done gauge: {other:?}"),
    }
}

/// The schedules' gauges come from their table: the missed ticks a catch-up counted, the same
/// whichever replica asks.
#[test]
fn schedule_gauges_are_read_from_the_table() {
    let snapshot = recorded(async {
        let test = TestStore::new("q_sched_metrics", 4).await;
        let queue = support::queue(&test).await;
        let schedule = idem_queue::Schedule::every("gauged", Duration::from_secs(1))
            .unwrap()
            .catch_up(Duration::from_secs(5));
        let scheduler = queue.scheduler(vec![schedule]).unwrap();
        let t0 = std::time::SystemTime::UNIX_EPOCH
            + Duration::from_secs(
                std::time::SystemTime::now()
                    .duration_since(std::time::SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_secs(),
            );
        scheduler.declare_at(t0).await.unwrap();
        scheduler
            .pass_at(t0 + Duration::from_secs(20))
            .await
            .unwrap();
        // Another replica's queue, which counted nothing itself.
        idem_queue::Queue::new(&test.store)
            .record_schedule_metrics()
            .await
            .unwrap();
    });
    let gauge = snapshot
        .iter()
        .find(|(key, _, _, _)| {
            key.kind() == MetricKind::Gauge && key.key().name() == "idem_schedule_missed"
        })
        .map(|(_, _, _, value)| value);
    match gauge {
        Some(DebugValue::Gauge(missed)) => assert_eq!(missed.into_inner(), 15.0),
        other => panic!("idem_schedule_missed: {other:?}"),
    }
}
