//! Trace context from enqueue to run (idem-queue's `opentelemetry` feature), through a real
//! OpenTelemetry pipeline: `tracing` spans exported by `tracing-opentelemetry` to an in-memory
//! exporter. A job enqueued inside a traced span carries that span's W3C `traceparent`; the
//! span that runs the job links to it, and the handler can read it.

use idem_queue::{Job, JobResult, NewJob, Queue};
use idem_store_postgres::testing::TestStore;
use opentelemetry::trace::{TraceContextExt, TracerProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use std::time::Duration;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_span_links_to_the_span_that_enqueued_it() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("idem-test")));
    tracing::subscriber::set_global_default(subscriber).expect("the test's subscriber");

    let test = TestStore::new("trace_context", 8).await;
    let queue = Queue::new(&test.store);
    queue.migrate().await.unwrap();
    let request = tracing::info_span!("POST /reports");
    let enqueuer = request.context().span().span_context().clone();
    assert!(enqueuer.is_valid(), "the span is traced");
    let job = request.in_scope(|| NewJob::new("report:1", &1).unwrap());
    let _ = queue.enqueue(job).await.unwrap();
    // A job made outside any traced span carries none.
    let _ = queue
        .enqueue(NewJob::new("report:2", &2).unwrap())
        .await
        .unwrap();
    drop(request);

    let workers = queue
        .worker(
            |job: Job| async move { Ok::<_, std::io::Error>(job.traceparent().map(str::to_owned)) },
        )
        .start();
    for key in ["report:1", "report:2"] {
        let done = queue
            .wait_result(key, Duration::from_secs(20))
            .await
            .unwrap();
        assert!(matches!(done, Some(JobResult::Done(_))), "{key}: {done:?}");
    }
    workers.shutdown(Duration::from_secs(5)).await;
    let expected = format!("00-{}-{}-01", enqueuer.trace_id(), enqueuer.span_id());
    assert_eq!(
        queue.result("report:1").await.unwrap(),
        Some(JobResult::Done(Some(serde_json::json!(expected)))),
        "the handler reads the enqueuer's traceparent"
    );
    assert_eq!(
        queue.result("report:2").await.unwrap(),
        Some(JobResult::Done(None))
    );

    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let runs: Vec<_> = spans
        .iter()
        .filter(|span| span.name == "idem::queue::job")
        .collect();
    assert_eq!(runs.len(), 2, "one span per job run");
    let linked: Vec<_> = runs
        .iter()
        .filter(|span| {
            span.links.links.iter().any(|link| {
                link.span_context.trace_id() == enqueuer.trace_id()
                    && link.span_context.span_id() == enqueuer.span_id()
            })
        })
        .collect();
    assert_eq!(linked.len(), 1, "report:1's run links to POST /reports");
}
