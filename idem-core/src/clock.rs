//! Where a store gets the time: the system clock, or a manual one for tests.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// A source of wall-clock time for a store's leases and retention.
///
/// Stores that keep time themselves (PostgreSQL uses the database's `now()`) do not need one.
pub trait Clock: fmt::Debug + Send + Sync {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that only moves when told to, so lease expiry can be tested without sleeping.
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
    now: Arc<Mutex<SystemTime>>,
}

impl ManualClock {
    /// A clock standing at the current system time.
    pub fn new() -> ManualClock {
        ManualClock::at(SystemTime::now())
    }

    /// A clock standing at `at`.
    pub fn at(at: SystemTime) -> ManualClock {
        ManualClock {
            now: Arc::new(Mutex::new(at)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }
}

impl Default for ManualClock {
    fn default() -> ManualClock {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}
