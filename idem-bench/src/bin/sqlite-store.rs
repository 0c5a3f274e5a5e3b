//! `SqliteStore` under load, against SQLite's own single-writer bound, in one run:
//! `cargo run --release -p idem-bench --bin sqlite-store -- [--calls 20000] [--callers 16]`.
//!
//! Rows: fresh keys, 90% duplicates, only duplicates (each a fresh database file in a
//! temporary directory, `SqliteStore::open`'s defaults: WAL, `synchronous = FULL`); and the
//! bound: one writer inserting one row per transaction with the same settings, as fast as it
//! can. A fresh idem call writes twice (the claim and the completion), and the store writes
//! concurrent calls' writes in shared transactions (group commit), each sync serving many.

use idem_store_sqlite::SqliteStore;
use std::time::Instant;

/// SqliteStore against SQLite's single-writer bound. Unknown flags exit with status 2.
#[derive(Debug, clap::Parser)]
struct Args {
    /// Calls per row.
    #[arg(long, default_value_t = 20_000)]
    calls: u64,
    /// Concurrent callers (tasks).
    #[arg(long, default_value_t = 16)]
    callers: u64,
}

async fn fresh_store(dir: &std::path::Path, name: &str) -> SqliteStore {
    let store = SqliteStore::open(dir.join(format!("{name}.db")))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    store
}

/// `calls` calls from `callers` tasks; call `i` uses key `i % distinct`. Returns calls/s and
/// how many executed.
async fn run(store: &SqliteStore, calls: u64, callers: u64, distinct: u64) -> (f64, u64) {
    idem_bench::lease_calls(store, callers as usize, calls, move |i| {
        format!("bench:{}", i % distinct)
    })
    .await
}

#[tokio::main]
async fn main() {
    let args: Args = clap::Parser::parse();
    let dir = std::env::temp_dir().join(format!("idem-sqlite-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    println!(
        "### SqliteStore ({} calls per row, {} concurrent callers, WAL, synchronous = FULL)\n",
        args.calls, args.callers
    );
    println!("| workload | calls/s | bodies run |");
    println!("| --- | ---: | ---: |");
    let mut rates = Vec::new();
    for (label, distinct) in [
        ("fresh keys", args.calls),
        ("90% duplicates", args.calls / 10),
        ("only duplicates", 1),
    ] {
        let store = fresh_store(&dir, &label.replace(['%', ' '], "_")).await;
        if distinct == 1 {
            // Warm: the one key is completed before the measured calls.
            let _ = run(&store, 1, 1, 1).await;
        }
        let (rate, executed) = run(&store, args.calls, args.callers, distinct).await;
        let expected = if distinct == 1 { 0 } else { distinct };
        assert_eq!(executed, expected, "{label}: each key's body ran once");
        println!("| {label} | {rate:.0} | {executed} |");
        rates.push(rate);
    }

    // The bound: one writer, one single-row INSERT per transaction, same settings.
    let store = fresh_store(&dir, "bound").await;
    idem_store_sqlite::sqlx::raw_sql("CREATE TABLE processed (key TEXT PRIMARY KEY)")
        .execute(store.pool())
        .await
        .unwrap();
    let started = Instant::now();
    for i in 0..args.calls {
        idem_store_sqlite::sqlx::query(
            "INSERT INTO processed (key) VALUES ($1) ON CONFLICT DO NOTHING",
        )
        .bind(format!("job:{i}"))
        .execute(store.pool())
        .await
        .unwrap();
    }
    let bound = args.calls as f64 / started.elapsed().as_secs_f64();
    println!(
        "| bound: one writer, the hand-written single `INSERT` per transaction | {bound:.0} | |"
    );
    println!(
        "\n- fresh idem calls / the single-writer bound: **{:.2}** (a fresh call writes twice; concurrent calls share commits)\n- duplicates (read only, never queued behind the writer) / the bound: **{:.1}**",
        rates[0] / bound,
        rates[2] / bound
    );
    let _ = std::fs::remove_dir_all(dir);
}
