//! A job's completion as one statement: its call's record completed, the job marked done, and
//! the next job claimed for the slot it frees; the completions of concurrent jobs batched into
//! one statement.

use std::hash::Hasher;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Operation, StoreError};
use idem_postgres_core::extend::store_error;
use idem_postgres_core::extend::Resend;
use idem_postgres_core::extend::{hash_record, Op};
use idem_store_postgres::PgStore;
use sqlx::PgConnection;

use crate::completer::settle::settle;
use crate::completer::settlement::Settle;
use crate::db::complete::{ClaimNext, Completing, CompletionRow};
use crate::db::QueueSql;
use crate::job_record::QUEUE_SCOPE;
use crate::worker::claimed::Claimed;
use crate::worker::held::Holder;

/// A job's completion (its call's, which also marks the job done), owning its parts to travel
/// to a batch's driver.
pub(crate) struct JobCompletion {
    /// The queue's statements (one queue per store, so every request of a batch has the same).
    pub sql: Arc<QueueSql>,
    pub key: String,
    pub fence: i64,
    pub output: Option<Vec<u8>>,
    pub keep: i64,
    pub attempt: i32,
    /// The workers whose slot this job frees, when its completion is to claim the next job
    /// for it.
    pub next: Option<Arc<Holder>>,
}

/// Completions of concurrent jobs, in one statement: answered (record completed, job marked
/// done, the next job claimed for its slot) for each. A refused batch is sent again job by
/// job (batch.rs).
pub(crate) struct JobCompleteOp;

impl JobCompletion {
    /// The completion as the statements bind it.
    fn completing(&self) -> Completing<'_> {
        Completing {
            key: &self.key,
            fence: self.fence,
            output: self.output.as_deref(),
            keep: self.keep,
            attempt: self.attempt,
        }
    }
}

impl JobCompleteOp {
    /// One job's completion (and the claim of the next job for its slot, when it frees one),
    /// answered as [`Op::many`] answers each job of a batch.
    pub(crate) async fn single(
        conn: &mut PgConnection,
        c: &JobCompletion,
    ) -> Result<<Self as Op>::Answer, sqlx::Error> {
        let sql = &c.sql.complete;
        let Some(workers) = &c.next else {
            let (completed, done) = sql.complete_one(conn, &c.completing()).await?;
            return Ok((completed, done, None));
        };
        let looked = workers.rescue.due();
        let next = ClaimNext {
            wanted: &[1],
            queues: &[workers.queue.as_str()],
            lease: workers.lease,
            worker: &workers.worker,
            rescue: looked,
            start_by: crate::worker::claimed::start_by(tokio::time::Instant::now(), workers.lease),
        };
        let rows = sql
            .complete_one_and_claim(conn, &c.completing(), &next)
            .await?;
        let mut answers = Self::settle(rows, 1, vec![(0, workers)], looked)?;
        Ok(answers.pop().expect("one answer per completion"))
    }

