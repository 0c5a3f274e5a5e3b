//! A producer's job tasks and the slots they hold. A job claimed for a free slot holds that
//! slot for its whole task (its completion may claim the next job for it); a prefetched job
//! holds a slot while its handler runs (see `executor::run`). One count serves both, so that
//! a producer switching between claiming for free slots and prefetching never runs more
//! handlers at once than its concurrency.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::{Id, JoinError, JoinSet};

use crate::worker::executor::Slot;

/// A producer's running job tasks.
pub(crate) struct Tasks {
    set: JoinSet<()>,
    slots: Arc<Semaphore>,
    /// Tasks that hold a slot for as long as they run: those claimed for free slots.
    whole: HashSet<Id>,
    concurrency: usize,
}

impl Tasks {
    /// No task yet, `concurrency` slots.
    pub fn new(concurrency: usize) -> Tasks {
        Tasks {
            set: JoinSet::new(),
            slots: Arc::new(Semaphore::new(concurrency)),
            whole: HashSet::new(),
            concurrency,
        }
    }

    /// Tasks not joined yet (running, or writing their outcome).
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether no task is left.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Slots in use: handlers running, and tasks that hold theirs throughout.
    pub fn busy(&self) -> usize {
        self.concurrency - self.slots.available_permits()
    }

    /// Spawns a job claimed for a free slot; its task holds the slot until it ends. There is
    /// one: the caller claimed for fewer jobs than `concurrency` less the tasks it has, and
    /// every slot in use belongs to one of them.
    pub fn spawn_whole<F>(&mut self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let took = self.slots.forget_permits(1);
        debug_assert_eq!(took, 1, "a free slot for a job claimed for one");
        let id = self.set.spawn(task).id();
        self.whole.insert(id);
    }

    /// A free slot, if there is one.
    pub fn try_slot(&self) -> Option<Slot> {
        Arc::clone(&self.slots).try_acquire_owned().ok()
    }

    /// Ready once a slot is free (it gives the slot back at once); it borrows nothing, so that
    /// it can wait beside [`join_next`](Self::join_next).
    pub fn slot_freed(&self) -> impl Future<Output = ()> + Send + 'static {
        let slots = Arc::clone(&self.slots);
        async move {
            let _ = slots.acquire_owned().await;
        }
    }

    /// Spawns a job's task, given the slot its handler holds.
    pub fn spawn<F>(&mut self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.set.spawn(task);
    }

    /// A task that ended, if one did.
    pub fn try_join_next(&mut self) -> Option<Result<(), JoinError>> {
        let joined = self.set.try_join_next_with_id()?;
        Some(self.ended(joined))
    }

    /// Waits for a task to end; `None` when there is none.
    pub async fn join_next(&mut self) -> Option<Result<(), JoinError>> {
        let joined = self.set.join_next_with_id().await?;
        Some(self.ended(joined))
    }

    /// The tasks left, for the shutdown (no more are spawned).
    pub fn into_set(self) -> JoinSet<()> {
        self.set
    }

    fn ended(&mut self, joined: Result<(Id, ()), JoinError>) -> Result<(), JoinError> {
        let id = match &joined {
            Ok((id, ())) => *id,
            Err(e) => e.id(),
        };
        if self.whole.remove(&id) {
            self.slots.add_permits(1);
        }
        joined.map(|_| ())
    }
}
