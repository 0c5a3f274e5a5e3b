//! The lease watch: one thread for the whole process that starts a claim's renewal when its
//! first renewal falls due.
//!
//! Most bodies finish long before a third of their lease, so most claims are never renewed.
//! Spawning a renewal task for every call (and yielding so it starts before the body can block
//! the thread) would cost more than the rest of a call on the in-memory store. Instead a call
//! puts its claim on the watch (a slot in one table: a lock and a write) and takes it off when
//! it settles. The watch's thread sleeps until the earliest first renewal of the claims on it;
//! for each one still running by then it spawns the renewal task on the call's runtime, which
//! from then on renews every third of a lease ([`renew_every`]).
//!
//! The watch thread is not a runtime worker, so a body that blocks its worker does not stop
//! it, and a task it spawns goes to the runtime's shared queue, which any free worker takes.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use tokio::runtime::Handle;
use tokio::task::AbortHandle;

use super::renew::{keep_renewed, renew_every};
use crate::context::CallContext;

/// Claims whose first renewal falls due within this of the watch's wake-up are started in
/// the same wake-up (a renewal a little early is harmless; the watch wakes less often).
const SLACK: Duration = Duration::from_millis(5);

/// Tables the claims are spread over (by the registering thread), so that concurrent calls
/// rarely meet on one lock.
const TABLES: usize = 16;

/// With nothing to watch, the watch thread still asks to hear of first renewals due within
/// this for one more wait, then only when told: so a stream of short calls on short leases
/// wakes it about once a lease, not once a call, and an idle process lets it sleep.
const IDLE: Duration = Duration::from_secs(1);

/// Nothing to wake for (in `Watch::wakes_at`).
const NEVER: u64 = u64::MAX;

/// The claims on the watch.
struct Watch {
    /// Each on cache lines of its own: threads register in tables of their own, and sharing a
    /// line they would take it from each other on every call.
    tables: [CachePadded<Mutex<Table>>; TABLES],
    /// When the watch thread next wakes by itself, as nanoseconds since `origin`: a claim
    /// whose first renewal falls due earlier reports it (through `reported`).
    wakes_at: AtomicU64,
    /// The earliest first renewal reported since the watch thread's last look.
    reported: Mutex<Option<Instant>>,
    /// The watch thread waits on this (with `reported`).
    wake: Condvar,
    origin: Instant,
}

#[derive(Default)]
struct Table {
    slots: Vec<Slot>,
    /// Indexes of free slots.
    free: Vec<usize>,
}

enum Slot {
    Free,
    /// A claim whose renewal has not started.
    Waiting {
        due: Instant,
        runtime: Handle,
        context: CallContext,
        lease: Duration,
    },
    /// A claim whose renewal task runs.
    Renewing(Renewing),
}

/// A renewal task, and the lock it holds while a renewal is on the wire.
pub(crate) struct Renewing {
    task: AbortHandle,
    /// Held by the task for each renewal it sends; `true` once the renewal is stopped, so the
    /// task sends no more.
    wire: Arc<tokio::sync::Mutex<bool>>,
}

impl Renewing {
    /// Stops the renewal, waiting (for at most `bound`) for one on the wire to be answered
    /// first: a renewal that reached the store after the claim was settled could write to a
    /// settled key (a job's renewal writes the call's record when it has none). A renewal
    /// unanswered past the bound is cut on this side: by then the lease it renews has lapsed.
    pub async fn stop(self, bound: Duration) {
        let Renewing { task, wire } = self;
        // Cut while waiting, or past the bound, the task is stopped all the same.
        let _abort = AbortOnDrop(task);
        let stopped = tokio::time::timeout(bound, wire.lock()).await;
        if let Ok(mut stopped) = stopped {
            *stopped = true;
        }
    }
}

struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn watch() -> &'static Watch {
    static WATCH: OnceLock<&'static Watch> = OnceLock::new();
    WATCH.get_or_init(|| {
        let watch: &'static Watch = Box::leak(Box::new(Watch {
            tables: std::array::from_fn(|_| CachePadded::new(Mutex::new(Table::default()))),
            wakes_at: AtomicU64::new(NEVER),
            reported: Mutex::new(None),
            wake: Condvar::new(),
            origin: Instant::now(),
        }));
        std::thread::Builder::new()
            .name("idem-lease-watch".into())
            .spawn(move || watch.run())
            .expect("idem: could not start the lease watch thread");
        watch
    })
}

/// Every step leaves what a lock guards whole, so a poisoned lock is safe to keep using.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The table this thread registers its claims in.
fn table_of_this_thread() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static TABLE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % TABLES;
    }
    TABLE.with(|table| *table)
}

