//! `SqliteStore`: idempotency for the processes of one machine, in one durable file. A nightly
//! report job is started by cron and, by mistake, by a systemd timer too: four deliveries, each
//! with a store of its own on the file as a process has, arrive at the same moment, and the report is written once.
//!
//! ```text
//! cargo run --example sqlite                 # a database in a temporary directory
//! cargo run --example sqlite -- idem.db      # or in a file of your own (run it twice)
//! ```

use std::path::PathBuf;

use clap::Parser;
use idem_core::{idempotent, Outcome};
use idem_store_sqlite::SqliteStore;

struct App {
    store: SqliteStore,
    reports: PathBuf,
}

/// Writes the day's report (appends a line, so a second run would show).
#[idempotent(key = "nightly-report:{day}", store = app.store, lease = "1m")]
async fn nightly_report(app: &App, day: &str) -> Result<(), std::io::Error> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&app.reports)?;
    writeln!(file, "report for {day}")
}

#[derive(Parser)]
struct Args {
    /// The database file (default: a new one in a temporary directory).
    path: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = Args::parse().path.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("idem-sqlite-example-{}.db", std::process::id()))
    });
    // The store: one file, created if missing, in WAL mode, every claim fsynced before a body
    // runs. Each process of the machine opens the same file.
    let store = SqliteStore::open(&path).await?;
    store.migrate().await?;
    let reports = path.with_extension("reports.txt");
    println!(
        "database {}, reports in {}",
        path.display(),
        reports.display()
    );

    // Four deliveries at once, each with a store of its own on the file, as four processes.
    let mut deliveries = Vec::new();
    for n in 1..=4 {
        let app = App {
            store: SqliteStore::open(&path).await?,
            reports: reports.clone(),
        };
        deliveries.push(tokio::spawn(async move {
            (n, nightly_report(&app, "2026-11-01").await)
        }));
    }
    for delivery in deliveries {
        let (n, outcome) = delivery.await?;
        let what = match outcome {
            Ok(Outcome::Executed(())) => "wrote the report".to_owned(),
            Ok(Outcome::Duplicate { .. }) => "already written: skipped".to_owned(),
            Ok(Outcome::InProgress { .. }) => "another delivery is writing it: skipped".to_owned(),
            Err(e) => format!("failed: {e}"),
        };
        println!("delivery {n}: {what}");
    }
    let lines = std::fs::read_to_string(&reports)?.lines().count();
    println!("reports written: {lines}");
    Ok(())
}
