//! How many times a peer may try the token: a few failures are free, then each further one
//! waits twice as long as the last (from one second up to a quarter of an hour), and while a
//! peer waits every login from it is refused, the right token too, so guessing cannot go on
//! in the meantime. A failure is logged when it opens a wait, not at every try, so a guessing
//! peer does not flood the log.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures a peer may make before it waits.
pub(crate) const FREE_FAILURES: u32 = 5;
/// The first wait, doubled at each further failure.
const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait.
const LONGEST_WAIT: Duration = Duration::from_secs(15 * 60);
/// Peers remembered at most: past it, those not waiting are forgotten first.
const PEERS: usize = 10_000;

#[derive(Clone, Copy)]
struct Failures {
    count: u32,
    /// No login from this peer is tried before then.
    until: Option<Instant>,
    last: Instant,
}

/// The failures of each peer (`None`: a peer whose address the server was not given, counted
/// as one).
#[derive(Default)]
pub(crate) struct LoginLimit {
    peers: Mutex<HashMap<Option<IpAddr>, Failures>>,
}

impl LoginLimit {
    /// How long `peer` must still wait before a login is tried, if it must.
    pub fn wait(&self, peer: Option<IpAddr>, now: Instant) -> Option<Duration> {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let until = peers.get(&peer)?.until?;
        (until > now).then(|| until - now)
    }

    /// A failed login from `peer`: the wait it must now make, if any, and whether this failure
    /// is worth a line in the log (the first, and each that opens a wait).
    pub fn failed(&self, peer: Option<IpAddr>, now: Instant) -> (Option<Duration>, bool) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if peers.len() >= PEERS && !peers.contains_key(&peer) {
            // Forget those not waiting (or done waiting for an hour) first.
            peers.retain(|_, f| f.until.is_some_and(|until| until + LONGEST_WAIT > now));
            if peers.len() >= PEERS {
                // Still full: forget the peer that failed longest ago.
                if let Some(oldest) = peers.iter().min_by_key(|(_, f)| f.last).map(|(p, _)| *p) {
                    peers.remove(&oldest);
                }
            }
        }
        let entry = peers.entry(peer).or_insert(Failures {
            count: 0,
            until: None,
            last: now,
        });
        entry.count = entry.count.saturating_add(1);
        entry.last = now;
        if entry.count <= FREE_FAILURES {
            return (None, entry.count == 1);
        }
        let doublings = (entry.count - FREE_FAILURES - 1).min(20);
        let wait = FIRST_WAIT.saturating_mul(1 << doublings).min(LONGEST_WAIT);
        entry.until = Some(now + wait);
        (Some(wait), true)
    }

    /// A successful login from `peer`: its failures are forgotten.
    pub fn succeeded(&self, peer: Option<IpAddr>) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.remove(&peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_failures_are_free_then_each_waits_twice_as_long_and_a_success_forgets() {
        let limit = LoginLimit::default();
        let peer = Some("127.0.0.1".parse().unwrap());
        let other = Some("127.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        for n in 1..=FREE_FAILURES {
            let (wait, logged) = limit.failed(peer, t0);
            assert_eq!(wait, None);
            assert_eq!(logged, n == 1, "only the first free failure is logged");
        }
        assert_eq!(limit.wait(peer, t0), None);
        assert_eq!(limit.failed(peer, t0), (Some(Duration::from_secs(1)), true));
        assert_eq!(limit.wait(peer, t0), Some(Duration::from_secs(1)));
        assert_eq!(limit.wait(other, t0), None, "per peer");
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(limit.wait(peer, t1), None, "the wait is over");
        assert_eq!(limit.failed(peer, t1).0, Some(Duration::from_secs(2)));
        let mut t = t1;
        for _ in 0..30 {
            t += LONGEST_WAIT;
            limit.failed(peer, t);
        }
        assert_eq!(limit.wait(peer, t), Some(LONGEST_WAIT), "capped");
        limit.succeeded(peer);
        assert_eq!(limit.wait(peer, t), None);
        assert_eq!(limit.failed(peer, t).0, None, "counting starts again");
    }

    #[test]
    fn the_peers_remembered_are_bounded() {
        let limit = LoginLimit::default();
        let now = Instant::now();
        for i in 0..(PEERS as u32 + 50) {
            limit.failed(Some(IpAddr::from(i.to_be_bytes())), now);
        }
        assert!(limit.peers.lock().unwrap().len() <= PEERS);
    }
}
