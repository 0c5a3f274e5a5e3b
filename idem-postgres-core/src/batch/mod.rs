//! Adaptive batching: the claims (and the completions) of concurrent calls share one statement.
//!
//! A call puts its request in a queue. When fewer batches than the store has connections are
//! on the wire, it starts a driver; otherwise a driver that is running takes the request as soon
//! as its statement returns. A driver takes everything queued (up to
//! [`MAX_BATCH`](policy::MAX_BATCH), and never two requests for one record), sends it as one
//! statement through its operation's executor, answers each caller, and goes on
//! until the queue is empty. So a lone call is sent at once, in a batch of one, and under load a
//! batch is whatever queued while the previous statement was on the wire: nobody waits for a
//! batch to fill.
//!
//! A driver that finds more queued when its statement returns puts the next statement on the
//! wire first and answers the last one's callers right after, in the same poll: waking them
//! (a system call when the other worker sleeps) does not keep its connection idle, and the
//! callers it wakes queue for the statement after, so batches stay full.
//!
//! Drivers run in tasks of their own, so a caller that is cancelled never cancels a statement
//! that carries other callers' requests. Every request is answered: with its own result, or
//! with an error when the driver could not finish (its runtime shut down, or it panicked).
//!
//! When a batch is cut, paired or deferred is the policy's, in one place: `policy.rs`.

use std::collections::{HashSet, VecDeque};
use std::future::{poll_fn, Future};
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use idem_core::{Operation, StoreError};
use tokio::sync::oneshot;

use crate::error::is_connection_lost;
use crate::error::{store_error, unreachable_copy};

mod policy;

#[cfg(test)]
use policy::MAX_BATCH;
use policy::{on_one_worker, BackOfRunQueue};

/// One kind of batched operation. The batcher only queues, groups and answers requests: how a
/// statement reaches the database is the operation's, through its executor.
pub trait Op: Send + Sync + Sized + 'static {
    /// What the operation's statements are sent through (a store and its connections); the
    /// driver's task keeps a clone.
    type Executor: Clone + Send + Sync + 'static;
    /// What one caller asks for (owned: it travels to the driver's task).
    type Request: Send + Sync + 'static;
    /// What one caller is answered.
    type Answer: Send + 'static;

    /// Feeds the record `request` names to `state`: two requests for one record never share a
    /// statement (a batch with the same key twice could answer both from one row).
    fn record(request: &Self::Request, state: &mut impl Hasher);

    /// What a failed batch is logged as ("claim", "completion").
    const NAME: &'static str;

    /// The step a failure is reported as.
    const OPERATION: Operation;

    /// Whether a statement whose connection was lost may be sent again: not when a first
    /// sending that was applied (its answer lost) and a second would both take effect (the
    /// queue's completions, which also claim jobs).
    const SEND_AGAIN: bool = true;

    /// Sends `batch` (two or more requests for distinct records) as one statement through
    /// `executor`, answering each request in order. It is sent once only (no retry on a
    /// connection found dead) unless [`SEND_AGAIN`](Op::SEND_AGAIN).
    fn many<'a>(
        executor: &'a Self::Executor,
        batch: &'a [Self::Request],
    ) -> impl Future<Output = Result<Vec<Self::Answer>, sqlx::Error>> + Send + 'a;

    /// Sends one request as a statement of its own (a batch of one, or a batch's call-by-call
    /// retry).
    fn one(
        executor: &Self::Executor,
        request: &Self::Request,
    ) -> impl Future<Output = Result<Self::Answer, StoreError>> + Send;

    /// Undoes what `answer` holds for a caller that went away before hearing it (its future was
    /// dropped while the request was on the wire): a claim acquired for nobody is released, a
    /// job claimed for nobody goes back to the queue. Called without waiting (anything that
    /// needs a statement is spawned). The default keeps the answer's effect: right for a write
    /// that stands whether or not its caller hears of it (a completion).
    fn orphaned(executor: &Self::Executor, request: Self::Request, answer: Self::Answer) {
        let _ = (executor, request, answer);
    }
}

