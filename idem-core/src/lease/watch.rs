//! The lease watch: one thread for the whole process that starts a claim's renewal when its
//! first renewal falls due.
//!
//! Most bodies finish long before a third of their lease, so most claims are never renewed.
//! Spawning a renewal task for every call (and yielding so it starts before the body can block
//! the thread) cost more than the rest of a call on the in-memory store. Instead a call puts
//! its claim on the watch (a slot in one table: a lock and a write) and takes it off when it
//! settles. The watch's thread sleeps until the earliest first renewal of the claims on it;
//! for each one still running by then it spawns the renewal task on the call's runtime, which
//! from then on renews every third of a lease as before.
//!
//! The watch thread is not a runtime worker, so a body that blocks its worker does not stop
//! it, and a task it spawns goes to the runtime's shared queue, which any free worker takes.

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::task::AbortHandle;

use crate::context::CallContext;

/// Claims whose first renewal falls due within this of the watch's wake-up are started in
/// the same wake-up (a renewal a little early is harmless; the watch wakes less often).
const SLACK: Duration = Duration::from_millis(5);

/// The claims on the watch.
struct Watch {
    table: Mutex<Table>,
    /// Signalled when a claim's first renewal falls due before the watch means to wake.
    wake: Condvar,
}

#[derive(Default)]
struct Table {
    slots: Vec<Slot>,
    /// Indexes of free slots.
    free: Vec<usize>,
    /// When the watch thread next wakes by itself (`None`: only when signalled).
    wakes_at: Option<Instant>,
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
    Renewing(AbortHandle),
}

fn watch() -> &'static Watch {
    static WATCH: OnceLock<&'static Watch> = OnceLock::new();
    WATCH.get_or_init(|| {
        let watch: &'static Watch = Box::leak(Box::new(Watch {
            table: Mutex::new(Table::default()),
            wake: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("idem-lease-watch".into())
            .spawn(move || watch.run())
            .expect("idem: could not start the lease watch thread");
        watch
    })
}

impl Watch {
    fn table(&self) -> MutexGuard<'_, Table> {
        // Every step leaves the table whole, so a poisoned lock is safe to keep using.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self) {
        let mut table = self.table();
        loop {
            let now = Instant::now();
            let mut next: Option<Instant> = None;
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
                let task = runtime.spawn(async move {
                    let never = super::keep_renewed(&context, lease).await;
                    match never {}
                });
                *slot = Slot::Renewing(task.abort_handle());
            }
            table.wakes_at = next;
            table = match next {
                None => self.wake.wait(table).unwrap_or_else(|e| e.into_inner()),
                Some(at) => {
                    let timeout = at.saturating_duration_since(now);
                    let waited = self.wake.wait_timeout(table, timeout);
                    waited.unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
    }
}

/// A claim on the watch: taken off (and its renewal task, if started, stopped) when dropped.
#[derive(Debug)]
pub(crate) struct Watched {
    slot: usize,
}

/// Puts the claim of the call `context` on the watch: renewed every [`super::renew_every`]
/// from one interval after now, for as long as the returned guard lives.
///
/// # Panics
///
/// Outside a Tokio runtime (the renewal runs on the caller's runtime).
pub(crate) fn start(context: &CallContext, lease: Duration) -> Watched {
    let runtime = Handle::current();
    let due = Instant::now() + super::renew_every(lease);
    let watch = watch();
    let mut table = watch.table();
    let waiting = Slot::Waiting {
        due,
        runtime,
        context: context.clone(),
        lease,
    };
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
    if table.wakes_at.is_none_or(|at| due < at) {
        table.wakes_at = Some(due);
        watch.wake.notify_one();
    }
    Watched { slot }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let mut table = watch().table();
        let slot = std::mem::replace(&mut table.slots[self.slot], Slot::Free);
        table.free.push(self.slot);
        drop(table);
        // Outside the lock: the call's context (and what it holds) is dropped here too.
        if let Slot::Renewing(task) = slot {
            task.abort();
        }
    }
}
