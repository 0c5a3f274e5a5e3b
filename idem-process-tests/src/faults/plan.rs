//! The campaign's fault schedule: drawn from a seed before the run, so a run that fails is run
//! again, fault for fault, with the same `--seed`.

use std::time::Duration;

use crate::Random;

/// Where a fault lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    /// The network to PostgreSQL (through its proxy), or the server itself.
    Postgres,
    /// The network to Redis, or the server itself.
    Redis,
    /// One worker process, of any workload.
    Process,
}

/// A fault to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Every chunk of bytes held `delay` before it is forwarded, for `lasting`.
    Latency {
        /// Added to each chunk.
        delay: Duration,
        /// How long the spike lasts.
        lasting: Duration,
    },
    /// Every live connection reset at once.
    Reset,
    /// Connections half-open (nothing forwarded, no side told) for `lasting`, then reset.
    HalfOpen {
        /// How long nothing is forwarded.
        lasting: Duration,
    },
    /// Nothing forwarded for `lasting`, then everything held delivered late.
    Stall {
        /// How long nothing is forwarded.
        lasting: Duration,
    },
    /// A half-open network that also refuses new connections, for `lasting`.
    Partition {
        /// How long the partition lasts.
        lasting: Duration,
    },
    /// The server ended at once (PostgreSQL's immediate shutdown; Redis killed with SIGKILL),
    /// down for `down`, then started again on its data.
    Restart {
        /// How long it stays down.
        down: Duration,
    },
    /// A worker process killed with SIGKILL, and a new one started in its place.
    Kill,
    /// A worker process stopped with SIGSTOP for `lasting`, then continued.
    Stop {
        /// How long it stays stopped.
        lasting: Duration,
    },
}

impl Fault {
    /// The fault's kind, as the report names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Latency { .. } => "latency spike",
            Fault::Reset => "connection reset",
            Fault::HalfOpen { .. } => "half-open",
            Fault::Stall { .. } => "stall, then late delivery",
            Fault::Partition { .. } => "partition",
            Fault::Restart { .. } => "server restart",
            Fault::Kill => "SIGKILL",
            Fault::Stop { .. } => "SIGSTOP",
        }
    }
}

/// One fault of the schedule.
#[derive(Debug, Clone, Copy)]
pub struct Planned {
    /// When, from the start of the run.
    pub at: Duration,
    /// Where.
    pub target: Target,
    /// What.
    pub fault: Fault,
    /// Picks the process, for a fault on [`Target::Process`] (taken modulo their number).
    pub victim: u64,
}

/// Faults from `start` until `until` for every target, one at a time per target, each kind of
/// a target's in turn (in an order drawn anew each round), with pauses between them.
pub fn schedule(seed: u64, start: Duration, until: Duration) -> Vec<Planned> {
    let random = Random::seeded(seed);
    let ms = |low: u64, high: u64| Duration::from_millis(low + random.below(high - low));
    let mut planned = Vec::new();
    for target in [Target::Postgres, Target::Redis, Target::Process] {
        let mut at = start + ms(0, 1_000);
        let mut bag: Vec<u8> = Vec::new();
        while at < until {
            if bag.is_empty() {
                bag = match target {
                    Target::Process => vec![5, 6],
                    _ => vec![0, 1, 2, 3, 4, 7],
                };
                for i in (1..bag.len()).rev() {
                    bag.swap(i, random.below(i as u64 + 1) as usize);
                }
            }
            let fault = match bag.pop().expect("refilled above") {
                0 => Fault::Latency {
                    delay: ms(300, 1_500),
                    lasting: ms(1_500, 3_000),
                },
                1 => Fault::Reset,
                2 => Fault::HalfOpen {
                    lasting: ms(1_000, 4_000),
                },
                3 => Fault::Partition {
                    lasting: ms(1_000, 3_000),
                },
                4 => Fault::Restart {
                    down: ms(500, 2_000),
                },
                5 => Fault::Kill,
                6 => Fault::Stop {
                    lasting: ms(1_000, 4_000),
                },
                _ => Fault::Stall {
                    lasting: ms(1_000, 4_000),
                },
            };
            let lasting = match fault {
                Fault::Latency { lasting, .. }
                | Fault::HalfOpen { lasting }
                | Fault::Stall { lasting }
                | Fault::Partition { lasting }
                | Fault::Stop { lasting } => lasting,
                Fault::Restart { down } => down,
                Fault::Reset | Fault::Kill => Duration::ZERO,
            };
            planned.push(Planned {
                at,
                target,
                fault,
                victim: random.below(u64::MAX),
            });
            let gap = match target {
                Target::Process => ms(700, 1_500),
                _ => ms(1_500, 3_000),
            };
            at += lasting + gap;
        }
    }
    planned.sort_by_key(|p| p.at);
    planned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_schedule_with_every_kind_of_every_target() {
        let one = schedule(7, Duration::from_secs(2), Duration::from_secs(50));
        let two = schedule(7, Duration::from_secs(2), Duration::from_secs(50));
        assert_eq!(format!("{one:?}"), format!("{two:?}"));
        for target in [Target::Postgres, Target::Redis] {
            let kinds: std::collections::BTreeSet<_> = one
                .iter()
                .filter(|p| p.target == target)
                .map(|p| p.fault.kind())
                .collect();
            assert_eq!(kinds.len(), 6, "{target:?}: {kinds:?}");
        }
        assert!(one.iter().all(|p| p.at < Duration::from_secs(50)));
    }
}
