//! Rescue: what a claimed job becomes when the worker that ran its previous attempt stopped
//! without settling it (crashed, was killed, or lost the database) and its lease lapsed.
//!
//! The claim statement itself takes such jobs back, with their attempt counted, when the
//! workers look for them (`held::Rescue` says when), so no separate sweep
//! is needed. What remains is the decision for a job whose *last* attempt was cut off: it is
//! dead-lettered with an error that says so, rather than run beyond its `max_attempts`.

use crate::claimed::Claimed;
use crate::completer::Settle;

/// `Some(how to settle)` when `job` must not run: its attempts are used up.
pub(crate) fn rescue(job: &Claimed) -> Option<Settle> {
    (job.counted > job.max_attempts).then(|| Settle::Dead {
        error: "the worker running its last attempt stopped without settling it (crashed, \
                killed or cut off from the database) and its lease lapsed"
            .to_owned(),
    })
}