/// Sends `batch` and answers each request, in order. A batch the database refuses is sent
/// again call by call, so a statement's failure is each request's own answer. A batch that
/// cannot reach the database (no connection came in time, or the one opened for it failed) is
/// not: each request would wait out the same timeout in turn, the last caller `size + 1` times
/// over. Every request gets that error at once.
async fn run<O: Op>(
    executor: &O::Executor,
    batch: &[O::Request],
) -> Vec<Result<O::Answer, StoreError>> {
    if batch.len() > 1 {
        let answers = O::many(executor, batch).await;
        match answers {
            Ok(answers) => return answers.into_iter().map(Ok).collect(),
            // Lost with the connection: the batch may have been applied, so it is not sent
            // again call by call either.
            Err(e) if !O::SEND_AGAIN && is_connection_lost(&e) => {
                let copies: Vec<_> = (1..batch.len())
                    .map(|_| StoreError::msg(format!("{}: {e}", O::NAME)).during(O::OPERATION))
                    .collect();
                return std::iter::once(Err(store_error(e).during(O::OPERATION)))
                    .chain(copies.into_iter().map(Err))
                    .collect();
            }
            Err(e) if unreachable_copy(&e).is_some() => {
                tracing::debug!(
                    error = %e,
                    size = batch.len(),
                    "a batched {} cannot reach the database; failing each of its calls",
                    O::NAME
                );
                let copies: Vec<_> = (1..batch.len())
                    .filter_map(|_| unreachable_copy(&e))
                    .collect();
                return std::iter::once(e)
                    .chain(copies)
                    .map(|e| Err(store_error(e).during(O::OPERATION)))
                    .collect();
            }
            Err(e) => tracing::debug!(
                error = %e,
                size = batch.len(),
                "a batched {} failed; sending each on its own",
                O::NAME
            ),
        }
    }
    let mut answers = Vec::with_capacity(batch.len());
    for request in batch {
        answers.push(O::one(executor, request).await);
    }
    answers
}

/// What a caller is sent: its request back (so that an answer nobody hears can be undone, see
/// [`Op::orphaned`]) and its answer.
type Answered<O> = (<O as Op>::Request, Result<<O as Op>::Answer, StoreError>);

struct Waiting<O: Op> {
    request: O::Request,
    answer: oneshot::Sender<Answered<O>>,
}

struct State<O: Op> {
    queue: VecDeque<Waiting<O>>,
    /// Drivers running (each with at most one statement on the wire).
    running: usize,
}

/// The queue of one batched operation.
pub struct Batcher<O: Op> {
    state: Mutex<State<O>>,
    drivers: usize,
    hasher: RandomState,
    /// `state.running`, readable without the lock: what the partner looks at.
    running: Arc<AtomicUsize>,
    /// The partner's drivers running, for a pair (see [`Batcher::pair`]).
    partner: Option<Arc<AtomicUsize>>,
}

impl<O: Op> std::fmt::Debug for Batcher<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("operation", &O::NAME)
            .field("drivers", &self.drivers)
            .field("queued", &self.queued())
            .finish()
    }
}

