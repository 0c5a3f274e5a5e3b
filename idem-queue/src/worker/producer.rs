//! The producer: claims batches of jobs into this process's free slots, starts each on the
//! executor, sleeps until PostgreSQL notifies it of new work (or the poll interval passes),
//! and on shutdown drains what runs until the deadline.
//!
//! It claims in one of two ways. For free slots only: a job waits behind no other, and each
//! completion claims the next job for its slot in its own statement, a statement per job.
//! Prefetching: claims take many jobs past the free slots, held until a slot frees, and
//! outcomes are written behind the handlers, many to a statement. A fixed prefetch always
//! prefetches; an adaptive one (the default) claims for free slots until a completion finds
//! the next job waiting (a backlog), prefetches until a claim comes back short with nothing
//! held (the backlog is gone), and then claims for free slots again. An idle queue's jobs
//! thus take the path with the least between enqueue and start, and a backlog drains at
//! prefetching's pace.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::task::{JoinError, JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

use crate::completer::settle::{release_held, release_jobs};
use crate::db::claim::ClaimFor;
use crate::worker::claimed::Claimed;
use crate::worker::executor::run;
use crate::worker::held::Holder;
use crate::worker::listen::listen;
use crate::worker::shared::Shared;
use crate::worker::started::write_starts;
use crate::worker::tasks::Tasks;
use idem_postgres_core::extend::Resend;

/// How long calls cut at the shutdown's deadline get to settle before their tasks are aborted.
pub(crate) const SETTLE_AFTER_CUT: Duration = Duration::from_secs(5);

/// How the producer fills this process's slots.
pub(crate) struct ProducerConfig {
    pub concurrency: usize,
    pub batch_size: usize,
    pub poll_interval: Duration,
    pub listen: bool,
    /// Jobs claimed past the free slots (0: none); the most, when adaptive.
    pub prefetch: usize,
    /// Whether prefetching turns on under a backlog only, holding as many jobs as the slots
    /// start within a quarter lease ([`Holder::prefetch_now`](crate::worker::held::Holder::prefetch_now)).
    pub adaptive: bool,
}

/// What both ways of claiming work with: the workers' shared state, the producer's settings,
/// the shutdown's signal, the idle flag, the listener's wake-up and whether it listens yet,
/// and the job tasks.
struct Producing<'a> {
    shared: &'a Arc<Shared>,
    config: &'a ProducerConfig,
    stopping: &'a mut watch::Receiver<Option<Instant>>,
    idle: &'a watch::Sender<bool>,
    wake: &'a Arc<Notify>,
    listening: &'a AtomicBool,
    tasks: &'a mut Tasks,
}

/// Why a way of claiming stopped.
enum Ended {
    /// The workers stop; this many held jobs were given back.
    Stopping(usize),
    /// The other way of claiming suits the queue now.
    Switch,
}

/// What [`Workers::shutdown`](crate::Workers::shutdown) did with the jobs that were running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// Jobs that finished (and were settled) within the deadline.
    pub finished: usize,
    /// Jobs given back to the queue, their attempt not counted: those stopped at the deadline
    /// (their handlers were cut off mid-run, so they run again from the start), and those
    /// prefetched and never started.
    pub released: usize,
    /// Tasks of background work (a call's completion recorded after its caller went away, a
    /// key freed) still pending when the shutdown gave up waiting for them
    /// ([`idem_core::pending::drain`]); 0 when everything settled.
    pub unsettled: usize,
}

