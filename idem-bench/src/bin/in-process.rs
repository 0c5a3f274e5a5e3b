//! `MemoryStore` against the `idempotent` crate's in-memory store, in one process and one run:
//! `cargo run --release -p idem-bench --bin in-process -- [--calls 400000] [--tasks 16]`.
//!
//! Both run the same workload on a multi-thread runtime (one worker per core): `tasks` tasks
//! take call numbers from one counter; call `i` uses key `bench:{i % distinct}`, so "fresh"
//! gives every call its own key and "duplicates" sends every call to one of 1,000 keys that
//! already completed. Every body is empty, so the rows are the machinery's cost.
//!
//! - **idem**: `#[idempotent(key = "bench:{id}", store = store)]` on `MemoryStore::new()`: key
//!   validation, a span, the claim, the lease renewal, the completion, the metrics.
//! - **`idempotent` 0.3 (memory)**: what its README shows: `try_insert` an entry with a
//!   fingerprint, run the body, `complete` it with an empty cached response (its store is one
//!   task that serves every call through a channel).
//!
//! Last, one spawned task calls each in a loop alone: the time of one call, from a task, at no
//! concurrency.

use ::idempotent::fingerprint::{DefaultFingerprintStrategy, FingerprintStrategy};
use ::idempotent::store::memory::MemoryStore as TheirStore;
use ::idempotent::store::{IdempotencyStore, InsertResult};
use ::idempotent::{CachedResponse, IdempotencyEntry, IdempotencyKey};
use idem_core::{idempotent, MemoryStore, Outcome};
use std::convert::Infallible;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// MemoryStore against the `idempotent` crate. Unknown flags exit with status 2.
#[derive(Debug, clap::Parser)]
struct Args {
    /// Calls per row.
    #[arg(long, default_value_t = 400_000)]
    calls: u64,
    /// Concurrent tasks.
    #[arg(long, default_value_t = 16)]
    tasks: u64,
    /// Run idem's rows only (to profile it alone); the table then shows no ratios.
    #[arg(long)]
    idem_only: bool,
}

/// Keys the duplicate rows pick among (completed before the row starts).
const DISTINCT_DUPLICATES: u64 = 1_000;

#[idempotent(key = "bench:{id}", store = store)]
async fn guarded(store: &MemoryStore, id: u64) -> Result<u64, Infallible> {
    Ok(black_box(id))
}

/// One call through the `idempotent` crate; true when the body ran.
async fn theirs(store: &TheirStore, id: u64) -> bool {
    let key = IdempotencyKey::new(format!("bench:{id}")).expect("key");
    let fingerprint = DefaultFingerprintStrategy.compute("bench", b"");
    let entry = IdempotencyEntry::new(fingerprint, Duration::from_secs(24 * 60 * 60));
    match store.try_insert(&key, entry.clone()).await.expect("insert") {
        InsertResult::Claimed { fencing_token } => {
            black_box(id);
            let response = CachedResponse {
                status_code: 200,
                metadata: Default::default(),
                body: Vec::new().into(),
            };
            store
                .complete(&key, entry.complete(response), fencing_token)
                .await
                .expect("complete");
            true
        }
        InsertResult::Exists(_) => false,
    }
}

/// Call numbers a task takes from the shared counter at a time (so the harness's own counter is
/// not what the tasks contend on).
const CHUNK: u64 = 64;

/// `$calls` calls from `$tasks` tasks, each with its own clone of `$store` as `$s`, call `i`
/// with `$id = i % $distinct`; `$call` says whether the body ran. Returns calls/s and how many
/// bodies ran. (A macro, so each side's call is awaited directly: no boxing in the harness.)
macro_rules! load {
    ($calls:expr, $tasks:expr, $distinct:expr, $store:expr, |$s:ident, $id:ident| $call:expr) => {{
        let (calls, distinct) = ($calls, $distinct);
        let next = Arc::new(AtomicU64::new(0));
        let ran = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let handles: Vec<_> = (0..$tasks)
            .map(|_| {
                let (next, ran, $s) = (next.clone(), ran.clone(), $store.clone());
                tokio::spawn(async move {
                    let mut mine = 0;
                    loop {
                        let from = next.fetch_add(CHUNK, Ordering::Relaxed);
                        if from >= calls {
                            break;
                        }
                        for i in from..(from + CHUNK).min(calls) {
                            let $id = i % distinct;
                            if $call {
                                mine += 1;
                            }
                        }
                    }
                    ran.fetch_add(mine, Ordering::Relaxed);
                })
            })
            .collect();
        for handle in handles {
            handle.await.expect("task");
        }
        let rate = calls as f64 / started.elapsed().as_secs_f64();
        (rate, ran.load(Ordering::Relaxed))
    }};
}

