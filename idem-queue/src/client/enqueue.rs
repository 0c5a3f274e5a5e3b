//! The client's side: storing jobs, idempotently on their keys.

use idem_core::{Operation, StoreError};
use sqlx::PgExecutor;

use crate::job::{EnqueueError, Enqueued, NewJob};
use crate::queue::Queue;
use idem_postgres_core::extend::store_error;

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
        let stored = self
            .sql
            .enqueue
            .enqueue(executor, &job)
            .await
            .map_err(|e| EnqueueError::Store(store_error(e).during(Operation::Enqueue)))?;
        match (stored.written, stored.inserted) {
            (true, true) => return Ok(Enqueued::Queued),
            (true, false) => return Ok(Enqueued::Replaced),
            // Running or finished (replaced or not): answered as without `replace`.
            (false, _) => {}
        }
        self.answer(stored.written, stored.same, job).await
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
                let same = self
                    .sql
                    .enqueue
                    .same_payload(self.store.pool(), job.key.as_str(), &job.payload)
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
        let rows = self
            .sql
            .enqueue
            .enqueue_many(self.store.pool(), &valid)
            .await
            .map_err(|e| store_error(e).during(Operation::Enqueue))?;
        let mut stored = Vec::with_capacity(valid.len());
        for ((written, same), job) in rows.into_iter().zip(valid) {
            let answer = match self.answer(written, same, job).await {
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
