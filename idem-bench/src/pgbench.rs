//! The same statements driven by `pgbench` (prepared, same concurrency): the limit for the work.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::workload::{Measured, EXISTING_KEYS};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Script {
    /// idem's lease-mode statements: the claim, then the completion for a fresh key.
    Lease,
    /// idem's transactional statements as the issue counts them, one round trip each: BEGIN,
    /// claim, completion, COMMIT (ROLLBACK for a duplicate).
    Transactional,
    /// idem's transactional statements since the claim writes a fresh key's record completed:
    /// BEGIN, that claim, COMMIT (ROLLBACK for a duplicate).
    TransactionalWritten,
    /// The hand-written claim: `INSERT .. ON CONFLICT DO NOTHING` on a table of keys.
    Article,
}

impl Script {
    pub fn label(self) -> &'static str {
        match self {
            Script::Lease => "pgbench: idem lease SQL",
            Script::Transactional => "pgbench: idem transactional SQL",
            Script::TransactionalWritten => "pgbench: idem transactional SQL, claim completed",
            Script::Article => "pgbench: hand-written INSERT",
        }
    }
}

/// Turns idem's `$n` statement into pgbench's `:variable` form.
fn with_vars(sql: &str, vars: &[(&str, &str)]) -> String {
    let mut out = sql.to_owned();
    // Longest first, so `$10` would not be read as `$1`.
    for (param, var) in vars.iter().rev() {
        out = out.replace(param, var);
    }
    out
}

/// idem's statements, as the store writes them.
pub struct Statements<'a> {
    pub claim: &'a str,
    pub claim_completed: &'a str,
    pub complete: &'a str,
}

pub fn script(kind: Script, sql: &Statements<'_>, hand_table: &str, dup_permille: u64) -> String {
    let claim_with = |claim_sql: &str, key: &str| {
        with_vars(
            claim_sql,
            &[
                ("$1", key),
                ("$2", "NULL::text"),
                ("$3", "(:lease)::bigint"),
                ("$4", "(:token)::bigint"),
                ("$5", "'bench'::text"),
                ("$6", "'pgbench'::text"),
            ],
        )
    };
    let claim = |key: &str| claim_with(sql.claim, key);
    // Its `$3` is the completion's keep.
    let claim_completed =
        |key: &str| claim_with(&sql.claim_completed.replace("$3", "(:keep)::bigint"), key);
    let complete = |key: &str| {
        with_vars(
            sql.complete,
            &[
                ("$1", key),
                ("$2", "(:fence)::bigint"),
                ("$3", "NULL::bytea"),
                ("$4", "(:keep)::bigint"),
            ],
        )
    };
    // Typed, as sqlx types idem's parameters.
    let dup_key = "('dup:' || (:k)::bigint)";
    // (No `:name` inside literals: pgbench would take it for a variable.)
    let fresh_key = "('fresh-pgb-' || (:client_id)::int || '-' || (:k)::bigint)";
    let header = format!(
        "\\set lease 30000000\n\\set keep 86400000000\n\\set token random(1, 1000000000000)\n\\set r random(0, 999)\n\\if :r < {dup_permille}\n\\set k random(0, {})\n",
        EXISTING_KEYS - 1
    );
    match kind {
        Script::Lease => format!(
            "{header}{};\n\\else\n\\set k random(1, 1000000000000)\n{} \\gset\n{};\n\\endif\n",
            claim(dup_key),
            claim(fresh_key),
            complete(fresh_key)
        ),
        Script::Transactional => format!(
            "{header}BEGIN;\n{};\nROLLBACK;\n\\else\n\\set k random(1, 1000000000000)\nBEGIN;\n{} \\gset\n{};\nCOMMIT;\n\\endif\n",
            claim(dup_key),
            claim(fresh_key),
            complete(fresh_key)
        ),
        Script::TransactionalWritten => format!(
            "{header}BEGIN;\n{};\nROLLBACK;\n\\else\n\\set k random(1, 1000000000000)\nBEGIN;\n{};\nCOMMIT;\n\\endif\n",
            claim_completed(dup_key),
            claim_completed(fresh_key)
        ),
        Script::Article => {
            let insert = |key: &str| format!("INSERT INTO {hand_table} (key) VALUES ({key}) ON CONFLICT DO NOTHING;");
            format!(
                "{header}{}\n\\else\n\\set k random(1, 1000000000000)\n{}\n\\endif\n",
                insert(dup_key),
                insert(fresh_key)
            )
        }
    }
}

/// Runs pgbench with `clients` clients for about `calls` transactions in all.
pub fn run(url: &str, script_text: &str, clients: usize, calls: u64, dir: &Path) -> Measured {
    let script_path = dir.join("script.sql");
    std::fs::write(&script_path, script_text).expect("write pgbench script");
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("pgbench_log")
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let per_client = (calls / clients as u64).max(1);
    let threads = clients.min(2);
    let output = Command::new("pgbench")
        .current_dir(dir)
        .args(["-n", "-M", "prepared", "-l", "--log-prefix=pgbench_log"])
        .arg(format!("-c{clients}"))
        .arg(format!("-j{threads}"))
        .arg(format!("-t{per_client}"))
        .arg("-f")
        .arg(&script_path)
        .arg(url)
        .output()
        .expect("run pgbench (is it installed? Debian: postgresql-contrib / postgresql-client)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "pgbench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tps: f64 = stdout
        .lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no tps in pgbench output:\n{stdout}"));
    let mut latencies_us = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("pgbench_log")
        {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            latencies_us.extend(
                text.lines()
                    .filter_map(|l| l.split_whitespace().nth(2))
                    .filter_map(|v| v.parse::<u64>().ok()),
            );
        }
    }
    latencies_us.sort_unstable();
    let calls = per_client * clients as u64;
    Measured {
        calls,
        elapsed: Duration::from_secs_f64(calls as f64 / tps),
        latencies_us,
        executed: 0,
    }
}
