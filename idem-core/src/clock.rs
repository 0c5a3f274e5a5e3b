//! Where a store gets the time: the system clock, or a manual one for tests.
//!
//! A clock tells two times: the wall-clock time (`now`, for the times a store reports, such as
//! when a lease ends) and a monotonic one (`monotonic`, for deciding whether a lease or a
//! retention has run out). Only the monotonic time decides: a step of the wall clock (NTP, a VM
//! resumed, an operator's `date -s`) neither frees a live claim nor keeps a dead one.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// A source of time for a store's leases and retention.
///
/// Stores that keep time themselves (PostgreSQL uses the database's `now()`) do not need one.
pub trait Clock: fmt::Debug + Send + Sync {
    /// The current wall-clock time, for the times a store reports.
    fn now(&self) -> SystemTime;

    /// Time elapsed since an origin fixed for the clock, never going back and never jumping with
    /// the wall clock: what decides whether a lease or a retention has run out.
    fn monotonic(&self) -> Duration;
}

/// The operating system's clocks: [`SystemTime`] for reports, [`Instant`] for deciding.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn monotonic(&self) -> Duration {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed()
    }
}

/// A clock that only moves when told to, so lease expiry can be tested without sleeping.
/// [`advance`](ManualClock::advance) moves both of its times; [`set_wall`](ManualClock::set_wall)
/// steps only the wall clock, as NTP or a resumed VM does.
///
/// Clones share one time.
///
/// ```
/// use idem_core::clock::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let before = clock.now();
/// clock.advance(Duration::from_secs(31));
/// assert_eq!(clock.now().duration_since(before).unwrap(), Duration::from_secs(31));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    /// (wall clock, monotonic time).
    now: Arc<Mutex<(SystemTime, Duration)>>,
}

impl ManualClock {
    /// A clock standing at the current system time.
    pub fn new() -> ManualClock {
        ManualClock::at(SystemTime::now())
    }

    /// A clock standing at `at`.
    pub fn at(at: SystemTime) -> ManualClock {
        ManualClock {
            now: Arc::new(Mutex::new((at, Duration::ZERO))),
        }
    }

    fn times(&self) -> std::sync::MutexGuard<'_, (SystemTime, Duration)> {
        self.now.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets `by` pass: both the wall clock and the monotonic time move forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.times();
        now.0 += by;
        now.1 += by;
    }

    /// Steps the wall clock to `at` (forward or back) without any time passing.
    pub fn set_wall(&self, at: SystemTime) {
        self.times().0 = at;
    }
}

impl Default for ManualClock {
    fn default() -> ManualClock {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        self.times().0
    }

    fn monotonic(&self) -> Duration {
        self.times().1
    }
}
