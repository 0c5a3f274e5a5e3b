//! What `#[idempotent]` adds to a call on the embedded store, measured side by side with the
//! bare function: `cargo bench -p idem-bench --bench overhead`.
//!
//! Each sample runs its iterations inside one `block_on`, so runtime entry is not counted.

use criterion::{criterion_group, criterion_main, Criterion};
use idem_core::{idempotent, ClaimRequest, Key, MemoryStore, Store};
use std::convert::Infallible;
use std::hint::black_box;
use std::time::{Duration, Instant};

async fn bare(store: &MemoryStore, id: u64) -> Result<u64, Infallible> {
    let _ = store;
    Ok(black_box(id))
}

#[idempotent(key = "bench:{id}", store = store)]
async fn guarded(store: &MemoryStore, id: u64) -> Result<u64, Infallible> {
    Ok(black_box(id))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn overhead(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("call");
    group.measurement_time(Duration::from_secs(4));
    group.bench_function("bare", |b| {
        let store = MemoryStore::new();
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for i in 0..iters {
                    black_box(bare(&store, i).await.unwrap());
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("idempotent_fresh", |b| {
        b.iter_custom(|iters| {
            // A new store per sample, so the map's size matches what one sample adds.
            let store = MemoryStore::new();
            rt.block_on(async {
                let start = Instant::now();
                for i in 0..iters {
                    let _ = black_box(guarded(&store, i).await.unwrap());
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("idempotent_duplicate", |b| {
        let store = MemoryStore::new();
        let _ = rt.block_on(async { guarded(&store, 7).await.unwrap() });
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let _ = black_box(guarded(&store, 7).await.unwrap());
                }
                start.elapsed()
            })
        })
    });
    group.finish();

    let mut parts = c.benchmark_group("parts");
    parts.measurement_time(Duration::from_secs(3));
    parts.bench_function("render_key", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            black_box(idem_core::__private_v1::render_key(format_args!(
                "bench:{}",
                black_box(i)
            )))
        })
    });
    // A usual template: a number and a date, about 25 bytes rendered.
    parts.bench_function("render_key_usual", |b| {
        let mut i = 1_000_000u64;
        b.iter(|| {
            i += 1;
            black_box(idem_core::__private_v1::render_key(format_args!(
                "reminder:{}:{}",
                black_box(i),
                black_box("2026-11-02")
            )))
        })
    });
    parts.bench_function("store_claim_fresh", |b| {
        b.iter_custom(|iters| {
            let store = MemoryStore::new();
            let keys: Vec<Key> = (0..iters)
                .map(|i| Key::new(format!("k{i}")).unwrap())
                .collect();
            rt.block_on(async {
                let start = Instant::now();
                for key in &keys {
                    black_box(
                        store
                            .claim(ClaimRequest {
                                key,
                                fingerprint: None,
                                lease: Duration::from_secs(30),
                                token: None,
                            })
                            .await
                            .unwrap(),
                    );
                }
                start.elapsed()
            })
        })
    });
    parts.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
