//! The multi-process scenarios for stores whose workers log body runs to a file (`key pid` per
//! line, see `idem-pg-worker --sqlite` / `--redis`): written once, run on SQLite and Redis.

#![allow(dead_code)]

use idem_core::{Key, RecordState, Store};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Child;
use std::time::Duration;

use crate::pg_support::summary;

/// Starts a worker: `idem-pg-worker MODE ARGS..` on the scenario's store.
pub type Spawn<'a> = &'a dyn Fn(&str, &[(&str, String)]) -> Child;

/// Every body run in the log at `path`, as (key, pid), in the order written.
pub fn runs(path: &Path) -> Vec<(String, u32)> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .map(|line| {
            let (key, pid) = line.split_once(' ').expect(line);
            (key.to_owned(), pid.parse().expect(line))
        })
        .collect()
}

async fn assert_completed(
    store: &dyn Store,
    prefix: &str,
    scope: &str,
    keys: impl Iterator<Item = u64>,
) {
    for k in keys {
        let key = Key::new(format!("{prefix}:{k}"))
            .unwrap()
            .with_scope(scope.to_owned())
            .unwrap();
        let record = store.get(&key).await.unwrap().expect("a record");
        assert!(
            matches!(record.state, RecordState::Completed { .. }),
            "{key} ends completed"
        );
    }
}

/// 4 processes x 16 tasks deliver 2,000 keys twice each (8 deliveries per key): every body runs
/// once, and every key ends completed.
pub async fn storm(spawn: Spawn<'_>, log: &Path, store: &dyn Store) {
    storm_of(2_000, spawn, log, store).await
}

/// [`storm`] on `KEYS` keys: for a server that answers fewer requests a second (the local
/// DynamoDB server answers one at a time).
#[allow(non_snake_case)]
pub async fn storm_of(KEYS: u64, spawn: Spawn<'_>, log: &Path, store: &dyn Store) {
    const PROCESSES: u64 = 4;
    const ROUNDS: u64 = 2;
    let workers: Vec<_> = (0..PROCESSES)
        .map(|i| {
            spawn(
                "storm",
                &[
                    ("keys", KEYS.to_string()),
                    ("rounds", ROUNDS.to_string()),
                    ("tasks", "16".into()),
                    ("seed", (i * 7919 + 1).to_string()),
                ],
            )
        })
        .collect();
    let mut totals = [0u64; 5];
    for worker in workers {
        let counts = tokio::task::spawn_blocking(move || summary(worker))
            .await
            .unwrap();
        for (total, count) in totals.iter_mut().zip(counts) {
            *total += count;
        }
    }
    let [executed, duplicate, in_progress, errors, lost] = totals;
    assert_eq!(
        executed + duplicate + in_progress,
        KEYS * ROUNDS * PROCESSES
    );
    assert_eq!(executed, KEYS, "exactly one delivery per key executed");
    assert_eq!((errors, lost), (0, 0));
    let runs = runs(log);
    let distinct: HashSet<&str> = runs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(runs.len() as u64, KEYS, "bodies ran once per key in all");
    assert_eq!(distinct.len() as u64, KEYS, "no body ran twice");
    assert_completed(store, "storm", "storm_job", 0..KEYS).await;
}

/// Three workers with slow bodies, four of them killed with SIGKILL at moments in the run (each
/// replaced), then a sweep that waits out the dead workers' leases: every key's body runs, ends
/// completed, and a body runs again only after a run cut short by a kill, or after a run whose
/// caller was told it lost its claim (`Error::LostClaim`: its lease lapsed before it could
/// complete, as it may when the store's writes stall past the 1 s lease, and a newer run took
/// the key over; each such run is logged to the `.lost` file by the worker that was told). A
/// repeat after a run that was neither is a silent double run, and fails.
pub async fn killed_workers(spawn: Spawn<'_>, log: &Path, store: &dyn Store) -> usize {
    const KEYS: u32 = 300;
    let crash = |seed: u64| {
        spawn(
            "crash",
            &[
                ("keys", KEYS.to_string()),
                ("tasks", "8".into()),
                ("work-ms", "300".into()),
                ("seed", seed.to_string()),
            ],
        )
    };
    let mut live: Vec<Child> = (1..=3).map(crash).collect();
    let mut killed: HashSet<u32> = HashSet::new();
    for round in 0..4u64 {
        tokio::time::sleep(Duration::from_millis(300 + 150 * round)).await;
        let mut victim = live.remove((round % live.len() as u64) as usize);
        killed.insert(victim.id());
        victim.kill().expect("SIGKILL");
        victim.wait().unwrap();
        live.push(crash(10 + round));
    }
    let mut lost_reported = 0;
    for worker in live {
        let [.., lost] = tokio::task::spawn_blocking(move || summary(worker))
            .await
            .unwrap();
        lost_reported += lost;
    }
    // The sweep waits up to four leases on a key in progress: the killed workers' claims lapse
    // within one lease and are taken over.
    let sweep = spawn(
        "sweep",
        &[("keys", KEYS.to_string()), ("tasks", "16".into())],
    );
    let [_, _, stuck, errors, sweep_lost] = tokio::task::spawn_blocking(move || summary(sweep))
        .await
        .unwrap();
    lost_reported += sweep_lost;
    assert_eq!(
        (stuck, errors),
        (0, 0),
        "no key stayed in progress, no delivery failed"
    );

    let runs = runs(log);
    let lost = self::runs(&log.with_extension("lost"));
    // A killed worker may have logged a lost claim too, but never printed its summary.
    let lost_by_live = lost.iter().filter(|(_, pid)| !killed.contains(pid)).count();
    assert_eq!(
        lost_by_live as u64, lost_reported,
        "every lost claim the live workers and the sweep counted is in the log"
    );
    let lost: HashSet<(&str, u32)> = lost.iter().map(|(k, pid)| (k.as_str(), *pid)).collect();
    let mut by_key: HashMap<&str, Vec<u32>> = HashMap::new();
    for (key, pid) in &runs {
        by_key.entry(key).or_default().push(*pid);
    }
    assert_eq!(by_key.len() as u32, KEYS, "every key's body ran");
    let (mut repeats, mut after_lost) = (0, 0);
    for (key, pids) in &by_key {
        // Every run but the last was cut short: by a kill (a body in flight), or told that a
        // newer run took its claim over.
        for earlier in &pids[..pids.len() - 1] {
            repeats += 1;
            if killed.contains(earlier) {
                continue;
            }
            assert!(
                lost.contains(&(*key, *earlier)),
                "{key} repeated after a run by {earlier}, which was not killed and was not told \
                 it lost its claim: a silent double run"
            );
            after_lost += 1;
        }
    }
    assert!(
        repeats - after_lost <= killed.len() * 8,
        "at most the killed workers' in-flight bodies repeat"
    );
    if after_lost > 0 {
        eprintln!("{after_lost} bodies repeated after their run was told it lost its claim");
    }
    assert_completed(store, "crash", "crash_job", 0..u64::from(KEYS)).await;
    repeats
}