impl Watch {
    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(NEVER - 1)
    }

    fn run(&self) {
        let mut idle = false;
        loop {
            // While looking, every claim put on the watch reports its first renewal, so none
            // is missed between this look at its table and the wait below.
            self.wakes_at.store(NEVER, Ordering::SeqCst);
            *lock(&self.reported) = None;
            let next = self.start_due_renewals();
            let mut reported = lock(&self.reported);
            let now = Instant::now();
            let wake_at = match (next, *reported) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (next, reported) => next.or(reported),
            };
            let (wait_until, notify_before) = match wake_at {
                Some(at) => (Some(at), self.nanos(at)),
                None if idle => (None, NEVER),
                None => (Some(now + IDLE), self.nanos(now + IDLE)),
            };
            idle = wake_at.is_none();
            self.wakes_at.store(notify_before, Ordering::SeqCst);
            reported = match wait_until {
                None => self.wake.wait(reported).unwrap_or_else(|e| e.into_inner()),
                Some(at) => {
                    let timeout = at.saturating_duration_since(now);
                    let waited = self.wake.wait_timeout(reported, timeout);
                    waited.unwrap_or_else(|e| e.into_inner()).0
                }
            };
            drop(reported);
        }
    }

    /// Starts the renewal of every claim due (within [`SLACK`]); returns the earliest first
    /// renewal of the others.
    fn start_due_renewals(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for table in &self.tables {
            let mut table = lock(table);
            let now = Instant::now();
            for slot in &mut table.slots {
                let due = match slot {
                    Slot::Waiting { due, .. } => *due,
                    _ => continue,
                };
                if due > now + SLACK {
                    next = Some(next.map_or(due, |next| next.min(due)));
                    continue;
                }
                let Slot::Waiting {
                    runtime,
                    context,
                    lease,
                    ..
                } = std::mem::replace(slot, Slot::Free)
                else {
                    unreachable!("matched above")
                };
                // From outside the runtime: the task goes to its shared queue, so any free
                // worker starts it. On a runtime that has shut down it is dropped at once.
                let wire = Arc::new(tokio::sync::Mutex::new(false));
                let stopped = wire.clone();
                let task = runtime.spawn(async move {
                    keep_renewed(&context, lease, &stopped).await;
                });
                *slot = Slot::Renewing(Renewing {
                    task: task.abort_handle(),
                    wire,
                });
            }
        }
        next
    }

    /// Tells the watch thread of a first renewal due at `due`, if it would wake later.
    fn report(&self, due: Instant) {
        if self.nanos(due) >= self.wakes_at.load(Ordering::SeqCst) {
            return;
        }
        let mut reported = lock(&self.reported);
        *reported = Some(reported.map_or(due, |earliest| earliest.min(due)));
        self.wakes_at.fetch_min(self.nanos(due), Ordering::SeqCst);
        self.wake.notify_one();
    }
}

/// A claim on the watch: taken off (and its renewal task, if started, stopped) when dropped.
#[derive(Debug)]
pub(crate) struct Watched {
    table: usize,
    /// `None` once taken off.
    slot: Option<usize>,
}

/// Puts the claim of the call `context`, made at `claimed_at`, on the watch: renewed every
/// [`super::renew_every`] from one interval after it was made, for as long as the returned
/// guard lives.
///
/// # Panics
///
/// Outside a Tokio runtime (the renewal runs on the caller's runtime).
pub(crate) fn start(context: &CallContext, lease: Duration, claimed_at: Instant) -> Watched {
    let runtime = Handle::current();
    let due = claimed_at + renew_every(lease);
    let watch = watch();
    let table_index = table_of_this_thread();
    let waiting = Slot::Waiting {
        due,
        runtime,
        context: context.clone(),
        lease,
    };
    let mut table = lock(&watch.tables[table_index]);
    let slot = match table.free.pop() {
        Some(slot) => {
            table.slots[slot] = waiting;
            slot
        }
        None => {
            table.slots.push(waiting);
            table.slots.len() - 1
        }
    };
    drop(table);
    watch.report(due);
    Watched {
        table: table_index,
        slot: Some(slot),
    }
}

impl Watched {
    /// Takes the claim off the watch; returns its renewal task, if it was started.
    pub fn take(mut self) -> Option<Renewing> {
        self.take_slot()
    }

    fn take_slot(&mut self) -> Option<Renewing> {
        let slot = self.slot.take()?;
        let mut table = lock(&watch().tables[self.table]);
        let taken = std::mem::replace(&mut table.slots[slot], Slot::Free);
        table.free.push(slot);
        drop(table);
        // Outside the lock: the call's context (and what it holds) is dropped here too.
        match taken {
            Slot::Renewing(renewing) => Some(renewing),
            _ => None,
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(renewing) = self.take_slot() {
            renewing.task.abort();
        }
    }
}
