//! The completer: how every claim ends. `completion.rs` is the common end, a job whose call
//! completed: one statement completes the call's record, marks the job done and claims the
//! next job for the freed slot, and the completions of concurrent jobs share a statement on
//! the queue's own batcher. `settle.rs` settles every other outcome (retried, dead, snoozed,
//! cancelled, given back) fenced by the claim's attempt, and gives held claims back at
//! shutdown. `rescue.rs` is the rescue of jobs whose worker stopped: when a claim looks for
//! lapsed jobs, and what becomes of one whose last attempt was cut off.

pub(crate) mod completion;
pub(crate) mod rescue;
pub(crate) mod settle;
pub(crate) mod settlement;