/// Nanoseconds per call, one spawned task alone: call `i` with `$id = i % $distinct`, each
/// running its body when `$fresh` says so (fresh ids, or completed ones).
macro_rules! alone {
    ($calls:expr, $distinct:expr, $fresh:expr, $store:expr, |$s:ident, $id:ident| $call:expr) => {{
        let (calls, distinct, fresh, $s) = ($calls, $distinct, $fresh, $store);
        tokio::spawn(async move {
            let started = Instant::now();
            for i in 0..calls {
                let $id = i % distinct;
                assert_eq!($call, fresh, "a fresh key runs, a completed one does not");
            }
            started.elapsed().as_nanos() as f64 / calls as f64
        })
        .await
        .expect("task")
    }};
}

async fn ours(store: &MemoryStore, id: u64) -> bool {
    matches!(
        guarded(store, id).await.expect("call"),
        Outcome::Executed(_)
    )
}

/// Both stores for a row, and the ids its calls cycle through: with `duplicates`, each store
/// holds [`DISTINCT_DUPLICATES`] completed keys first.
async fn stores(duplicates: bool) -> (MemoryStore, Arc<TheirStore>, u64) {
    let ours_store = MemoryStore::new();
    let their_store = Arc::new(TheirStore::new(1024, Duration::from_secs(3600)));
    if !duplicates {
        return (ours_store, their_store, u64::MAX);
    }
    for id in 0..DISTINCT_DUPLICATES {
        assert!(ours(&ours_store, id).await);
        assert!(theirs(&their_store, id).await);
    }
    (ours_store, their_store, DISTINCT_DUPLICATES)
}

fn main() {
    let args: Args = clap::Parser::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (calls, tasks) = (args.calls, args.tasks);
        println!(
            "In process, {calls} calls per row, {tasks} tasks on a multi-thread runtime ({} workers), empty bodies\n",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        );
        println!("| workload | idem `MemoryStore` (calls/s) | `idempotent` 0.3 memory store (calls/s) | idem / idempotent |");
        println!("| --- | ---: | ---: | ---: |");
        for (name, duplicates) in [("fresh keys", false), ("only duplicates", true)] {
            let (ours_store, their_store, distinct) = stores(duplicates).await;
            let (idem_rate, idem_ran) =
                load!(calls, tasks, distinct, ours_store, |s, id| ours(&s, id).await);
            if args.idem_only {
                println!("| {name} | {idem_rate:.0} | | |");
                continue;
            }
            let (their_rate, their_ran) =
                load!(calls, tasks, distinct, their_store, |s, id| theirs(&s, id).await);
            let expected = if duplicates { 0 } else { calls };
            assert_eq!((idem_ran, their_ran), (expected, expected), "{name}: bodies run");
            println!(
                "| {name} | {idem_rate:.0} | {their_rate:.0} | {:.2} |",
                idem_rate / their_rate
            );
        }
        let single = calls / 4;
        println!("\nOne spawned task alone, {single} calls:\n");
        println!("| workload | idem `MemoryStore` (ns per call) | `idempotent` 0.3 memory store (ns per call) | idempotent / idem |");
        println!("| --- | ---: | ---: | ---: |");
        for (name, duplicates) in [("fresh keys", false), ("only duplicates", true)] {
            let (ours_store, their_store, distinct) = stores(duplicates).await;
            let ours_alone = alone!(single, distinct, !duplicates, ours_store, |s, id| ours(&s, id).await);
            let their_alone = alone!(single, distinct, !duplicates, their_store, |s, id| theirs(&s, id).await);
            println!(
                "| {name} | {ours_alone:.0} | {their_alone:.0} | {:.2} |",
                their_alone / ours_alone
            );
        }
    });
}