impl<O: Op> Batcher<O> {
    /// A batcher that runs at most `drivers` statements at once.
    pub fn new(drivers: usize) -> Batcher<O> {
        Batcher {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                running: 0,
            }),
            drivers: drivers.max(1),
            hasher: RandomState::new(),
            running: Arc::new(AtomicUsize::new(0)),
            partner: None,
        }
    }

    /// Two batchers that callers go through in turn (lease mode's claims, then completions),
    /// each running at most `drivers` statements at once. A new driver of one whose partner has
    /// no driver running splits its first batch (see the module's documentation).
    pub fn pair<P: Op>(drivers: usize) -> (Batcher<O>, Batcher<P>) {
        let mut first = Batcher::<O>::new(drivers);
        let mut second = Batcher::<P>::new(drivers);
        first.partner = Some(second.running.clone());
        second.partner = Some(first.running.clone());
        (first, second)
    }

    /// How many statements it runs at most at once.
    pub fn drivers(&self) -> usize {
        self.drivers
    }

    /// How many requests wait for a statement.
    pub fn queued(&self) -> usize {
        self.lock().queue.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<O>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a driver in (`+1`) or out (`-1`), under the lock.
    fn count_driver(&self, state: &mut State<O>, started: bool) {
        if started {
            state.running += 1;
        } else {
            state.running -= 1;
        }
        self.running.store(state.running, Ordering::Relaxed);
    }

    /// The most requests the next batch takes ([`policy::batch_limit`]), with whether the
    /// partner has no driver running.
    fn limit(&self, queued: usize, may_split: bool) -> usize {
        let partner_idle = self
            .partner
            .as_ref()
            .is_some_and(|running| running.load(Ordering::Relaxed) == 0);
        policy::batch_limit(queued, may_split, partner_idle)
    }

    /// Takes the next batch off the queue, or retires the calling driver when the queue is
    /// empty (under the same lock a caller queues under, so no request is left without one).
    fn next_batch(&self, retired: &mut bool, may_split: bool) -> Vec<Waiting<O>> {
        let mut state = self.lock();
        // A request whose caller went away is never sent: nobody would run what it claims.
        state.queue.retain(|waiting| !waiting.answer.is_closed());
        let limit = self.limit(state.queue.len(), may_split);
        let Some(first) = state.queue.pop_front() else {
            self.count_driver(&mut state, false);
            *retired = true;
            return Vec::new();
        };
        let mut batch = vec![first];
        if state.queue.is_empty() {
            return batch;
        }
        let hash = |request: &O::Request| {
            let mut h = self.hasher.build_hasher();
            O::record(request, &mut h);
            h.finish()
        };
        let mut seen: HashSet<u64> = HashSet::from([hash(&batch[0].request)]);
        let mut deferred = Vec::new();
        while batch.len() < limit {
            let Some(waiting) = state.queue.pop_front() else {
                break;
            };
            // A hash collision only defers a request to the next statement.
            if seen.insert(hash(&waiting.request)) {
                batch.push(waiting);
            } else {
                deferred.push(waiting);
            }
        }
        for waiting in deferred.into_iter().rev() {
            state.queue.push_front(waiting);
        }
        batch
    }
}

/// Sends `request` in the next statement of `batcher` (through `executor`) and waits for
/// its answer.
pub async fn submit<O: Op>(
    executor: &O::Executor,
    batcher: &Arc<Batcher<O>>,
    request: O::Request,
) -> Result<O::Answer, StoreError> {
    let (answer, answered) = oneshot::channel();
    let slot = {
        let mut state = batcher.lock();
        state.queue.push_back(Waiting { request, answer });
        (state.running < batcher.drivers).then(|| {
            batcher.count_driver(&mut state, true);
            Slot {
                batcher: batcher.clone(),
                retired: false,
            }
        })
    };
    // The slot goes into the driver's future, so a driver dropped before it ever ran still
    // gives its place back.
    if let Some(slot) = slot {
        let driver = drive::<O>(executor.clone(), slot);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(driver);
            }
            // No Tokio runtime to spawn on: drive in this call (it cannot be cancelled apart
            // from the caller's own future, which then holds the only requests it took).
            Err(_) => driver.await,
        }
    }
    let mut waiting = Awaiting::<O> {
        executor,
        answered: Some(answered),
    };
    let answered = waiting.answered.as_mut().expect("set above");
    let result = match answered.await {
        Ok((_request, result)) => result,
        Err(_) => Err(StoreError::msg(
            "the statement carrying this request was abandoned (its runtime shut down); it may \
             or may not have been applied",
        )),
    };
    waiting.answered = None;
    result
}