/// Runs the workers until `stopping` names a deadline. `idle` says whether they are idle: no job
/// running, and the last look for work found none at a time when new work would be announced
/// to them (see [`Workers::wait_idle`](crate::Workers::wait_idle)).
pub(crate) async fn produce(
    shared: Arc<Shared>,
    config: ProducerConfig,
    mut stopping: watch::Receiver<Option<Instant>>,
    idle: watch::Sender<bool>,
) -> ShutdownReport {
    let wake = Arc::new(Notify::new());
    let listening = Arc::new(AtomicBool::new(false));
    // Stopped with the producer however it ends.
    let _listener = config.listen.then(|| {
        let pool = shared.queue.store.pool().clone();
        let name = shared.queue.sql.name.clone();
        AbortOnDrop(tokio::spawn(
            listen(pool, name, wake.clone(), listening.clone()).in_current_span(),
        ))
    });
    let mut tasks = Tasks::new(config.concurrency);
    // Prefetched jobs' starts are written until the workers stopped (running jobs finish in
    // the shutdown, and their starts count should the process die meanwhile).
    let _starts = (config.prefetch > 0).then(|| {
        AbortOnDrop(tokio::spawn(
            write_starts(Arc::clone(&shared.holder)).in_current_span(),
        ))
    });
    let prefetching_now = &shared.holder.prefetching;
    let mut producing = Producing {
        shared: &shared,
        config: &config,
        stopping: &mut stopping,
        idle: &idle,
        wake: &wake,
        listening: &listening,
        tasks: &mut tasks,
    };
    let released = loop {
        let ended = if prefetching_now.load(Ordering::SeqCst) {
            prefetching(&mut producing).await
        } else {
            claiming_for_slots(&mut producing).await
        };
        match ended {
            Ended::Stopping(released) => break released,
            Ended::Switch => {
                let now = !prefetching_now.load(Ordering::SeqCst);
                tracing::debug!(prefetching = now, "the queue's backlog changed");
                prefetching_now.store(now, Ordering::SeqCst);
                if !now {
                    // A backlog a completion saw while prefetching is the one that just
                    // drained, not a new one.
                    let _ = shared.holder.backlog.take();
                }
            }
        }
    };
    let mut report = stop(&shared, &stopping, tasks.into_set()).await;
    report.released += released;
    report
}

/// Claims for free slots only: each completion claims the next job for its slot, and the
/// producer claims for slots that none refilled. Returns when `stopping` names a deadline, or,
/// prefetching adaptively, when a completion found the queue backlogged and the jobs are quick
/// enough to prefetch.
async fn claiming_for_slots(producing: &mut Producing<'_>) -> Ended {
    let Producing {
        shared,
        config,
        stopping,
        idle,
        wake,
        listening,
        tasks,
    } = producing;
    let adaptive = config.adaptive && config.prefetch > 0;
    let backlog = &shared.holder.backlog;
    'produce: loop {
        if stopping.borrow().is_some() {
            break;
        }
        while let Some(joined) = tasks.try_join_next() {
            log_join(joined);
        }
        if adaptive && backlog.take() && shared.holder.prefetch_now(config.concurrency) > 0 {
            return Ended::Switch;
        }
        let free = config.concurrency.saturating_sub(tasks.len());
        if free == 0 {
            tokio::select! {
                Some(joined) = tasks.join_next() => log_join(joined),
                () = backlog.noticed(), if adaptive => {}
                changed = stopping.changed() => if changed.is_err() { break },
            }
            continue;
        }
        let want = free.min(config.batch_size);
        let mut notified = pin!(wake.notified());
        notified.as_mut().enable();
        // Whether work enqueued from now on is announced to this producer.
        let announced = !config.listen || listening.load(Ordering::SeqCst);
        // Whether this look found all the work there was, at a time it would be announced.
        let mut drained = false;
        // Whether the global limit held work back from this claim.
        let mut held_back = false;
        let starved = match claim(&shared.holder, want, true).await {
            Ok((jobs, blocked, looked)) => {
                let got = jobs.len();
                held_back = blocked;
                // Work held back by the global limit is not drained: it runs once places free
                // up (one of ours ending, or the poll interval for other processes' places: no
                // notification says so). Nor is a queue whose claim did not look for lapsed
                // jobs (see `Rescue`).
                drained = got < want && announced && !blocked && looked;
                idle.send_replace(got == 0 && drained && tasks.is_empty());
                for job in jobs {
                    tasks.spawn_whole(run(shared.clone(), job, None).in_current_span());
                }
                // A short claim that did not look is followed at once by one that does
                // (unless the global limit held it back: then it waits for the poll), so
                // that idle workers have looked, and are not left waiting for a notification
                // that a lapse never sends.
                got < want && (looked || blocked)
            }
            Err(e) => {
                tracing::warn!(error = %e, "claiming queued jobs failed; trying again after the poll interval");
                true
            }
        };
        if starved {
            let mut poll = pin!(tokio::time::sleep(config.poll_interval));
            loop {
                tokio::select! {
                    () = &mut notified => break,
                    () = &mut poll => break,
                    changed = stopping.changed() => if changed.is_err() { break 'produce } else { break },
                    () = backlog.noticed(), if adaptive => break,
                    // A job ending does not make new work: no claim, but it may make us idle.
                    // Unless a look for lapsed jobs is due (a completion's claim that did not
                    // look came back short, say), or the global limit held work back (the
                    // ended job's place is free now): then claim, rather than call ourselves
                    // idle on an older look or wait for the poll.
                    Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                        log_join(joined);
                        if held_back || shared.holder.rescue.pending() {
                            break;
                        }
                        idle.send_replace(drained && tasks.is_empty());
                    }
                }
            }
        }
    }
    Ended::Stopping(0)
}