    /// Many jobs' completions (and the claims of next jobs for the slots they free) in one
    /// statement on `conn`, answered as [`single`](JobCompleteOp::single) answers each.
    pub(crate) async fn many_on(
        conn: &mut PgConnection,
        batch: &[JobCompletion],
    ) -> Result<Vec<<Self as Op>::Answer>, sqlx::Error> {
        let completions: Vec<Completing<'_>> =
            batch.iter().map(JobCompletion::completing).collect();
        // The next jobs are claimed for the slots of the first completion's workers (one name,
        // one lease), in each slot's named queue. Completions of other workers in the batch
        // claim nothing; their producers fill their slots.
        let first = batch.iter().find_map(|c| c.next.as_ref());
        let slots: Vec<(usize, &Arc<Holder>)> = batch
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.next.as_ref().map(|workers| (i, workers)))
            .filter(|(_, workers)| {
                first.is_some_and(|first| {
                    first.worker == workers.worker && first.lease == workers.lease
                })
            })
            .collect();
        let mut queues: Vec<&str> = Vec::new();
        let mut wanted: Vec<i64> = Vec::new();
        // Lapsed jobs are looked for in every queue of the statement when one is due (see
        // `Rescue`): each queue's look is due on its own timer, and is taken here when due.
        let mut rescue = false;
        for (_, workers) in &slots {
            match queues.iter().position(|q| *q == workers.queue) {
                Some(i) => wanted[i] += 1,
                None => {
                    queues.push(&workers.queue);
                    wanted.push(1);
                    rescue |= workers.rescue.due();
                }
            }
        }
        let sql = &batch[0].sql.complete;
        let Some(&(_, workers)) = slots.first() else {
            let answers = sql.complete_many(conn, &completions).await?;
            return Ok(answers
                .into_iter()
                .map(|(completed, done)| (completed, done, None))
                .collect());
        };
        let next = ClaimNext {
            wanted: &wanted,
            queues: &queues,
            lease: workers.lease,
            worker: &workers.worker,
            rescue,
            start_by: crate::worker::claimed::start_by(tokio::time::Instant::now(), workers.lease),
        };
        let rows = sql
            .complete_many_and_claim(conn, &completions, &next)
            .await?;
        JobCompleteOp::settle(rows, batch.len(), slots, rescue)
    }

    /// The answers of `count` completions from the rows of a completion-and-claim statement
    /// (a row per completion, then a row per claimed job), each claimed job given to a slot of
    /// `slots` of its queue (the position of the completion that freed it, and its workers)
    /// and held there before any slot hears of it (it is given back at shutdown). Each queue's
    /// workers hear what it took, and whether the statement `looked` for lapsed jobs
    /// (`Rescue::took`).
    fn settle(
        rows: Vec<CompletionRow>,
        count: usize,
        slots: Vec<(usize, &Arc<Holder>)>,
        looked: bool,
    ) -> Result<Vec<<Self as Op>::Answer>, sqlx::Error> {
        let mut answers: Vec<<Self as Op>::Answer> =
            (0..count).map(|_| (false, false, None)).collect();
        let mut claimed = Vec::new();
        for row in rows {
            match row {
                CompletionRow::Answer {
                    at,
                    completed,
                    done,
                } => {
                    let answer = answers.get_mut(at).ok_or_else(|| {
                        sqlx::Error::Protocol(format!("no completion at position {}", at + 1))
                    })?;
                    (answer.0, answer.1) = (completed, done);
                }
                CompletionRow::Claimed { job, queue } => claimed.push((job, queue)),
            }
        }
        // Each claimed job to a free slot of its named queue. The statement claims no more of a
        // queue than it has slots; one that did (never seen) gives the job back at once rather
        // than fail after its claims were made, which would leave them claimed and unrun.
        let any_holder = slots.first().map(|(_, workers)| Arc::clone(workers));
        // Per named queue (each of its slots' holders is that queue's): its slots, the jobs
        // it took, and how many of those were lapsed.
        let mut took: Vec<(&Arc<Holder>, usize, usize, usize)> = Vec::new();
        for (_, workers) in &slots {
            match took.iter_mut().find(|(w, ..)| w.queue == workers.queue) {
                Some(entry) => entry.1 += 1,
                None => took.push((workers, 1, 0, 0)),
            }
        }
        for (job, queue) in &claimed {
            if let Some(entry) = took.iter_mut().find(|(w, ..)| &w.queue == queue) {
                entry.2 += 1;
                entry.3 += usize::from(job.lapsed);
            }
        }
        for (workers, slots, got, lapsed) in took {
            workers.rescue.took(looked, lapsed, got, slots);
        }
        let mut free = slots;
        for (job, queue) in claimed {
            match free.iter().position(|(_, workers)| workers.queue == queue) {
                Some(at) => {
                    let (slot, workers) = free.swap_remove(at);
                    workers.held.hold(&job);
                    answers[slot].2 = Some(job);
                }
                None => {
                    if let Some(holder) = &any_holder {
                        give_back(Arc::clone(holder), job, &queue);
                    }
                }
            }
        }
        Ok(answers)
    }
}

/// Gives a claimed job that no slot can run back to the queue, on the runtime, its attempt not
/// counted.
fn give_back(holder: Arc<Holder>, job: Claimed, queue: &str) {
    tracing::error!(key = %job.key, queue, "a job was claimed for no slot of its queue; giving it back");
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return; // it returns when its lease lapses
    };
    idem_core::pending::spawn(&runtime, async move {
        settle(
            &holder,
            &job,
            Settle::Release {
                delay: Duration::ZERO,
            },
        )
        .await;
    });
}

impl Op for JobCompleteOp {
    type Executor = PgStore;
    type Request = JobCompletion;
    type Answer = (bool, bool, Option<Claimed>);

    fn record(request: &JobCompletion, state: &mut impl Hasher) {
        hash_record(&request.key, QUEUE_SCOPE, state);
    }

    const NAME: &'static str = "job completion";
    const OPERATION: Operation = Operation::Complete;
    const SEND_AGAIN: bool = false;

    /// Sent once only: a completion that claims is not safe to send again (see
    /// [`Op::SEND_AGAIN`]).
    async fn many(
        store: &PgStore,
        batch: &[JobCompletion],
    ) -> Result<Vec<Self::Answer>, sqlx::Error> {
        idem_postgres_core::on_connection!(store, Resend::Never, conn => JobCompleteOp::many_on(conn, batch))
    }

    async fn one(store: &PgStore, c: &JobCompletion) -> Result<Self::Answer, StoreError> {
        idem_postgres_core::on_connection!(store, Resend::Never, conn => JobCompleteOp::single(conn, c))
            .map_err(|e| store_error(e).during(Self::OPERATION))
    }

    /// A job claimed for the slot of a job whose task went away would sit `running` for a
    /// whole lease, unrun, with an attempt counted: it goes back to the queue at once, its
    /// attempt not counted.
    fn orphaned(_store: &PgStore, completion: JobCompletion, answer: Self::Answer) {
        let (Some(job), Some(workers)) = (answer.2, completion.next) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime to send it on: the job returns when its lease lapses
        };
        tracing::info!(key = %job.key, "the job claimed for a slot whose task went away goes back to the queue");
        idem_core::pending::spawn(&runtime, async move {
            settle(
                &workers,
                &job,
                Settle::Release {
                    delay: Duration::ZERO,
                },
            )
            .await;
            workers.held.forget(&job.key, job.attempt);
        });
    }
}