/// A caller's wait for its answer. Dropped before the answer was taken (the caller went away),
/// it closes the channel, so the driver skips the request if it is still queued or undoes its
/// answer ([`Op::orphaned`]) if it comes later, and undoes an answer that came already.
struct Awaiting<'a, O: Op> {
    executor: &'a O::Executor,
    answered: Option<oneshot::Receiver<Answered<O>>>,
}

impl<O: Op> Drop for Awaiting<'_, O> {
    fn drop(&mut self) {
        let Some(mut answered) = self.answered.take() else {
            return;
        };
        answered.close();
        if let Ok((request, Ok(answer))) = answered.try_recv() {
            O::orphaned(self.executor, request, answer);
        }
    }
}

/// Runs batches, holding `slot`, until the queue is empty.
async fn drive<O: Op>(executor: O::Executor, mut slot: Slot<O>) {
    // Let the callers woken with this one queue first (see `BackOfRunQueue`). Only here: once
    // running, a driver's next batch is whatever queued while its statement was on the wire.
    BackOfRunQueue { yielded: false }.await;
    let mut may_split = on_one_worker();
    let mut answered = None;
    loop {
        let batch = slot.batcher.next_batch(&mut slot.retired, may_split);
        may_split = false;
        if batch.is_empty() {
            answer::<O>(&executor, answered);
            return;
        }
        let (requests, answers): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|w| (w.request, w.answer)).unzip();
        let results = {
            let mut statement = pin!(run::<O>(&executor, &requests));
            // The next statement goes on the wire before the last one's callers are woken.
            // Polling it once never suspends this task, so the last answers are sent within
            // the poll that received them: a driver dropped between two polls holds none back.
            let sent = poll_fn(|cx| Poll::Ready(statement.as_mut().poll(cx))).await;
            answer::<O>(&executor, answered.take());
            match sent {
                Poll::Ready(results) => results,
                Poll::Pending => statement.await,
            }
        };
        debug_assert_eq!(results.len(), answers.len());
        answered = Some(Batch {
            answers,
            requests,
            results,
        });
    }
}

/// A statement's callers, their requests and its results, in order.
struct Batch<O: Op> {
    answers: Vec<oneshot::Sender<Answered<O>>>,
    requests: Vec<O::Request>,
    results: Vec<Result<O::Answer, StoreError>>,
}

/// Tells each caller of a batch its answer, if there is a batch; undoes the answers of callers
/// that went away meanwhile ([`Op::orphaned`]).
fn answer<O: Op>(executor: &O::Executor, answered: Option<Batch<O>>) {
    let Some(batch) = answered else {
        return;
    };
    let sends = batch.answers.into_iter().zip(batch.requests);
    for ((answer, request), result) in sends.zip(batch.results) {
        if let Err((request, Ok(orphan))) = answer.send((request, result)) {
            O::orphaned(executor, request, orphan);
        }
    }
}

/// A driver's place among the running ones, taken by the request that starts the driver. A
/// driver that ends without retiring (its task was dropped with its runtime, before or after it
/// first ran, or it panicked) gives its place back and fails every request still queued, so no
/// caller waits for a driver that will never come; the next request starts a new one.
struct Slot<O: Op> {
    batcher: Arc<Batcher<O>>,
    retired: bool,
}

impl<O: Op> Drop for Slot<O> {
    fn drop(&mut self) {
        if self.retired {
            return;
        }
        let stranded: Vec<_> = {
            let mut state = self.batcher.lock();
            self.batcher.count_driver(&mut state, false);
            state.queue.drain(..).collect()
        };
        drop(stranded); // each waiting caller sees its answer dropped: an error, never a hang
    }
}