/// What a claim sent by [`prefetching`] answers: the claim's result, how many jobs it asked
/// for, and whether work enqueued after it was sent is announced.
type Sent = (Result<(Vec<Claimed>, bool, bool), sqlx::Error>, usize, bool);

/// Claims for the free slots and up to `prefetch` more, holds the claimed jobs on their lease,
/// and starts each as a slot frees up (a slot frees when its handler ends: the outcome is
/// written behind it). A claim is sent while jobs run, once the held jobs fall to half the
/// prefetch. A job not started within half its lease (the slots are slower than the claims
/// thought) goes back to the queue, its attempt not counted, rather than start on a lease
/// about to lapse (`Claimed::start_by`, which every claimed job keeps). Returns when
/// `stopping` names a deadline, once the claim on the wire, if any, is answered, having given
/// back the jobs it held and did not start (saying how many). Prefetching adaptively, it also
/// returns once a claim came back short and nothing is held or on the wire: the backlog is
/// gone, and the next jobs are best claimed for free slots.
async fn prefetching(producing: &mut Producing<'_>) -> Ended {
    let Producing {
        shared,
        config,
        stopping,
        idle,
        wake,
        listening,
        tasks,
    } = producing;
    // Jobs running or writing their outcome, together at most the jobs a claim could hold: a
    // slot frees when its handler ends, and no job starts while that many are on their way (so
    // a crash repeats at most `concurrency + prefetch` jobs, and a slow database holds the next
    // jobs back). Fewer (as many as slots, say) would leave one worker waiting for each
    // outcome's statement.
    let most_tasks = config.concurrency + config.prefetch;
    let mut held: VecDeque<Claimed> = VecDeque::new();
    let mut sent: Option<Pin<Box<dyn Future<Output = Sent> + Send>>> = None;
    // Whether the claim in `sent` was polled: one never polled was never sent.
    let on_wire = Arc::new(AtomicBool::new(false));
    // The last claim came back short: the next waits for a notification or the poll.
    let mut starved = false;
    // Whether the last claim found all the work there was, at a time it would be announced.
    let mut drained = false;
    let mut notified = Box::pin(Arc::clone(wake).notified_owned());
    let mut poll = pin!(tokio::time::sleep(config.poll_interval));
    loop {
        if stopping.borrow().is_some() {
            break;
        }
        let mut ended = false;
        while let Some(joined) = tasks.try_join_next() {
            log_join(joined);
            ended = true;
        }
        let prefetch = if config.adaptive {
            shared.holder.prefetch_now(config.concurrency)
        } else {
            config.prefetch
        };
        // The backlog is gone (or the jobs slowed down past prefetching): claim for free
        // slots, at once (the short claim may have missed jobs announced since).
        if config.adaptive && held.is_empty() && sent.is_none() && (starved || prefetch == 0) {
            return Ended::Switch;
        }
        // Before calling themselves idle (their last job ended), or once a look for lapsed
        // jobs is due, the workers claim: a job may have lapsed since the last look, and
        // nothing announces a lapse.
        if ended && starved && (tasks.is_empty() || shared.holder.rescue.pending()) {
            shared.holder.rescue.look_again();
            starved = false;
        }
        // Held jobs past their start (they are in claim order, so in `start_by` order) go
        // back, whether or not a slot is free.
        let now = Instant::now();
        let mut expired = Vec::new();
        while held.front().is_some_and(|job| now >= job.start_by) {
            expired.extend(held.pop_front());
        }
        if !expired.is_empty() {
            release_jobs(&shared.holder, &expired).await;
        }
        while !held.is_empty() && tasks.len() < most_tasks {
            let Some(slot) = tasks.try_slot() else {
                break;
            };
            let Some(job) = held.pop_front() else {
                break;
            };
            tasks.spawn(run(shared.clone(), job, Some(slot)).in_current_span());
        }
        let want = (config.concurrency + prefetch).saturating_sub(tasks.busy() + held.len());
        let low = held.len() <= prefetch / 2;
        if sent.is_none() && !starved && want > 0 && low {
            notified = Box::pin(Arc::clone(wake).notified_owned());
            notified.as_mut().enable();
            let announced = !config.listen || listening.load(Ordering::SeqCst);
            let holder = Arc::clone(&shared.holder);
            let on_wire = Arc::clone(&on_wire);
            sent = Some(Box::pin(async move {
                on_wire.store(true, Ordering::SeqCst);
                (claim(&holder, want, false).await, want, announced)
            }));
        }
        idle.send_replace(drained && held.is_empty() && tasks.is_empty() && sent.is_none());
        let next_expiry = held.front().map(|job| job.start_by);
        tokio::select! {
            (answer, want, announced) = async { sent.as_mut().expect("a claim on the wire").await }, if sent.is_some() => {
                sent = None;
                on_wire.store(false, Ordering::SeqCst);
                match answer {
                    Ok((jobs, _, looked)) => {
                        let got = jobs.len();
                        drained = got < want && announced && looked;
                        starved = got < want && looked;
                        held.extend(jobs);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "claiming queued jobs failed; trying again after the poll interval");
                        drained = false;
                        starved = true;
                    }
                }
                if starved {
                    poll.as_mut().reset(Instant::now() + config.poll_interval);
                }
            }
            () = tasks.slot_freed(), if !held.is_empty() && tasks.len() < most_tasks => {}
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                log_join(joined);
                if starved && (tasks.is_empty() || shared.holder.rescue.pending()) {
                    shared.holder.rescue.look_again();
                    starved = false;
                }
            }
            () = tokio::time::sleep_until(next_expiry.unwrap_or(now)), if next_expiry.is_some() => {}
            () = &mut notified, if starved => starved = false,
            () = &mut poll, if starved => starved = false,
            changed = stopping.changed() => if changed.is_err() { break },
        }
    }
    // The jobs held and not started go back now, not after the running ones finish: with those
    // of the claim on the wire, once it is answered (a claim never polled was never sent).
    let mut unstarted: Vec<Claimed> = held.into_iter().collect();
    if let Some(sent) = sent {
        if on_wire.load(Ordering::SeqCst) {
            if let (Ok((jobs, ..)), ..) = sent.await {
                unstarted.extend(jobs);
            }
        }
    }
    Ended::Stopping(release_jobs(&shared.holder, &unstarted).await)
}

