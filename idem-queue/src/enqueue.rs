//! The client's side: storing jobs, idempotently on their keys.

use idem_core::{Operation, StoreError};
use sqlx::{PgExecutor, Row};

use crate::job::{EnqueueError, Enqueued, NewJob};
use crate::queue::Queue;
use idem_store_postgres::extend::duration_micros;
use idem_store_postgres::extend::store_error;

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
    /// let mut tx = queue.store().pool().begin().await?;
    /// sqlx::query("INSERT INTO orders (id) VALUES (7)").execute(&mut *tx).await?;
    /// queue.enqueue_in(&mut *tx, NewJob::new("order-confirmation:7", &7)?).await?;
    /// tx.commit().await?; // the order and its job, or neither
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
        let run_after = job.run_after.map(|at| {
            at.duration_since(std::time::UNIX_EPOCH)
                .map(duration_micros)
                .unwrap_or(0)
        });
        let row = sqlx::query(&self.sql.enqueue)
            .bind(job.key.as_str())
            .bind(&job.payload)
            .bind(job.max_attempts as i32)
            .bind(run_after)
            .bind(duration_micros(job.delay))
            .fetch_one(executor)
            .await
            .map_err(|e| EnqueueError::Store(store_error(e).during(Operation::Enqueue)))?;
        let inserted: bool = row.get(0);
        let same: Option<bool> = row.get(1);
        match (inserted, same) {
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
}
