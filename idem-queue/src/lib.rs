//! # idem-queue: respond fast, work later, and never do the work twice
//!
//! A durable work queue in PostgreSQL, behind idem's idempotency rules. A handler that takes
//! long makes duplicates likely: callers time out and retry while it is still working.
//! Instead, accept the request, [enqueue](Queue::enqueue) the work under its idempotency key,
//! answer at once (an HTTP 202), and let [workers](Queue::worker) process it. The key is the
//! job's identity: a retried request never enqueues twice, and each job runs inside an
//! idempotent call ([`idem_core::Call`]), so a job whose worker died after finishing it is
//! recognised as done and not run again.
//!
//! - [Setup](#setup) · [Enqueue](#enqueue) · [Workers](#workers) ·
//!   [Named queues, priorities, serial keys](#named-queues-priorities-serial-keys) ·
//!   [Cancelling and results](#cancelling-and-results) · [Trace context](#trace-context) ·
//!   [Job states](#job-states) · [Dead letters](#dead-letters) · [Purging](#purging) ·
//!   [Stats and metrics](#stats-and-metrics) · [How it works](#how-it-works) ·
//!   [Tuning](#tuning) · [Guarantees and limits](#guarantees-and-limits)
//!
//! ## Setup
//!
//! The queue sits on a [`PgStore`](idem_store_postgres::PgStore) (`idem-store-postgres`): its
//! table, `<table>_queue`, lives
//! next to the store's records, and its jobs' calls run on that store.
//!
//! ```no_run
//! use idem_queue::{Job, NewJob, Queue};
//! use idem_store_postgres::{sqlx::PgPool, PgStore};
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
//! let store = PgStore::new(pool);
//! let queue = Queue::new(&store); // once at start-up; clones share it
//! queue.migrate().await?; // the store's records table and the queue's, created or upgraded
//!
//! // In the request handler: store the work, answer 202.
//! let job = NewJob::new("welcome-email:42", &serde_json::json!({"user": 42}))?;
//! let status = queue.enqueue(job).await?; // Enqueued::Queued, or Duplicate on a retry
//!
//! // In the worker process (or a background task of the same one):
//! let workers = queue
//!     .worker(|job: Job| async move {
//!         let user: u64 = job.payload()["user"].as_u64().unwrap_or_default();
//!         // send the email, passing job.key() to the provider as its idempotency key
//!         Ok::<_, std::io::Error>(())
//!     })
//!     .concurrency(8)
//!     .start();
//! // ... on SIGTERM: stop claiming, give running jobs 20 s, hand the rest back.
//! let report = workers.shutdown(Duration::from_secs(20)).await;
//! # Ok(()) }
//! ```
//!
//! [`Queue::migrate`] runs [`PgStore::migrate`](idem_store_postgres::PgStore::migrate) (the
//! records table, its journal and sequence)
//! and then the queue's own versioned migrations: the table `<table>_queue` with its indexes
//! and the trigger that notifies idle workers, with their history in
//! `<table>_queue_migrations`. It is safe to call from many processes at once and on every
//! start-up (they take turns on an advisory lock).
//!
//! **Upgrading a running queue.** Migrations never stop the queue: columns are added without
//! rewriting the table, and indexes on a queue that holds jobs are built concurrently, while
//! jobs are enqueued, claimed and settled (such a build waits for transactions already
//! running to end, so a long transaction of yours delays the migration, not the queue).
//! Workers of the version before keep working beside upgraded ones until they are replaced;
//! two things they do not know of: the serial keys' rows (while one runs, a key's jobs are
//! kept apart by the enqueue-order rule only) and a cancel's reason (their cancelled jobs
//! keep the handler's account).
//!
//! ## Enqueue
//!
//! A [`NewJob`] is a key (an idem [`Key`](idem_core::Key): non-empty, at most 512 bytes, no
//! control characters) and a JSON payload (any `Serialize` value, stored as `jsonb`), with
//! optional [`after`](NewJob::after), [`run_at`](NewJob::run_at) and
//! [`max_attempts`](NewJob::max_attempts) (default [`DEFAULT_MAX_ATTEMPTS`], 20). A payload
//! PostgreSQL cannot store exactly (a NUL character, a whole number beyond ±2^53) is refused
//! before anything is stored ([`EnqueueError::Payload`]).
//!
//! - **Enqueue is idempotent on the key.** A second enqueue of a stored key stores nothing
//!   and returns [`Enqueued::Duplicate`], whatever the job's state; the same key with a
//!   *different* payload is refused ([`EnqueueError::KeyReused`]), since it names other work.
//!   A finished job's key stays a duplicate until the job is purged.
//! - **In a transaction.** [`Queue::enqueue_in`] enqueues on the caller's own transaction, so
//!   the job exists exactly when the business write commits:
//!
//! ```no_run
//! # use idem_queue::{NewJob, Queue};
//! # async fn run(queue: Queue) -> Result<(), Box<dyn std::error::Error>> {
//! let mut tx = idem_store_postgres::ClosingTransaction::begin(queue.store().pool(), None).await?;
//! sqlx::query("INSERT INTO orders (id) VALUES (7)").execute(&mut *tx).await?;
//! let job = NewJob::new("receipt:7", &7)?.after(std::time::Duration::from_secs(60));
//! queue.enqueue_in(&mut *tx, job).await?;
//! tx.end(true).await?; // the order and its job, or neither
//! # Ok(()) }
//! ```
//!
//! Idle workers are woken when the enqueue commits (a rolled-back enqueue wakes nobody).
//!
//! - **Many at once.** [`Queue::enqueue_many`] stores many jobs in one statement, each still
//!   idempotent on its key, and answers per job: queued, duplicate, or refused (with why).
//! - **Debounce.** A job built with [`NewJob::replace`] replaces the payload and run time of a
//!   job of its key that is still waiting ([`Enqueued::Replaced`]), instead of being refused
//!   for another payload; a running or finished job is left as it is.
//!
//! ## Workers
//!
//! [`Queue::worker`] takes the handler: an async function of a [`Job`] (its
//! [`key`](Job::key), [`payload`](Job::payload) or [`payload_as`](Job::payload_as),
//! [`attempt`](Job::attempt)) that returns `Result<T, E>` for any `E: Display` and any
//! `T: Serialize`: `T` is the job's [result](#cancelling-and-results). Its `Err` and its panics
//! are failures. Configure the [`WorkerBuilder`], then
//! [`start`](WorkerBuilder::start) it on the current Tokio runtime, in as many processes as
//! you like:
//!
//! | option | default | what it does |
//! | --- | --- | --- |
//! | [`concurrency`](WorkerBuilder::concurrency) | 4 | jobs running at once in this process |
//! | [`queue`](WorkerBuilder::queue) | [`DEFAULT_QUEUE`] at the concurrency | a named queue to serve, with its own concurrency; call it once per queue |
//! | [`global_limit`](WorkerBuilder::global_limit) | none | at most this many of a queue's jobs running across every process |
//! | [`batch_size`](WorkerBuilder::batch_size) | the concurrency | the most jobs one claim statement takes for free slots |
//! | [`adaptive_prefetch`](WorkerBuilder::adaptive_prefetch) | on, up to [`DEFAULT_PREFETCH`] (500) | under a backlog, claims take jobs past the free slots, held on their lease and started as slots free up; on an idle queue, claims take only what free slots start (see [Tuning](#tuning)) |
//! | [`prefetch`](WorkerBuilder::prefetch) | (adaptive) | always prefetch `n` jobs; `prefetch(0)` never does |
//! | [`lease`](WorkerBuilder::lease) | [`idem_core::DEFAULT_LEASE`], 30 s | how long a claim holds without renewal; renewed every third of it while the job runs, so a slow-but-alive worker keeps its jobs and a crashed one's come back once it lapses |
//! | [`timeout`](WorkerBuilder::timeout) | none | stops a handler that runs longer and counts a failed attempt (`timed out after ..`); a job done just at its limit is done |
//! | [`backoff`](WorkerBuilder::backoff) | [`Backoff::default`]: 1 s doubling, capped at 1 hour | the wait after each failed attempt: between half and all of `base * 2^(n-1)`, so waits grow and workers that failed together do not retry together |
//! | [`listen`](WorkerBuilder::listen) | on | idle workers `LISTEN` for new work (one connection per set of workers); off, they only poll |
//! | [`poll_interval`](WorkerBuilder::poll_interval) | [`DEFAULT_POLL_INTERVAL`], 1 s | how often idle workers look for work no notification announces: retries and delayed jobs coming due, lapsed leases, and anything missed while the listener was reconnecting |
//!
//! ```no_run
//! use idem_queue::{Backoff, Job, Queue};
//! use std::time::Duration;
//!
//! # async fn run(queue: Queue) {
//! let workers = queue
//!     .worker(|job: Job| async move {
//!         let order: u64 = job.payload_as().map_err(|e| e.to_string())?;
//!         // ... send the receipt for `order`, keyed by job.key()
//!         Ok::<_, String>(())
//!     })
//!     .concurrency(16)
//!     .lease(Duration::from_secs(60))
//!     .timeout(Duration::from_secs(300))
//!     .backoff(Backoff::new(Duration::from_secs(5), Duration::from_secs(1800)))
//!     .start();
//! let report = workers.shutdown(Duration::from_secs(20)).await;
//! println!("{} finished, {} given back", report.finished, report.released);
//! # }
//! ```
//!
//! **Shutdown.** [`Workers::shutdown`]`(deadline)` stops claiming at once, lets running jobs
//! finish until the deadline, then cuts the rest off and gives them back to the queue (their
//! attempt not counted, their idempotency records freed), so another worker starts them at
//! once; the [`ShutdownReport`] says how many finished and how many were given back. Only the
//! handlers are cut, never their calls: a job whose handler finished just before is recorded
//! as done. Dropping [`Workers`] stops them with no time for running jobs.
//! [`Workers::wait_idle`] waits until nothing runs and no work is waiting (for tests and
//! maintenance).
//!
//! ## Named queues, priorities, serial keys
//!
//! - **Named queues.** [`NewJob::queue`] puts a job in a named queue (default
//!   [`DEFAULT_QUEUE`]); only workers that serve it run it. [`WorkerBuilder::queue`] serves a
//!   queue with slots of its own, so a flood of one kind of work never takes another's slots.
//! - **Global limits.** [`WorkerBuilder::global_limit`] caps how many of a queue's jobs run at
//!   once across every process (a provider's rate or connection limit). A claim of such a
//!   queue runs under the queue's advisory lock in a transaction: four or five round trips
//!   instead of one. A process held back by the limit claims again as its own jobs end; a
//!   place freed by another process is found at the next poll (nothing announces it).
//! - **Priorities.** [`NewJob::priority`] (default 0; higher first, negative below): within a
//!   queue, jobs run by priority, then in the order they became available (after any job
//!   whose worker stopped, which is taken back first).
//! - **Serial keys.** Jobs that share a [`NewJob::serial_key`] (one customer, one account)
//!   run one at a time, in the order they were enqueued, across every process: a claim takes
//!   a key's first unfinished job only. One waiting for a retry holds the later ones back; a
//!   dead or cancelled one does not.
//!
//! ```no_run
//! use idem_queue::{Job, NewJob, Queue};
//!
//! # async fn run(queue: Queue) -> Result<(), Box<dyn std::error::Error>> {
//! let refund = NewJob::new("refund:991", &991)?
//!     .queue("payments")
//!     .priority(10)
//!     .serial_key("customer:42"); // after customer 42's earlier payment jobs, never beside them
//! let _ = queue.enqueue(refund).await?;
//!
//! let workers = queue
//!     .worker(|job: Job| async move { Ok::<_, std::io::Error>(()) })
//!     .queue("payments", 8)
//!     .global_limit("payments", 4) // the provider allows four connections
//!     .queue("default", 16)
//!     .start();
//! # Ok(()) }
//! ```
//!
//! ## Cancelling and results
//!
//! - **Cancel.** [`Queue::cancel`] (and `idem jobs cancel KEY`) cancels a waiting job at once:
//!   it never runs. A running one is asked: its worker hears it at the job's next lease
//!   renewal (a third of the lease), [`Job::cancelled`] and [`Job::is_cancelled`] tell the
//!   handler, and the job ends `cancelled` unless it finishes first (finished work stays done).
//!   A handler that ignores it is cut one lease later. A cancelled job's key stays taken.
//! - **Results.** A handler's `Ok` value is kept with the job as JSON (up to
//!   [`MAX_RESULT_BYTES`]; a larger one is dropped with a warning, the job still done).
//!   [`Queue::result`] reads how a job ended and [`Queue::wait_result`] waits for it, so a
//!   request answered "accepted" can also be answered later.
//!
//! ```no_run
//! # use idem_queue::{JobResult, NewJob, Queue};
//! # use std::time::Duration;
//! # async fn run(queue: Queue) -> Result<(), Box<dyn std::error::Error>> {
//! match queue.wait_result("report:2026-11", Duration::from_secs(5)).await? {
//!     Some(JobResult::Done(Some(report))) => println!("ready: {report}"),
//!     Some(JobResult::Pending) => println!("still working: ask again later"),
//!     Some(other) => println!("ended without a report: {other:?}"),
//!     None => println!("no such job"),
//! }
//! # Ok(()) }
//! ```
//!
//! ## Trace context
//!
//! With the `opentelemetry` feature, a job made inside a span traced by `tracing-opentelemetry`
//! carries that span's W3C `traceparent`, and the span that runs the job
//! (`idem::queue::job`) links to it, so a trace shows which request enqueued the work. Without
//! the feature, [`NewJob::traceparent`] still carries one (from an incoming request's header,
//! say) and [`Job::traceparent`] reads it. Each job costs a column of 55 bytes when it has one.
//!
//! ## Handler outcomes and the attempt log
//!
//! A handler's `Err` (any `Display` error) or panic is a failed attempt, retried after the worker's
//! [`Backoff`]. A [`JobError`] says more: [`JobError::retry_after`] retries after the delay a
//! provider asked for (its `Retry-After`), [`JobError::permanent`] dead-letters the job at once,
//! whatever attempts it had left, [`JobError::snooze`] puts it back for a while without using an
//! attempt, and [`JobError::cancel`] ends it `cancelled` (the handler's error type must be
//! `JobError` itself: one boxed in `Box<dyn Error>` is an ordinary failure). [`Queue::status`]'s
//! [`attempt_log`](JobStatus::attempt_log) (and `idem jobs show`) lists attempts with their start,
//! end, outcome and error: the latest 20 that ended without completing (retried, dead-lettered,
//! given back, snoozed, cancelled, or `lapsed`: its worker died and a later claim took the job
//! over) and the current one. An operator's retry of a dead job numbers its attempts from 1 again;
//! the log keeps the earlier ones.
//!
//! ## Job states
//!
//! | state | meaning | becomes |
//! | --- | --- | --- |
//! | `queued` | waits until its run-after time (enqueued, a retry's backoff, a snooze), in its named queue, by priority (and behind its serial key's earlier jobs) | `running` when a worker of its queue claims it (its attempt counted); `cancelled` by [`Queue::cancel`]; its payload and run time replaced by an enqueue with [`NewJob::replace`] |
//! | `running` | claimed by a worker, on a lease renewed while it runs | `done` when the handler returns `Ok` (or its call was completed before), with its result; `queued` again for a retry after a failure with attempts left; `dead` after a failure on its last attempt (or a permanent one); `queued` without counting the attempt when snoozed or given back (shutdown, another run holding the key, the store failing around it, or a claim whose answer came after half the lease: by then another worker may have taken the job over, even finished it); `cancelled` when its handler cancels it, or when it stops after an operator's cancel |
//! | `running`, lease lapsed (`stale`) | its worker died, stalled or lost the database | claimable again: a claim takes it over before waiting jobs (a busy worker looks once a second, an idle one at each poll) and runs it again, or dead-letters it if that was its last attempt |
//! | `done` | finished; its key stays a duplicate | deleted by [purging](#purging) |
//! | `dead` | failed its last attempt, with its last error | `queued` with fresh attempts by [`Queue::retry_dead`]; deleted by [`Queue::discard`] |
//! | `cancelled` | will not run again, with the reason as its last error; its key stays taken | deleted by [`Queue::discard`] |
//!
//! [`Queue::status`] gives one job's [`JobStatus`]; [`QueueStats::stale`] counts the lapsed
//! claims ([`LAPSED_SQL`] is their condition), which `idem jobs` (the `idem-cli` crate) shows
//! as `stale`.
//!
//! ## Dead letters
//!
//! A job that fails [`max_attempts`](NewJob::max_attempts) times is dead-lettered with its
//! last error, and stays until an operator decides (or a worker dies during its last attempt:
//! it is dead-lettered with an error that says so, rather than run beyond its limit):
//!
//! ```no_run
//! # use idem_queue::Queue;
//! # async fn run(queue: Queue) -> Result<(), Box<dyn std::error::Error>> {
//! for dead in queue.dead(100).await? {
//!     println!("{} failed {} times: {:?}", dead.key, dead.attempts, dead.last_error);
//! }
//! queue.retry_dead("welcome-email:42").await?; // back in the queue with fresh attempts, now
//! queue.discard("welcome-email:7").await?; // gone; the key can be enqueued anew
//! # Ok(()) }
//! ```
//!
//! ## Schedules
//!
//! A [`Scheduler`] fires named [`Schedule`]s (cron expressions in a time zone, or fixed
//! intervals) on the queue, with no leader: run it on every replica. Each tick is an
//! idempotent enqueue keyed `schedule:NAME:TIME` (the tick's UTC time, RFC 3339), so however
//! many replicas fire a tick it is stored, and run, once; a handler tells a tick's job by
//! [`Job::tick`]. A table beside the queue's (`<table>_schedules`, created by
//! [`Queue::migrate`]) keeps each schedule's last tick and what it missed:
//!
//! - **Catch-up**: ticks that fell due while no scheduler ran are enqueued once each when one
//!   comes back, if they are within [`catch_up`](Schedule::catch_up) (default
//!   [`DEFAULT_CATCH_UP`]); older ones are counted as missed, never silently dropped.
//! - **Missed runs**: a tick whose job has not completed within [`grace`](Schedule::grace)
//!   (default [`DEFAULT_GRACE`]) is counted as missed, with a `tracing` warning and
//!   `idem_schedule_missed_total`; `idem_schedule_last_success_timestamp` says when a tick last
//!   completed (alert when it is older than the schedule's period).
//! - **Pause, resume, remove** without a deploy: [`Queue::pause_schedule`],
//!   [`Queue::resume_schedule`], [`Queue::remove_schedule`], or `idem schedules`. A schedule
//!   removed from the code stops firing; [`Queue::schedules`] shows when it was last declared.
//! - **Time zones and daylight saving**: a fixed time the clocks skip runs once, right after
//!   the gap; a time they repeat runs once, at its first occurrence (unit-tested on Paris's
//!   changes).
//!
//! ```no_run
//! use idem_queue::{Job, Queue, Schedule};
//! use std::time::Duration;
//!
//! # async fn run(queue: Queue) -> Result<(), Box<dyn std::error::Error>> {
//! let scheduler = queue.scheduler(vec![
//!     Schedule::cron("daily-report", "0 6 * * *")?.time_zone("Europe/Paris")?,
//!     Schedule::every("poll-feeds", Duration::from_secs(30))?.catch_up(Duration::from_secs(60)),
//! ])?;
//! let running = scheduler.start().await?;
//! let workers = queue
//!     .worker(|job: Job| async move {
//!         match job.tick() {
//!             Some(tick) if tick.schedule == "daily-report" => { /* build the report */ }
//!             Some(_) => { /* poll the feeds */ }
//!             None => { /* a job enqueued otherwise */ }
//!         }
//!         Ok::<_, std::io::Error>(())
//!     })
//!     .start();
//! // ... on SIGTERM:
//! running.shutdown().await;
//! workers.shutdown(Duration::from_secs(20)).await;
//! # Ok(()) }
//! ```
//!
//! The scheduler reads the database's clock, so replicas with skewed clocks agree; a pass costs
//! a read and an update of each schedule's row, plus one enqueue per tick.
//!
//! **HTTP targets** (feature `http`): `http::post` runs a job that POSTs a JSON body to a URL
//! with the job's key as `Idempotency-Key` (the same on every attempt of a tick, so a receiver
//! behind `idem-http` runs it once), retried on 5xx and [`http::RETRIED_STATUSES`] (after
//! their `Retry-After`), timeouts and connection errors, and dead at once on any other 4xx. Schedules
//! of them can live in the database ([`Queue::store_schedule`]); `idem schedules add NAME
//! --cron EXPR --post URL` stores one and `idem worker` runs them, no code needed, on the named
//! queue `http::HTTP_QUEUE` (so never a program's jobs). A delivery's status, time and first
//! bytes are the job's result (`http::Delivery`).
//!
//! ## Purging
//!
//! Finished jobs stay in the table, and their keys stay duplicates, until purged:
//! [`Queue::purge_done`]`(older_than, limit)` deletes one batch, [`Queue::purge_all_done`]
//! drains them in batches, and [`Queue::spawn_purger`]`(every, older_than, batch)` does it
//! periodically. Dead jobs are kept. A job that finished less than a day ago (its call's
//! `keep`) leaves its idempotency record, completed, for the rest of that day, so its key
//! enqueued again within it is still recognised as done. Purge the records too, as for any
//! store: [`Purge::spawn_purger`](idem_core::Purge::spawn_purger) on the store.
//!
//! ## Stats and metrics
//!
//! [`Queue::stats`] counts the jobs by state in one statement ([`QueueStats`]: `queued`,
//! `running`, `stale`, `done`, `dead`, `cancelled`): fine for dashboards, not for a hot path. The
//! [`metrics`] module lists what the queue records through the `metrics` facade (attempts by
//! outcome, each attempt's duration, and gauges of jobs by state, set by every `stats()`;
//! [`Queue::spawn_metrics`] reads them periodically). Each job also counts as an idem call of
//! the handler `idem::queue::run`. Workers run inside a `tracing` span
//! `idem::queue::workers` (field `queue`), and each job inside `idem::queue::job` (`key`,
//! `attempt`) around its call's `idem` span; retries, dead-lettering, takeovers and shutdown
//! are logged there.
//!
//! ## How it works
//!
//! - **Claim, then process.** Workers claim up to as many jobs as they have free slots with
//!   one `UPDATE .. WHERE key = ANY(ARRAY(SELECT .. FOR UPDATE SKIP LOCKED)) RETURNING ..`
//!   statement, so concurrent workers in any number of processes get different jobs, in the
//!   order they became available. A claim is a lease, renewed while the job runs.
//! - **Each job runs as an idempotent call** keyed by the job's key, in the queue's own scope
//!   ([`QUEUE_SCOPE`]: a job and an `#[idempotent]` handler with the same key text are two
//!   units of work), so [`idem_core::context`], keyed clients and the
//!   [`idem_core::journal::Journal`] work in handlers unchanged. The call renews its lease on
//!   idem-core's one policy ([`idem_core::lease`]); for a job, each renewal also extends the
//!   job's claim, in the same statement.
//! - **A job's row is its record.** The claim that takes a job reserves its call's fence and
//!   writes no idempotency record, and the completion marks the row done and writes none
//!   either: the claimed row holds the key, and the done row says it ran. A record is written
//!   only when the call needs one (its first lease renewal, or a journal entry), and when a
//!   purge deletes a done job within its keep. A job that runs once, briefly, thus writes its
//!   row twice and nothing else, as a hand-written claim-then-process loop does.
//! - **A job's completion claims the next.** The statement that marks a job done also claims
//!   the next job for the slot it frees (until the workers stop), and the completions of jobs
//!   that finish together share one statement: a job costs its share of one statement, and no
//!   job is claimed before a slot is free to run it.
//! - **Under a backlog, workers prefetch.** Once a completion finds the next job waiting,
//!   claims take many jobs past the free slots (held on their lease, started as slots free
//!   up, outcomes written behind the handlers, many to a statement) until the backlog is gone:
//!   a job then costs a fiftieth of a statement or so ([Tuning](#tuning)).
//! - **Idle workers sleep** until PostgreSQL notifies them of new work (`LISTEN idem_queue`,
//!   sent by the table's insert trigger at commit), with polling as the fallback.
//!
//! **Layout, by role** (as River splits its queue): [`Queue`] on the ground floor, and four
//! wings. The client (`client/`: enqueue, admin, browse) is what an application and its
//! operators call. The workers (`worker/`) are a `producer` per named queue that claims
//! batches into free slots, and an `executor` that runs each job as an idempotent call on the
//! job's view of the store (`job_store`, whose completion also claims the next job for the slot
//! it frees, so the slot's task runs it next). The completer (`completer/`) settles how each
//! claim ended, batching the completions, and holds the rescue of jobs whose worker died.
//! Every statement, its parameters and the decoding of its rows are typed calls in `db/`,
//! split by concern; nothing else writes SQL. The queue sits on top of
//! [`PgStore`](idem_store_postgres::PgStore): the store knows nothing of
//! it, and the queue reaches job records only through [`idem_postgres_core::extend`], the
//! layer the store is built on, at the store's exact version. For claim-then-process on a table
//! of your own, see
//! [`own_table`](idem_store_postgres::own_table).
//!
//! ## Tuning
//!
//! - **The store's connections.** The queue's statements run on the store's own connections
//!   and share its batching; a store built with
//!   [`through_pool`](idem_store_postgres::PgStoreBuilder::through_pool) runs the queue at a
//!   round trip more per statement and without batching, well below its speed on the store's
//!   own connections.
//! - **VACUUM.** A claim reads its named queue's part of the waiting jobs' index (by
//!   priority, then `available_at`) from its start, past the entries of every job claimed
//!   since the table was last vacuumed, so claims slow down as jobs run until autovacuum
//!   comes. Running jobs have an index of their own, by lease end, which a claim reads only
//!   when it looks for jobs whose lease lapsed (see **Order** below): a busy worker's claims
//!   look about once a second. Finished jobs stay until
//!   purged, and PostgreSQL's default vacuums once a fifth of a table is dead row versions, so the
//!   more jobs a queue keeps, the longer between vacuums: the queue's migrations set
//!   `autovacuum_vacuum_scale_factor = 0.01` on its table (a value you set there yourself is kept).
//!   Purge finished jobs you no longer need as duplicates; a long-running transaction anywhere in
//!   the database holds every vacuum back.
//! - **Prefetching, on its own.** A claim for free slots only lets no job wait behind
//!   another, and each job's completion claims the next in the same statement: a statement
//!   per job. A queue of many short jobs spends most of its time on those statements; a
//!   prefetching claim takes many jobs past the free slots, a slot frees as soon as its
//!   handler ends (the outcome is written behind it, many jobs' outcomes to a statement), and
//!   the next claim is sent while jobs run, once the held jobs fall to half the prefetch. By
//!   default workers do both, each where it pays: they claim for free slots until a finished
//!   job's completion finds the next job waiting (a backlog), then prefetch until a claim
//!   comes back short with nothing held (the backlog is gone), and claim for free slots again.
//!   An idle queue's job starts as soon as without prefetching; a backlog of short jobs drains
//!   as fast as with it. The default prefetch holds as many jobs as the slots start within a
//!   quarter of the lease at the pace jobs have run so far, at most
//!   [`DEFAULT_PREFETCH`] (500): slow jobs (seconds each, against a 30 s lease) are never
//!   prefetched, so no held job comes near the half lease it may wait.
//!   [`adaptive_prefetch`](WorkerBuilder::adaptive_prefetch)`(n)` changes the most;
//!   [`prefetch`](WorkerBuilder::prefetch)`(n)` always prefetches `n`, and `prefetch(0)`
//!   never does.
//!
//!   Prefetching costs what it costs anywhere: held jobs are `running` to everyone else (a
//!   cancel reaches them as it reaches a running job, at their first renewal), they keep their
//!   place while more urgent jobs arrive (they start in the order they were picked, by
//!   priority), and a job not started within half its lease goes back uncounted. It keeps
//!   what the queue promises: held jobs are leased, so a dead worker's come back within a
//!   lease like its running ones; a held job that never started is not counted as an attempt
//!   when it comes back, and a shutdown gives held jobs back at once; a crash repeats only
//!   jobs that started: those running, and those whose outcome was on its way (together at
//!   most the concurrency and the prefetch: no job starts while that many are).
//!   [`batch_size`](WorkerBuilder::batch_size) does not apply to prefetching claims: they
//!   take what the slots and the prefetch leave room for. Under a
//!   [`global_limit`](WorkerBuilder::global_limit) workers never prefetch (a held job would
//!   take a place). A prefetched job's start is written about 50 ms after it (or with the
//!   job's outcome, whichever comes first); a crash within that time counts the cut run as no
//!   attempt, except for a job that was taken over from a dead worker, which writes its start
//!   before it runs, so a job that kills its worker is still dead-lettered.
//!
//!   ```no_run
//!   # use idem_queue::{Job, Queue};
//!   # async fn run(queue: Queue) {
//!   let workers = queue
//!       .worker(|_job: Job| async { Ok::<_, std::io::Error>(()) })
//!       .concurrency(16)
//!       .adaptive_prefetch(2_000) // hold more under a backlog; `.prefetch(0)` never prefetches
//!       .start();
//!   # workers.wait_idle().await;
//!   # }
//!   ```
//! - **Enqueue rate.** `NOTIFY` serialises the commits of the transactions that send one (a
//!   database-wide lock at commit), which bounds how fast jobs can be enqueued one
//!   transaction at a time.
//!
//! ## Feature flags
//!
//! | feature | default | adds |
//! | --- | --- | --- |
//! | `http` | off | [`http`]: jobs that POST to a URL with the job's key as `Idempotency-Key`, and stored schedules of them (what `idem worker` runs) |
//! | `opentelemetry` | off | the enqueuing span's W3C trace context travels with each job, and the job's span links to it ([trace context](#trace-context)) |
//! | `testing` | off | hooks for the crate's own tests: the statements by name and the typed calls behind them, single completions; not part of the queue's API: it may change in any release |
//!
//! ## Guarantees and limits
//!
//! - **A job is never lost**: every claimed job ends done, retried, dead-lettered, given back,
//!   or back in the queue when its lease lapses.
//! - **A job's handler runs to completion once**, unless it is cut off: its worker crashes,
//!   stalls longer than the lease, loses the database mid-job, or reaches the shutdown
//!   deadline. Then it runs again from the start (at least once), and the effect journal or
//!   provider idempotency keys (`job.key()`) keep the repeat harmless.
//! - **Failures retry** with backoff up to `max_attempts`, then dead-letter; a worker that
//!   dies during a job's last attempt leaves it dead-lettered too.
//! - **Order**: within a named queue, by priority, then in the order jobs become available
//!   (`available_at`); a serial key's jobs in the order they were enqueued. A job whose
//!   worker stopped (its lease lapsed) comes before them all, it was started first. Workers
//!   look for such jobs when they start, then with one claim a second (every half lease, if
//!   shorter), with every claim while looks keep finding them, and whenever they run out of
//!   waiting jobs; so one waits at most about a second past its lease for a worker that is
//!   busy, or until an idle worker's next poll. Recurring jobs are [schedules](Scheduler).
//! - **A serial key's jobs never run beside each other**, whatever order their enqueues
//!   committed in and however long a claim takes: every claim of a key's job writes the key's
//!   row in `<table>_queue_serial`, and two claims of one key meet on it. They run in the order
//!   they were enqueued as they commit: a job whose transaction began before a later job of its
//!   key was enqueued, and committed after that one was claimed, runs after it. A key's first
//!   unfinished job holds the key in every named queue, served or not, and a job whose worker
//!   stalled or died holds it until a claim takes that job over (it runs first).
//! - **A stalled worker cannot settle a later run.** Each claim of a job carries the job's
//!   claim count, which only grows (a dead job retried included), and every renewal and
//!   outcome is applied only while the job's claim is that one. One limit: a job's count
//!   starts again when its key is enqueued anew after the job was purged and its record's
//!   keep ran out (a day by default), so a worker stopped for all that time (a suspended
//!   machine) could, on waking, settle the new job's run that has the same count.
//! - **Cancelling a running job is cooperative**: a handler that finishes before it hears
//!   (up to a third of a lease) is done, and one that ignores it runs a lease longer.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod backoff;
mod client;
mod completer;
mod db;
#[cfg(feature = "http")]
pub mod http;
mod job;
mod job_record;
pub mod metrics;
mod outcome;
mod queue;
mod schedules;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod trace;
mod worker;

pub use backoff::Backoff;
pub use client::browse::{FinishedInMinute, JobPage, JobsQuery, QueueCounts, COUNTS_FINISHED};
pub use db::fragments::{LAPSED_SQL, MAX_LOGGED_ATTEMPTS};
pub use job::{
    Attempt, Cancel, DeadJob, EnqueueError, Enqueued, Job, JobFilter, JobInfo, JobResult, JobState,
    JobStatus, NewJob, QueueStats, DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, MAX_QUEUE_NAME_LEN,
};
pub use job_record::QUEUE_SCOPE;
pub use outcome::JobError;
pub use queue::Queue;
pub use schedules::{
    PassReport, Schedule, ScheduleError, ScheduleState, Scheduler, SchedulerHandle, Tick,
    DEFAULT_CATCH_UP, DEFAULT_CHECK_EVERY, DEFAULT_GRACE, MAX_NAME_LEN,
};
pub use worker::builder::{WorkerBuilder, DEFAULT_POLL_INTERVAL, DEFAULT_PREFETCH};
pub use worker::executor::MAX_RESULT_BYTES;
pub use worker::producer::ShutdownReport;
pub use worker::workers::Workers;

/// The README's example, compiled with the doc tests so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
