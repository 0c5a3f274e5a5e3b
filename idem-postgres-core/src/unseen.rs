//! Parameters the planner does not read, so that a connection with the server's
//! `plan_cache_mode = auto` plans a statement once instead of at every execution.

/// Parameter `param` cast to `ty`, as a one-row subquery the server runs once per execution:
/// the planner does not read its value, so a custom plan estimates it as the generic plan does.
///
/// A connection that keeps the server's `plan_cache_mode = auto` (the pool's, with
/// [`through_pool`](crate::PgStoreBuilder::through_pool), or a user's pool running a
/// [`ClaimBatch`](crate::own_table::ClaimBatch)) plans a statement anew at every execution
/// for as long as its custom plans cost less than its generic plan. Where a custom plan reads a
/// claim's `LIMIT` (a job or a few, against a tenth of the table in the generic plan) or a
/// batch's number of keys (one, against a thousand), it always does, and for statements as
/// short as the work queue's claims, planning each execution costs more than running it.
pub fn unseen(param: &str, ty: &str) -> String {
    format!("(SELECT {param}::{ty})::{ty}")
}
