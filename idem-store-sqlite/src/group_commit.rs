//! Group commit: the writes of concurrent calls share one write transaction, and so one
//! fsync. SQLite lets one writer in at a time and, with `synchronous = FULL`, each write
//! transaction waits for the disk; a claim and a completion each in a transaction of their own
//! would bound the store at half the transactions the disk can sync. Instead every claim that
//! must write (the key fresh or lapsed) and every completion is handed to one writer task per
//! store, which takes whatever has queued, runs it in one transaction that holds the write lock
//! from its start, commits, and only then answers each caller: a claim is on disk before its
//! body runs, as before, and a completion before its caller hears it applied. The more callers
//! wait, the more writes share a sync, as the PostgreSQL store's batches share a statement.
//!
//! A write that fails rolls its transaction back; it is answered with its error and the others
//! run again in a new transaction, so one bad write fails only its own call. A commit that
//! fails fails every write of the batch: none of them is known to be on disk, and a claim that
//! is not known to hold must not run its body. A caller that went away while its write waited
//! is still written (a completion must be; a claim is undone by idem-core's
//! [`abandon_claim`](idem_core::Store::abandon_claim), which sends the claim again behind the
//! first, through the same queue, and releases it).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_core::{Claim, Fence, Fenced, StoreError};
use sqlx::{Row, Sqlite, SqlitePool, Transaction};
use tokio::sync::{mpsc, oneshot};

use crate::record::{applied, at, error_message, is_busy, judge, micros, now_us, store_error};
use crate::sql::Sql;
use crate::write_transaction::write_transaction;

/// The most writes one transaction takes: the write lock is held for the whole batch, against
/// other processes on the file too.
const MOST_PER_BATCH: usize = 256;

/// A claim of a key that was fresh or lapsed when last read.
#[derive(Debug)]
pub(crate) struct ClaimWrite {
    pub key: String,
    pub scope: String,
    pub fingerprint: Option<String>,
    pub token: Option<i64>,
    pub lease: Duration,
}

/// A completion.
#[derive(Debug)]
pub(crate) struct CompleteWrite {
    pub key: String,
    pub scope: String,
    pub fence: i64,
    pub keep: Duration,
    pub output: Option<Vec<u8>>,
}

/// A write the writer runs.
#[derive(Debug)]
enum Write {
    Claim(ClaimWrite),
    Complete(CompleteWrite),
}

/// What a write answers.
enum Written {
    Claim(Claim),
    Complete(Fenced),
}

type Reply = oneshot::Sender<Result<Written, StoreError>>;

/// One store's writer: a thread of its own (with a runtime of its own), started on the first
/// write, so that it serves callers on any runtime and shuts down with none of theirs; it
/// stops when the store's last clone is dropped.
#[derive(Debug)]
pub(crate) struct Writer {
    pool: SqlitePool,
    sql: Arc<Sql>,
    queue: Mutex<Option<mpsc::UnboundedSender<(Write, Reply)>>>,
}

impl Writer {
    pub fn new(pool: SqlitePool, sql: Arc<Sql>) -> Writer {
        Writer {
            pool,
            sql,
            queue: Mutex::new(None),
        }
    }

    /// Claims `claim`'s key under the write lock, once committed.
    pub async fn claim(&self, claim: ClaimWrite) -> Result<Claim, StoreError> {
        match self.submit(Write::Claim(claim)).await? {
            Written::Claim(claim) => Ok(claim),
            Written::Complete(_) => unreachable!("a claim is answered with a claim"),
        }
    }

    /// Completes a record, once committed.
    pub async fn complete(&self, completion: CompleteWrite) -> Result<Fenced, StoreError> {
        match self.submit(Write::Complete(completion)).await? {
            Written::Complete(fenced) => Ok(fenced),
            Written::Claim(_) => unreachable!("a completion is answered with a completion"),
        }
    }

    async fn submit(&self, write: Write) -> Result<Written, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.send(write, reply);
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::msg(
                "the SQLite store's writer stopped before it answered; the write may or may not \
                 be on disk",
            ))
        })
    }

    /// Queues the write, starting the writer if there is none (or it died: a panic).
    fn send(&self, write: Write, reply: Reply) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let job = match queue.as_ref() {
            Some(queue) => match queue.send((write, reply)) {
                Ok(()) => return,
                Err(mpsc::error::SendError(job)) => job,
            },
            None => (write, reply),
        };
        let (sender, jobs) = mpsc::unbounded_channel();
        sender
            .send(job)
            .unwrap_or_else(|_| unreachable!("the receiver is here"));
        let (pool, sql) = (self.pool.clone(), Arc::clone(&self.sql));
        let started = std::thread::Builder::new()
            .name("idem-sqlite-writer".to_owned())
            .spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(write_batches(pool, sql, jobs)),
                    // The queued writes' callers hear that the writer stopped.
                    Err(e) => tracing::error!(error = %e, "the SQLite store's writer could not start a runtime"),
                }
            });
        if let Err(e) = started {
            tracing::error!(error = %e, "the SQLite store's writer thread could not start");
        }
        *queue = Some(sender);
    }
}

