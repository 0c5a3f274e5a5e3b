//! The fault campaign, one minute of it: every workload (the attribute in lease and
//! transactional mode on PostgreSQL, Redis and SQLite; the queue with and without prefetching;
//! the HTTP layer) runs in worker processes while latency spikes, connection resets, stalls,
//! half-open connections, partitions, server restarts, SIGKILL and SIGSTOP hit them; the
//! campaign fails when a key's work repeats after it completed, a key is lost, held past a
//! lease, or answered two ways, when in-flight repeats pass what the faults could cause, or
//! when a kind of fault never hit.
//!
//! It starts servers of its own (it restarts them). `IDEM_FAULTS_SEED` picks another schedule;
//! the same value gives the same fault schedule (the processes' timing still varies). The
//! longer run and its results are on the results page (BENCHMARKS.md).

use std::process::Command;

#[test]
fn a_minute_of_faults_breaks_no_promise() {
    let seed = std::env::var("IDEM_FAULTS_SEED").unwrap_or_else(|_| "1".into());
    let output = Command::new(env!("CARGO_BIN_EXE_idem-faults"))
        .args(["run", "--seconds", "60", "--seed", &seed])
        .output()
        .expect("run idem-faults");
    let report = String::from_utf8_lossy(&output.stdout);
    println!("{report}");
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "the campaign failed with seed {seed} (IDEM_FAULTS_SEED={seed} runs it again)"
    );
    for column in [
        "| Postgres | server restart |",
        "| Redis | half-open |",
        "| Process | SIGSTOP |",
    ] {
        assert!(report.contains(column), "the report lists {column}");
    }
}