/// Stops the workers at the deadline `stopping` names: waits for running jobs until then, cuts
/// the rest, and gives every claim still held back to the queue.
async fn stop(
    shared: &Arc<Shared>,
    stopping: &watch::Receiver<Option<Instant>>,
    mut tasks: JoinSet<()>,
) -> ShutdownReport {
    // From now on completions claim no next job (see `job_store`).
    shared.holder.stopping.store(true, Ordering::SeqCst);
    let deadline = stopping.borrow().unwrap_or_else(Instant::now);
    while let Some(joined) = tasks.try_join_next() {
        log_join(joined);
    }
    let running = tasks.len();
    let _ = tokio::time::timeout_at(deadline, async {
        while let Some(joined) = tasks.join_next().await {
            log_join(joined);
        }
    })
    .await;
    let finished = running - tasks.len();
    // Cut the handlers still running, and let their calls settle: a job whose handler just
    // finished is recorded as done, the others go back to the queue. Aborting the tasks
    // instead could cut a finished job's completion and run it again. A call that cannot
    // settle in time (its store unreachable) is aborted; its job returns with its lease.
    shared.cut.send_replace(true);
    let _ = tokio::time::timeout(SETTLE_AFTER_CUT, async {
        while let Some(joined) = tasks.join_next().await {
            log_join(joined);
        }
    })
    .await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let released = release_held(&shared.holder).await + shared.cut_released.load(Ordering::SeqCst);
    tracing::info!(finished, released, "idem queue workers stopped");
    ShutdownReport {
        finished,
        released,
        unsettled: 0,
    }
}

