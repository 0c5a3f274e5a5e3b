//! Rescue: what a claimed job becomes when the worker that ran its previous attempt stopped
//! without settling it (crashed, was killed, or lost the database) and its lease lapsed.
//!
//! The claim statement itself takes such jobs back, with their attempt counted, when the
//! workers look for them ([`Rescue`] says when), so no separate sweep
//! is needed. What remains is the decision for a job whose *last* attempt was cut off: it is
//! dead-lettered with an error that says so, rather than run beyond its `max_attempts`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::completer::settlement::Settle;
use crate::worker::claimed::Claimed;

/// `Some(how to settle)` when `job` must not run: its attempts are used up.
pub(crate) fn rescue(job: &Claimed) -> Option<Settle> {
    (job.counted > job.max_attempts).then(|| Settle::Dead {
        error: "the worker running its last attempt stopped without settling it (crashed, \
                killed or cut off from the database) and its lease lapsed"
            .to_owned(),
    })
}

/// When a claim also looks for jobs whose lease lapsed (their workers stopped), to take them
/// back first: the workers' first claim looks, then one claim a second (or every half lease,
/// if that is shorter), and every claim while looks keep finding as many lapsed jobs as they
/// could take (a dead worker's jobs come back as fast as slots free up, before waiting jobs).
/// Not every claim: a look reads the queue's running jobs' index up to now, past the entries
/// of every job finished more than a lease ago until VACUUM removes them.
///
/// So a lapsed job waits up to an interval longer than its lease, or until the workers' next
/// claim if that comes later (an idle worker claims at its poll interval). A claim that could
/// take nothing (a global limit reached), or that did not look and found fewer waiting jobs
/// than it could take, makes the next claim look: workers call themselves idle only after a
/// look found nothing. A claim that looked and was cut off delays the next look by an
/// interval.
#[derive(Debug)]
pub(crate) struct Rescue {
    epoch: Instant,
    interval: Duration,
    /// The next look is due this many microseconds after `epoch`.
    next: AtomicU64,
}

impl Rescue {
    /// Looks for a `lease`'s lapsed jobs: due at once.
    pub fn new(lease: Duration) -> Rescue {
        Rescue {
            epoch: Instant::now(),
            interval: (lease / 2).min(Duration::from_secs(1)),
            next: AtomicU64::new(0),
        }
    }

    /// Whether the claim about to be sent should look for lapsed jobs; when it should, the next
    /// look is due an interval from now (one claim looks, not every claim sent meanwhile).
    pub fn due(&self) -> bool {
        self.due_at(self.epoch.elapsed())
    }

    /// Whether the next claim would look (without using the look up).
    pub fn pending(&self) -> bool {
        self.pending_at(self.epoch.elapsed())
    }

    /// `pending` at `now` (since `epoch`).
    fn pending_at(&self, now: Duration) -> bool {
        u64::try_from(now.as_micros()).unwrap_or(u64::MAX) >= self.next.load(Ordering::SeqCst)
    }

    /// What a claim took: `got` jobs where it could take `limit`, `lapsed` of them taken over
    /// from stopped workers; `looked` says whether it looked for those. The next claim looks
    /// again when lapsed jobs filled this one (more may be behind them), when this one could
    /// take nothing (a global limit), or when it did not look and came back short (waiting
    /// jobs ran out; only a look says whether lapsed ones remain).
    pub fn took(&self, looked: bool, lapsed: usize, got: usize, limit: usize) {
        let again = if looked {
            lapsed >= limit || limit == 0
        } else {
            got < limit
        };
        if again {
            self.next.store(0, Ordering::SeqCst);
        }
    }

    /// Makes the next claim look: a worker about to call itself idle looks once more, as a
    /// job may have lapsed since the last look.
    pub fn look_again(&self) {
        self.next.store(0, Ordering::SeqCst);
    }

    /// `due` at `now` (since `epoch`).
    fn due_at(&self, now: Duration) -> bool {
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let now = micros(now);
        let next = self.next.load(Ordering::SeqCst);
        now >= next
            && self
                .next
                .compare_exchange(
                    next,
                    now.saturating_add(micros(self.interval)),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::Rescue;
    use std::time::Duration;

    /// The first claim looks for lapsed jobs, the next ones within the interval do not, the
    /// first after it does (a second, for a lease of a minute; half a lease when shorter).
    #[test]
    fn a_look_for_lapsed_jobs_is_due_at_once_then_once_per_interval() {
        let ms = Duration::from_millis;
        let rescue = Rescue::new(Duration::from_secs(60));
        assert!(rescue.due_at(ms(0)));
        assert!(!rescue.due_at(ms(1)));
        assert!(!rescue.due_at(ms(999)));
        assert!(rescue.due_at(ms(1000)));
        assert!(!rescue.due_at(ms(1500)));
        assert!(rescue.due_at(ms(2000)));
        let short = Rescue::new(ms(400));
        assert!(short.due_at(ms(0)));
        assert!(!short.due_at(ms(199)));
        assert!(short.due_at(ms(200)));
    }

    /// A look whose lapsed jobs filled its claim, or that could take nothing, makes the next
    /// claim look again, and so does a claim that did not look and came back short; a look
    /// that found fewer than it could take, and a full claim, do not.
    #[test]
    fn a_look_that_filled_its_claim_with_lapsed_jobs_looks_again() {
        let ms = Duration::from_millis;
        let rescue = Rescue::new(Duration::from_secs(60));
        assert!(rescue.due_at(ms(0)));
        assert!(!rescue.pending_at(ms(1)));
        rescue.took(true, 4, 4, 4);
        assert!(rescue.pending_at(ms(1)));
        assert!(rescue.due_at(ms(1)), "four of four: maybe more");
        rescue.took(true, 1, 4, 4);
        assert!(!rescue.due_at(ms(2)), "one of four: all there were");
        rescue.took(false, 0, 4, 4);
        assert!(!rescue.due_at(ms(3)), "a full claim that did not look");
        rescue.took(false, 0, 2, 4);
        assert!(rescue.due_at(ms(4)), "a short claim that did not look");
        rescue.took(true, 0, 0, 0);
        assert!(rescue.due_at(ms(5)), "nothing could be taken");
    }
}