/// The writer: takes what has queued (at most [`MOST_PER_BATCH`]) and writes it as one
/// transaction, until every sender is gone.
async fn write_batches(
    pool: SqlitePool,
    sql: Arc<Sql>,
    mut jobs: mpsc::UnboundedReceiver<(Write, Reply)>,
) {
    let mut batch = Vec::new();
    while let Some(first) = jobs.recv().await {
        batch.push(first);
        while batch.len() < MOST_PER_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        write_batch(&pool, &sql, &mut batch).await;
    }
}

/// Writes `batch` in one transaction and answers each write; leaves `batch` empty.
async fn write_batch(pool: &SqlitePool, sql: &Sql, batch: &mut Vec<(Write, Reply)>) {
    while !batch.is_empty() {
        let mut tx = match write_transaction(pool, &sql.lock).await {
            Ok(tx) => tx,
            Err(e) => return fail_all(batch, e),
        };
        let mut answers = Vec::with_capacity(batch.len());
        let mut failed = None;
        for (at, (write, _)) in batch.iter().enumerate() {
            match run(&mut tx, sql, write).await {
                Ok(answer) => answers.push(answer),
                Err(e) => {
                    failed = Some((at, e));
                    break;
                }
            }
        }
        if let Some((at, e)) = failed {
            // The others run again, without it, in a transaction of their own.
            drop(tx.rollback().await);
            let (_, reply) = batch.remove(at);
            let _ = reply.send(Err(store_error(e)));
            continue;
        }
        match tx.commit().await {
            Ok(()) => {
                for ((_, reply), answer) in batch.drain(..).zip(answers) {
                    // A caller that went away: see the module's documentation.
                    let _ = reply.send(Ok(answer));
                }
            }
            Err(e) => fail_all(batch, e),
        }
        return;
    }
}

/// Answers every write of `batch` with `e`.
fn fail_all(batch: &mut Vec<(Write, Reply)>, e: sqlx::Error) {
    let shared = Arc::new(e);
    for (_, reply) in batch.drain(..) {
        let _ = reply.send(Err(store_error_shared(&shared)));
    }
}

/// `store_error` for an error every write of a batch shares.
fn store_error_shared(e: &Arc<sqlx::Error>) -> StoreError {
    #[derive(Debug)]
    struct Shared(Arc<sqlx::Error>);
    impl std::fmt::Display for Shared {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.fmt(f)
        }
    }
    impl std::error::Error for Shared {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.0.source()
        }
    }
    let busy = is_busy(e);
    StoreError::new(error_message(busy), Shared(Arc::clone(e)))
}

async fn run(
    tx: &mut Transaction<'static, Sqlite>,
    sql: &Sql,
    write: &Write,
) -> Result<Written, sqlx::Error> {
    Ok(match write {
        Write::Claim(claim) => Written::Claim(
            claim_locked(
                tx,
                sql,
                &ClaimParts {
                    key: &claim.key,
                    scope: &claim.scope,
                    fingerprint: claim.fingerprint.as_deref(),
                    token: claim.token,
                    lease: claim.lease,
                },
            )
            .await?,
        ),
        Write::Complete(done) => {
            let written = sqlx::query(&sql.complete)
                .bind(&done.key)
                .bind(&done.scope)
                .bind(done.fence)
                .bind(now_us())
                .bind(micros(done.keep))
                .bind(done.output.as_deref())
                .execute(&mut **tx)
                .await?;
            Written::Complete(applied(written.rows_affected()))
        }
    })
}

/// A claim's parts, as its statements bind them.
pub(crate) struct ClaimParts<'a> {
    pub key: &'a str,
    pub scope: &'a str,
    pub fingerprint: Option<&'a str>,
    pub token: Option<i64>,
    pub lease: Duration,
}

/// The claim inside `tx`, a transaction holding SQLite's write lock: the record is read again
/// and, fresh or lapsed, claimed with a new fence.
pub(crate) async fn claim_locked(
    tx: &mut Transaction<'static, Sqlite>,
    sql: &Sql,
    claim: &ClaimParts<'_>,
) -> Result<Claim, sqlx::Error> {
    let row = sqlx::query(&sql.get)
        .bind(claim.key)
        .bind(claim.scope)
        .fetch_optional(&mut **tx)
        .await?;
    let now = now_us();
    let (statement, taken_over) = match &row {
        None => (&sql.insert, false),
        Some(row) if row.get::<i64, _>("expires_us") <= now => (&sql.take_over, true),
        Some(row) => return Ok(judge(row, claim.fingerprint, claim.token)),
    };
    let fence: i64 = sqlx::query(&sql.next_fence)
        .fetch_one(&mut **tx)
        .await?
        .get(0);
    let expires = now.saturating_add(micros(claim.lease));
    sqlx::query(statement)
        .bind(claim.key)
        .bind(claim.scope)
        .bind(fence)
        .bind(claim.fingerprint)
        .bind(claim.token)
        .bind(expires)
        .bind(idem_core::holder())
        .execute(&mut **tx)
        .await?;
    Ok(Claim::Acquired {
        fence: Fence(fence as u64),
        lease_expires_at: at(expires),
        taken_over,
    })
}
