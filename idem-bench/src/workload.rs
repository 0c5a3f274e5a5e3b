//! The workloads, driven by idem (lease and transactional mode) or written by hand with sqlx.

use idem_core::{Call, Outcome};
use idem_store_postgres::sqlx::{self, Connection, PgConnection, PgPool, Row};
use idem_store_postgres::PgStore;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Completed keys present before each run; duplicates pick among them.
pub const EXISTING_KEYS: u64 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `#[idempotent]` lease mode on `PgStore`'s defaults: claim, (empty) body, complete, on
    /// connections held from the pool, claims and completions batched.
    Lease,
    /// Lease mode tuned: `dedicated_connections` and `max_batches_in_flight` chosen for this
    /// machine (see `tuned_store`).
    LeaseTuned,
    /// Lease mode with `through_pool()`: a pooled connection per statement, no batching (the
    /// default before batching).
    LeaseThroughPool,
    /// `#[idempotent(transaction = tx)]`: BEGIN, claim, body, complete, COMMIT.
    Transactional,
    /// Transactional mode with `claim_with_begin(true)`: a fresh key's claim goes out with the
    /// BEGIN.
    TransactionalWithBegin,
    /// Idempotency by hand: `INSERT .. ON CONFLICT DO NOTHING` on a table of keys, then the body.
    HandWritten,
    /// idem's two lease-mode statements sent straight through sqlx's pool, without idem's
    /// runtime: what idem adds on top of its driver.
    SqlxSameStatements,
    /// That `INSERT` on one connection per caller, without sqlx's pool: what the
    /// pool adds (it pings each connection when it is returned).
    HandWrittenNoPool,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Lease => "idem lease (default)",
            Mode::LeaseTuned => "idem lease, tuned",
            Mode::LeaseThroughPool => "idem lease, through the pool",
            Mode::Transactional => "idem transactional",
            Mode::TransactionalWithBegin => "idem transactional, claim with BEGIN",
            Mode::HandWritten => "hand-written INSERT .. ON CONFLICT",
            Mode::SqlxSameStatements => "sqlx: idem lease SQL, no idem runtime",
            Mode::HandWrittenNoPool => "hand-written, one connection per caller (no pool)",
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Measured {
    pub calls: u64,
    pub elapsed: Duration,
    /// Per-call latencies in microseconds, sorted.
    pub latencies_us: Vec<u64>,
    pub executed: u64,
}

impl Measured {
    pub fn rate(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }

    pub fn percentile(&self, p: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let i = ((self.latencies_us.len() - 1) as f64 * p).round() as usize;
        self.latencies_us[i] as f64 / 1000.0
    }
}

/// Deterministic per-task randomness.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Runs `calls` calls with `concurrency` tasks; a share `dup_ratio` of them use an existing key.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    mode: Mode,
    url: &str,
    store: &PgStore,
    hand_table: &str,
    concurrency: usize,
    calls: u64,
    dup_ratio: f64,
    run_id: u64,
) -> Measured {
    let next = Arc::new(AtomicU64::new(0));
    let executed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let (store, next, executed) = (store.clone(), next.clone(), executed.clone());
            let hand_sql =
                format!("INSERT INTO {hand_table} (key) VALUES ($1) ON CONFLICT DO NOTHING");
            let url = url.to_owned();
            tokio::spawn(async move {
                let mut own = match mode {
                    Mode::HandWrittenNoPool => {
                        Some(PgConnection::connect(&url).await.expect("connect"))
                    }
                    _ => None,
                };
                let mut rng = Rng::new(run_id * 1000 + task as u64 + 1);
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= calls {
                        return latencies;
                    }
                    let key = if (rng.below(1_000_000) as f64) < dup_ratio * 1_000_000.0 {
                        format!("dup:{}", rng.below(EXISTING_KEYS))
                    } else {
                        format!("fresh:{run_id}:{i}")
                    };
                    let t0 = Instant::now();
                    let ran = match own.as_mut() {
                        Some(conn) => {
                            sqlx::query(&hand_sql)
                                .bind(key)
                                .execute(&mut *conn)
                                .await
                                .expect("insert")
                                .rows_affected()
                                == 1
                        }
                        None => call(mode, &store, store.pool(), &hand_sql, key).await,
                    };
                    latencies.push(t0.elapsed().as_micros() as u64);
                    if ran {
                        executed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let mut latencies_us = Vec::with_capacity(calls as usize);
    for task in tasks {
        latencies_us.extend(task.await.expect("task"));
    }
    let elapsed = started.elapsed();
    latencies_us.sort_unstable();
    Measured {
        calls,
        elapsed,
        latencies_us,
        executed: executed.load(Ordering::Relaxed),
    }
}

/// One call; returns whether the body ran.
async fn call(mode: Mode, store: &PgStore, pool: &PgPool, hand_sql: &str, key: String) -> bool {
    match mode {
        Mode::Lease | Mode::LeaseTuned | Mode::LeaseThroughPool => {
            let outcome = Call::new(store, key)
                .run(async { Ok::<_, Infallible>(()) })
                .await
                .expect("lease call");
            matches!(outcome, Outcome::Executed(()))
        }
        Mode::Transactional | Mode::TransactionalWithBegin => {
            let outcome = Call::new(store, key)
                .run_in_transaction(|_tx| Box::pin(async { Ok::<_, Infallible>(()) }))
                .await
                .expect("transactional call");
            matches!(outcome, Outcome::Executed(()))
        }
        Mode::SqlxSameStatements => {
            let row = sqlx::query(store.claim_sql())
                .bind(&key)
                .bind(None::<String>)
                .bind(30_000_000i64)
                .bind(idem_core::ClaimToken::random().0 as i64)
                .bind("bench")
                .bind(idem_core::holder())
                .fetch_one(pool)
                .await
                .expect("claim");
            let inserted: bool = row.get(0);
            if inserted {
                let fence: i64 = row.get(1);
                sqlx::query(store.complete_sql())
                    .bind(&key)
                    .bind(fence)
                    .bind(None::<Vec<u8>>)
                    .bind(86_400_000_000i64)
                    .execute(pool)
                    .await
                    .expect("complete");
            }
            inserted
        }
        Mode::HandWrittenNoPool => unreachable!("runs on its own connection"),
        Mode::HandWritten => {
            let inserted = sqlx::query(hand_sql)
                .bind(key)
                .execute(pool)
                .await
                .expect("hand-written insert")
                .rows_affected();
            inserted == 1 // then the body would run
        }
    }
}
