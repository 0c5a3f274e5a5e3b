//! How many times a peer may try the token: a few failures are free, then each further one
//! waits twice as long as the last (from one second up to a quarter of an hour), and while a
//! peer waits every login from it is refused, the right token too, so guessing cannot go on
//! in the meantime. A failure is logged when it opens a wait, not at every try, so a guessing
//! peer does not flood the log.
//!
//! A peer is an IPv4 address or an IPv6 /64 (what one host is usually given, so an attacker
//! cannot take a fresh address per guess). The peers remembered are bounded; one is forgotten
//! only an hour after its last failure. While every place holds a peer that failed within the
//! hour, logins from peers not yet remembered wait too: the bound never lets guessing go on
//! unlimited from ever new addresses.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failures a peer may make before it waits.
pub(crate) const FREE_FAILURES: u32 = 5;
/// The first wait, doubled at each further failure.
const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait.
const LONGEST_WAIT: Duration = Duration::from_secs(15 * 60);
/// Peers remembered at most.
const PEERS: usize = 10_000;
/// How long after its last failure (and the end of its wait) a peer is remembered.
const REMEMBERED: Duration = Duration::from_secs(3600);
/// The wait of a peer not yet remembered while every place is taken.
const FULL_WAIT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy)]
struct Failures {
    count: u32,
    /// No login from this peer is tried before then.
    until: Option<Instant>,
    last: Instant,
}

impl Failures {
    fn remembered(&self, now: Instant) -> bool {
        let since = self.until.map_or(self.last, |until| until.max(self.last));
        since + REMEMBERED > now
    }
}

/// The failures of each peer (`None`: a peer whose address the server was not given, counted
/// as one).
#[derive(Default)]
pub(crate) struct LoginLimit {
    peers: Mutex<HashMap<Option<IpAddr>, Failures>>,
    /// Every place is taken: said once in the log when it happens.
    full: AtomicBool,
}

/// The peer an address counts as: itself for IPv4 (and IPv4-mapped IPv6), its /64 for IPv6.
fn peer_of(ip: Option<IpAddr>) -> Option<IpAddr> {
    match ip? {
        IpAddr::V6(v6) => Some(match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        }),
        v4 => Some(v4),
    }
}

impl LoginLimit {
    /// How long `ip` must still wait before a login is tried, if it must.
    pub fn wait(&self, ip: Option<IpAddr>, now: Instant) -> Option<Duration> {
        let peer = peer_of(ip);
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        match peers.get(&peer) {
            Some(failures) => {
                let until = failures.until?;
                (until > now).then(|| until - now)
            }
            None => self.full(&mut peers, now).then_some(FULL_WAIT),
        }
    }

    /// A failed login from `ip`: the wait it must now make, if any, and whether this failure
    /// is worth a line in the log (the first, and each that opens a wait).
    pub fn failed(&self, ip: Option<IpAddr>, now: Instant) -> (Option<Duration>, bool) {
        let peer = peer_of(ip);
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if !peers.contains_key(&peer) && self.full(&mut peers, now) {
            return (Some(FULL_WAIT), true);
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

    /// A successful login from `ip`: its failures are forgotten.
    pub fn succeeded(&self, ip: Option<IpAddr>) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.remove(&peer_of(ip));
    }
}

impl LoginLimit {
    /// Whether every place holds a peer still remembered (after forgetting those that are
    /// not); logged when it starts.
    fn full(&self, peers: &mut HashMap<Option<IpAddr>, Failures>, now: Instant) -> bool {
        let full = peers.len() >= PEERS && {
            peers.retain(|_, failures| failures.remembered(now));
            peers.len() >= PEERS
        };
        if full && !self.full.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "idem-ui: {PEERS} addresses failed to log in within the hour: logins from other \
                 addresses wait too until they are forgotten (sessions already open go on)"
            );
        } else if !full {
            self.full.store(false, Ordering::Relaxed);
        }
        full
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
    fn the_peers_remembered_are_bounded_and_new_ones_wait_while_all_are_recent() {
        let limit = LoginLimit::default();
        let t0 = Instant::now();
        for i in 0..PEERS as u32 {
            limit.failed(Some(IpAddr::from(i.to_be_bytes())), t0);
        }
        let newcomer = Some("203.0.113.9".parse().unwrap());
        assert_eq!(limit.wait(newcomer, t0), Some(FULL_WAIT), "fail closed");
        assert_eq!(limit.failed(newcomer, t0).0, Some(FULL_WAIT));
        assert!(limit.peers.lock().unwrap().len() <= PEERS);
        let later = t0 + REMEMBERED;
        assert_eq!(
            limit.wait(newcomer, later),
            None,
            "the old ones are forgotten"
        );
        assert!(limit.peers.lock().unwrap().len() < PEERS);
    }

    #[test]
    fn an_ipv6_host_counts_as_its_64() {
        let limit = LoginLimit::default();
        let t0 = Instant::now();
        for i in 0..=FREE_FAILURES {
            let ip: IpAddr = format!("2001:db8:1:2::{i:x}").parse().unwrap();
            limit.failed(Some(ip), t0);
        }
        let same_64: IpAddr = "2001:db8:1:2:ffff::1".parse().unwrap();
        assert!(limit.wait(Some(same_64), t0).is_some());
        let other_64: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(limit.wait(Some(other_64), t0), None);
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(peer_of(Some(mapped)), Some("192.0.2.1".parse().unwrap()));
    }
}
