//! The client's side: storing jobs, idempotently on their keys.

use idem_core::{Operation, StoreError};
use sqlx::{PgExecutor, Row};

use crate::job::{EnqueueError, Enqueued, NewJob};
use crate::queue::Queue;
use idem_store_postgres::extend::store_error;
use idem_store_postgres::extend::{duration_micros, to_micros};

impl Queue {
    /// Stores `job` unless a job with its key is stored already, and says which. Idle workers
    /// are woken when it commits.
    pub async fn enqueue(&self, job: NewJob) -> Result<Enqueued, EnqueueError> {
        self.enqueue_in(self.store.pool(), job).await
    }

    /// [`enqueue`](Queue::enqueue) on `executor`: a connection, or the caller's open
    /// transaction (`&mut *tx`), so the job is stored if and only if the transaction commits.
    ///
    /// ```no_run
    /// # use idem_queue::{NewJob, Queue};
    /// # async fn run(queue: Queue) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = idem_store_postgres::ClosingTransaction::begin(queue.store().pool(), None).await?;
    /// sqlx::query("INSERT INTO orders (id) VALUES (7)").execute(&mut *tx).await?;
    /// queue.enqueue_in(&mut *tx, NewJob::new("order-confirmation:7", &7)?).await?;
    /// tx.end(true).await?; // the order and its job, or neither
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_in<'e, X>(
        &self,
        executor: X,
        job: NewJob,
    ) -> Result<Enqueued, EnqueueError>
    where
        X: PgExecutor<'e>,
    {
        job.check().map_err(EnqueueError::Invalid)?;
        let run_after = job.run_after.map(to_micros);
        let statement = if job.replace {
            &self.sql.enqueue_replacing
        } else {
            &self.sql.enqueue
        };
        let row = sqlx::query(statement)
            .bind(job.key.as_str())
            .bind(&job.payload)
            .bind(job.max_attempts as i32)
            .bind(run_after)
            .bind(duration_micros(job.delay))
            .bind(&job.queue)
            .bind(job.priority)
            .bind(job.serial_key.as_deref())
            .bind(job.traceparent.as_deref())
            .fetch_one(executor)
            .await
            .map_err(|e| EnqueueError::Store(store_error(e).during(Operation::Enqueue)))?;
        let written: bool = row.get(0);
        if job.replace {
            let inserted: bool = row.get(1);
            match (written, inserted) {
                (true, true) => return Ok(Enqueued::Queued),
                (true, false) => return Ok(Enqueued::Replaced),
                // Running or finished: answered as without `replace`.
                (false, _) => {}
            }
        }
        let same: Option<bool> = row.get(if job.replace { 2 } else { 1 });
        self.answer(written, same, job).await
    }

    /// The answer to an enqueue of `job`: stored now (`written`), or whether the stored job's
    /// payload is the same (`None`: the stored job is not visible to the statement).
    async fn answer(
        &self,
        written: bool,
        same: Option<bool>,
        job: NewJob,
    ) -> Result<Enqueued, EnqueueError> {
        match (written, same) {
            (true, _) => Ok(Enqueued::Queued),
            (false, Some(true)) => Ok(Enqueued::Duplicate),
            (false, Some(false)) => Err(EnqueueError::KeyReused {
                key: job.key.into_string(),
            }),
            // The conflicting row committed after this statement's snapshot was taken: look
            // again, with a new snapshot.
            (false, None) => {
                let same: Option<bool> = sqlx::query_scalar(&self.sql.same_payload)
                    .bind(job.key.as_str())
                    .bind(&job.payload)
                    .fetch_optional(self.store.pool())
                    .await
                    .map_err(|e| EnqueueError::Store(store_error(e).during(Operation::Enqueue)))?;
                match same {
                    Some(true) => Ok(Enqueued::Duplicate),
                    Some(false) => Err(EnqueueError::KeyReused {
                        key: job.key.into_string(),
                    }),
                    // Discarded or purged in between: nothing is stored, and saying "duplicate"
                    // would lose the work.
                    None => Err(EnqueueError::Store(StoreError::msg(format!(
                        "the job stored under key {:?} was deleted while this enqueue ran; \
                         nothing was stored: enqueue it again",
                        job.key.as_str()
                    )))),
                }
            }
        }
    }

    /// Enqueues many jobs in one statement, each idempotent on its key as
    /// [`enqueue`](Queue::enqueue) is, and says per job, in order, what happened: stored
    /// ([`Enqueued::Queued`]), a duplicate, or refused (an invalid name, or its key stored with
    /// another payload; a job whose key comes twice in `jobs` is stored once, its later
    /// copies answered against the first). Invalid jobs are refused without stopping the rest.
    /// [`NewJob::replace`] is not applied here: a waiting job is left as it is.
    pub async fn enqueue_many(
        &self,
        jobs: Vec<NewJob>,
    ) -> Result<Vec<Result<Enqueued, EnqueueError>>, StoreError> {
        let mut answers: Vec<Option<Result<Enqueued, EnqueueError>>> = Vec::new();
        let mut valid = Vec::new();
        for job in jobs {
            match job.check() {
                Err(problem) => answers.push(Some(Err(EnqueueError::Invalid(problem)))),
                Ok(()) => {
                    answers.push(None);
                    valid.push(job);
                }
            }
        }
        if valid.is_empty() {
            return Ok(answers.into_iter().flatten().collect());
        }
        let rows = sqlx::query(&self.sql.enqueue_many)
            .bind(valid.iter().map(|j| j.key.as_str()).collect::<Vec<_>>())
            .bind(valid.iter().map(|j| j.payload.as_str()).collect::<Vec<_>>())
            .bind(
                valid
                    .iter()
                    .map(|j| j.max_attempts as i32)
                    .collect::<Vec<_>>(),
            )
            .bind(
                valid
                    .iter()
                    .map(|j| j.run_after.map(to_micros))
                    .collect::<Vec<_>>(),
            )
            .bind(
                valid
                    .iter()
                    .map(|j| duration_micros(j.delay))
                    .collect::<Vec<_>>(),
            )
            .bind(valid.iter().map(|j| j.queue.as_str()).collect::<Vec<_>>())
            .bind(valid.iter().map(|j| j.priority).collect::<Vec<_>>())
            .bind(
                valid
                    .iter()
                    .map(|j| j.serial_key.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(
                valid
                    .iter()
                    .map(|j| j.traceparent.as_deref())
                    .collect::<Vec<_>>(),
            )
            .fetch_all(self.store.pool())
            .await
            .map_err(|e| store_error(e).during(Operation::Enqueue))?;
        let mut stored = Vec::with_capacity(valid.len());
        for (row, job) in rows.iter().zip(valid) {
            let answer = match self.answer(row.get(0), row.get(1), job).await {
                Err(EnqueueError::Store(e)) => return Err(e),
                answer => answer,
            };
            stored.push(answer);
        }
        let mut stored = stored.into_iter();
        Ok(answers
            .into_iter()
            .map(|answer| answer.unwrap_or_else(|| stored.next().expect("an answer per job")))
            .collect())
    }
}