/// A helper for [`Op::record`]: a record named by key and scope.
pub fn hash_record(key: &str, scope: &str, state: &mut impl Hasher) {
    key.hash(state);
    scope.hash(state);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An operation whose statements are never sent: these tests only take batches.
    struct Numbers;

    impl Op for Numbers {
        type Executor = ();
        type Request = u32;
        type Answer = ();

        fn record(request: &u32, state: &mut impl Hasher) {
            request.hash(state);
        }

        const NAME: &'static str = "number";
        const OPERATION: Operation = Operation::Claim;

        #[allow(clippy::manual_async_fn)]
        fn many<'a>(
            _: &'a (),
            _: &'a [u32],
        ) -> impl Future<Output = Result<Vec<()>, sqlx::Error>> + Send + 'a {
            async { unreachable!("no statement is sent") }
        }

        #[allow(clippy::manual_async_fn)]
        fn one(_: &(), _: &u32) -> impl Future<Output = Result<(), StoreError>> + Send {
            async { unreachable!("no statement is sent") }
        }
    }

    /// Queues `n` requests on `batcher` as callers do, counting in the driver the first starts;
    /// returns the callers' ends (a request whose caller is gone is never taken).
    #[must_use]
    fn queue(batcher: &Batcher<Numbers>, n: u32) -> Vec<oneshot::Receiver<Answered<Numbers>>> {
        let mut state = batcher.lock();
        let mut callers = Vec::new();
        for request in 0..n {
            let (answer, caller) = oneshot::channel();
            state.queue.push_back(Waiting { request, answer });
            callers.push(caller);
        }
        batcher.count_driver(&mut state, true);
        callers
    }

    fn sizes(batcher: &Batcher<Numbers>, may_split: bool) -> usize {
        let mut retired = false;
        batcher.next_batch(&mut retired, may_split).len()
    }

    #[test]
    fn a_new_driver_sends_half_first_while_its_partner_has_no_driver() {
        let (claims, completions) = Batcher::<Numbers>::pair::<Numbers>(1);
        let _callers1 = queue(&claims, 21);
        assert_eq!(sizes(&claims, true), 11, "half of 21, rounded up");
        assert_eq!(
            sizes(&claims, false),
            10,
            "the rest, as the driver's next statement"
        );

        // The partner has a driver running (its statement on the wire): no split.
        let _callers2 = queue(&completions, 4);
        let _callers3 = queue(&claims, 20);
        assert_eq!(sizes(&claims, true), 20);

        // Its driver retires: the next new driver splits again.
        assert_eq!(
            sizes(&completions, true),
            4,
            "its own partner had a driver running"
        );
        assert_eq!(
            sizes(&completions, false),
            0,
            "queue empty: the driver retires"
        );
        assert_eq!(completions.running.load(Ordering::Relaxed), 0);
        let _callers4 = queue(&claims, 6);
        assert_eq!(sizes(&claims, true), 3);
    }

    #[test]
    fn a_request_whose_caller_is_gone_is_never_taken() {
        let alone = Batcher::<Numbers>::new(1);
        let mut callers = queue(&alone, 5);
        callers.remove(3);
        callers.remove(1);
        let mut retired = false;
        let taken: Vec<u32> = alone
            .next_batch(&mut retired, false)
            .into_iter()
            .map(|waiting| waiting.request)
            .collect();
        assert_eq!(taken, [0, 2, 4]);
    }

    #[test]
    fn a_batcher_without_a_partner_never_splits() {
        let alone = Batcher::<Numbers>::new(1);
        let _callers5 = queue(&alone, 40);
        assert_eq!(sizes(&alone, true), 40);
        let _callers6 = queue(&alone, 300);
        assert_eq!(sizes(&alone, true), MAX_BATCH, "at most MAX_BATCH");
    }

    #[test]
    fn a_split_never_goes_over_max_batch_nor_under_one() {
        let (claims, _completions) = Batcher::<Numbers>::pair::<Numbers>(1);
        let _callers7 = queue(&claims, 1);
        assert_eq!(sizes(&claims, true), 1, "a lone request goes at once");
        let _callers8 = queue(&claims, 2 * MAX_BATCH as u32 + 2);
        assert_eq!(sizes(&claims, true), MAX_BATCH);
    }
}
