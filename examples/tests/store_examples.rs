//! `examples/sqlite.rs` and `examples/redis.rs` as processes: concurrent deliveries of one key
//! do the work once, on a real SQLite file and a real Redis server. (`cargo test` builds the
//! examples; these tests run their binaries.)

mod example_process;

use example_process::example_binary;
use std::process::Command;

fn run(name: &str, args: &[&str]) -> String {
    let output = Command::new(example_binary(name))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run the {name} example: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{name} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn four_deliveries_on_one_sqlite_file_write_one_report() {
    let dir = std::env::temp_dir().join(format!("idem-sqlite-example-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("idem.db");
    let out = run("sqlite", &[db.to_str().unwrap()]);
    assert_eq!(out.matches("wrote the report").count(), 1, "{out}");
    assert!(out.contains("reports written: 1"), "{out}");
    // Run again on the same file, as a second process would: already done.
    let again = run("sqlite", &[db.to_str().unwrap()]);
    assert!(!again.contains("wrote the report"), "{again}");
    assert!(again.contains("reports written: 1"), "{again}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn eight_deliveries_on_redis_credit_once() {
    let url = idem_testdb::redis_url();
    let out = run("redis", &[&url]);
    assert_eq!(out.matches("credited, balance 100").count(), 1, "{out}");
    assert_eq!(
        out.matches("duplicate, the first run's balance Some(100)")
            .count(),
        7,
        "{out}"
    );
    assert!(out.contains("credited in total: 100"), "{out}");
}
