//! The metrics a call records, read back with `metrics-util`'s debugging recorder.

use idem_core::{Call, MemoryStore};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::{CompositeKey, MetricKind};
use std::time::Duration;

/// What a recorder holds: each metric and its value.
type Snapshot = Vec<(CompositeKey, DebugValue)>;

/// Runs `f` on a current-thread runtime with a recorder of its own, and returns what it
/// recorded (one snapshot: taking one drains the counters).
fn recorded<F: std::future::Future<Output = ()>>(f: impl FnOnce() -> F) -> Snapshot {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f())
    });
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (key, value))
        .collect()
}

/// The value of counter `name` with labels `labels`, or 0.
fn counter(snapshot: &Snapshot, name: &str, labels: &[(&str, &str)]) -> u64 {
    snapshot
        .iter()
        .find_map(|(key, value)| {
            let k = key.key();
            let same = key.kind() == MetricKind::Counter
                && k.name() == name
                && labels.iter().all(|(l, v)| {
                    k.labels()
                        .any(|label| label.key() == *l && label.value() == *v)
                });
            match (same, value) {
                (true, DebugValue::Counter(n)) => Some(*n),
                _ => None,
            }
        })
        .unwrap_or(0)
}

fn histogram_count(snapshot: &Snapshot, name: &str) -> usize {
    snapshot
        .iter()
        .filter_map(|(key, value)| match value {
            DebugValue::Histogram(values) if key.key().name() == name => Some(values.len()),
            _ => None,
        })
        .sum()
}

#[test]
fn calls_are_counted_by_handler_and_outcome_with_claim_and_body_times() {
    let snapshot = recorded(|| async {
        let store = MemoryStore::new();
        let ok = || async { Ok::<_, std::io::Error>(()) };
        let _ = Call::new(&store, "m:1").name("mailer").run(ok()).await;
        let _ = Call::new(&store, "m:1").name("mailer").run(ok()).await;
        let _ = Call::new(&store, "m:2")
            .name("mailer")
            .run(async { Err::<(), _>(std::io::Error::other("smtp down")) })
            .await;
        let _ = Call::new(&store, "").name("mailer").run(ok()).await;
    });
    let calls = |outcome| {
        counter(
            &snapshot,
            "idem_calls_total",
            &[("handler", "mailer"), ("outcome", outcome)],
        )
    };
    assert_eq!(calls("executed"), 1);
    assert_eq!(calls("duplicate"), 1);
    assert_eq!(calls("handler_error"), 1);
    assert_eq!(calls("invalid_key"), 1);
    assert_eq!(
        histogram_count(&snapshot, "idem_claim_seconds"),
        3,
        "one per claim sent"
    );
    assert_eq!(
        histogram_count(&snapshot, "idem_body_seconds"),
        2,
        "the two bodies that ran"
    );
}

#[test]
fn in_progress_panicked_and_dropped_calls_are_counted() {
    let snapshot = recorded(|| async {
        let store = MemoryStore::new();
        // A run in progress, and a second delivery meanwhile.
        let held = Call::new(&store, "m:3").name("slow").run(async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, std::io::Error>(())
        });
        let dropped = tokio::time::timeout(Duration::from_millis(50), held);
        let second = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let _ = Call::new(&store, "m:3")
                .name("slow")
                .run(async { Ok::<_, std::io::Error>(()) })
                .await;
        };
        let (timed_out, ()) = tokio::join!(dropped, second);
        assert!(
            timed_out.is_err(),
            "the caller gave up: the call was dropped"
        );
        let store = store.clone();
        let panicked = async move {
            Call::new(&store, "m:4")
                .name("slow")
                .run(async {
                    if true {
                        panic!("handler bug (on purpose)");
                    }
                    Ok::<_, std::io::Error>(())
                })
                .await
        };
        let caught = futures_catch(panicked).await;
        assert!(caught.is_err());
    });
    let calls = |outcome| {
        counter(
            &snapshot,
            "idem_calls_total",
            &[("handler", "slow"), ("outcome", outcome)],
        )
    };
    assert_eq!(calls("in_progress"), 1);
    assert_eq!(calls("dropped"), 1);
    assert_eq!(calls("panicked"), 1);
}

/// Runs a future in a task of its own and reports whether it panicked.
async fn futures_catch<F: std::future::Future + 'static>(f: F) -> Result<F::Output, ()>
where
    F::Output: 'static,
{
    tokio::task::LocalSet::new()
        .run_until(async move { tokio::task::spawn_local(f).await.map_err(|_| ()) })
        .await
}
