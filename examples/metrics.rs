//! idem's metrics on `/metrics`, in Prometheus' text format (`metrics-exporter-prometheus`):
//! `POST /welcome/{user}` sends a welcome email once per user; every delivery is counted by how
//! it ended.
//!
//! ```text
//! cargo run --example metrics -- --addr 127.0.0.1:5002
//! curl -s -X POST localhost:5002/welcome/42    # {"user":42,"outcome":"executed"}
//! curl -s -X POST localhost:5002/welcome/42    # {"user":42,"outcome":"duplicate"}
//! curl -s localhost:5002/metrics | grep idem_calls_total
//! # idem_calls_total{handler="metrics::send_welcome",outcome="duplicate"} 1
//! # idem_calls_total{handler="metrics::send_welcome",outcome="executed"} 1
//! ```
//!
//! The recorder is the application's choice: idem records through the `metrics` facade
//! (`idem_core::metrics` lists the names), and any exporter picks them up.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use idem_core::{idempotent, MemoryStore};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct App {
    store: MemoryStore,
    emails: AtomicU64,
    metrics: PrometheusHandle,
}

#[idempotent(key = "welcome:{user}", store = app.store)]
async fn send_welcome(app: &App, user: u64) -> Result<(), std::io::Error> {
    app.emails.fetch_add(1, Ordering::SeqCst); // the side effect
    Ok(())
}

async fn welcome(State(app): State<Arc<App>>, Path(user): Path<u64>) -> Json<Value> {
    let outcome = match send_welcome(&app, user).await {
        Ok(outcome) => outcome.kind().to_owned(),
        Err(e) => format!("error: {e}"),
    };
    Json(json!({ "user": user, "outcome": outcome }))
}

async fn metrics(State(app): State<Arc<App>>) -> String {
    app.metrics.render()
}

/// idem's metrics in Prometheus' format. Unknown flags exit with status 2 and the usage.
#[derive(Debug, clap::Parser)]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:5002")]
    addr: String,
}

#[tokio::main]
async fn main() {
    let args: Args = clap::Parser::parse();
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("install the Prometheus recorder");
    let app = Arc::new(App {
        store: MemoryStore::new(),
        emails: AtomicU64::new(0),
        metrics: handle,
    });
    let router = Router::new()
        .route("/welcome/{user}", post(welcome))
        .route("/metrics", get(metrics))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(&args.addr)
        .await
        .expect("bind --addr");
    println!(
        "LISTENING http://{}",
        listener.local_addr().expect("address")
    );
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    idem_examples::serve(listener, router, stop, Duration::from_secs(5))
        .await
        .expect("serve");
}