/// A background task that stops when this is dropped.
pub(crate) struct AbortOnDrop<T>(pub JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn log_join(joined: Result<(), JoinError>) {
    if let Err(e) = joined {
        if e.is_panic() {
            tracing::error!(error = %e, "an idem queue job task panicked outside its handler");
        }
    }
}

/// Claims up to `limit` jobs of the holder's queue in one statement, which also reserves the
/// idempotency record's fence of each job whose key has none, and notes them as held. A queue
/// with a global limit is claimed in a transaction under its advisory lock, so that the count
/// of its running jobs the statement reads (on a snapshot taken after the lock) is not stale.
/// Also says whether the global limit held jobs back (it claimed fewer than `limit`, and the
/// limit is reached), and whether it looked for jobs whose lease lapsed (`Rescue`).
/// `started`: whether the claim notes the jobs' start (claims for free slots), else each start
/// is noted when it happens (see `started`).
async fn claim(
    holder: &Holder,
    limit: usize,
    started: bool,
) -> Result<(Vec<Claimed>, bool, bool), sqlx::Error> {
    let wanted = limit;
    let looked = holder.rescue.due();
    let claim = ClaimFor {
        limit: i64::try_from(limit).unwrap_or(i64::MAX),
        lease: holder.lease,
        worker: &holder.worker,
        queue: &holder.queue,
        rescue: looked,
        started,
        start_by: crate::worker::claimed::start_by(Instant::now(), holder.lease),
    };
    let sql = &holder.sql.claim;
    // Never sent again: a claim applied but unanswered would leave its jobs claimed while a
    // second claim took others; unanswered, they return to the queue when their lease lapses.
    let (claimed, blocked) = match holder.global_limit {
        None => (
            idem_postgres_core::on_connection!(holder.store, Resend::Never, conn => sql.claim(conn, &claim))?,
            false,
        ),
        Some(global) => {
            let global = i64::try_from(global).unwrap_or(i64::MAX);
            idem_postgres_core::on_connection!(holder.store, Resend::Never, conn => sql.claim_limited(conn, &claim, global))?
        }
    };
    let mut claimed = claimed;
    for job in &mut claimed {
        job.start_noted = started;
        holder.held.hold(job);
    }
    let lapsed = claimed.iter().filter(|job| job.lapsed).count();
    // Held back, it could take only what it took: the places the limit left.
    let limit = if blocked { claimed.len() } else { wanted };
    holder.rescue.took(looked, lapsed, claimed.len(), limit);
    Ok((claimed, blocked, looked))
}
