//! The examples' flags fail closed: a misspelled flag, a flag without its value or a missing
//! required one exits with status 2 and the usage, both `--flag value` and `--flag=value` work,
//! and an unreachable database ends the process at once with the address and the error (never a
//! silent fallback to the embedded store, where two servers would each send the same email).
//!
//! These run the plain example binaries (`cargo test` builds them); the examples that are also
//! test harnesses (`send_reminder`, `quickstart`, `invoice_run`) check their flags in their own
//! tests, with clap's `try_parse_from`.

mod example_process;

use example_process::example_binary;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs example `name` with `args` (and no `DATABASE_URL`), giving it `limit` to exit.
fn run(name: &str, args: &[&str], limit: Duration) -> Output {
    run_with(name, args, None, limit)
}

/// [`run`] with `DATABASE_URL` set to `database_url` when given.
fn run_with(name: &str, args: &[&str], database_url: Option<&str>, limit: Duration) -> Output {
    let mut command = Command::new(example_binary(name));
    match database_url {
        Some(url) => command.env("DATABASE_URL", url),
        None => command.env_remove("DATABASE_URL"),
    };
    let mut child = command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the example");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("{name} {args:?} was still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

const QUICK: Duration = Duration::from_secs(20);

/// Runs `name` with `args` and checks it refused them: status 2, and a message that mentions
/// `mentions`.
fn assert_refused(name: &str, args: &[&str], mentions: &str) {
    let output = run(name, args, QUICK);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{name} {args:?}: {text}");
    assert!(text.contains(mentions), "{name} {args:?}: {text}");
}

#[test]
fn a_misspelled_flag_exits_2_with_usage() {
    for (name, args) in [
        ("accept_then_work", &["--databse-url", "postgres://x"][..]),
        (
            "accept_then_work",
            &["--database-url", "postgres://x", "--wokers", "2"][..],
        ),
        ("payments", &["--provider", "http://x"][..]),
        ("http_api", &["--databse-url", "postgres://x"][..]),
        (
            "payments",
            &["job", "--provider", "http://x", "--pause", "1"][..],
        ),
    ] {
        assert_refused(name, args, "Usage");
    }
}

#[test]
fn a_flag_without_its_value_exits_2() {
    assert_refused("accept_then_work", &["--database-url"], "--database-url");
    assert_refused("http_api", &["--lease-ms", "soon"], "--lease-ms");
}

/// The queue example needs PostgreSQL and finds it without a flag: `DATABASE_URL`, else a
/// local server's default database (its `--help` names it); when none answers, it names the
/// address it tried and how to name another.
#[test]
fn the_queue_example_finds_its_database_or_says_what_is_missing() {
    let help = run("accept_then_work", &["--help"], QUICK);
    let usage = String::from_utf8_lossy(&help.stdout);
    assert!(
        usage.contains(idem_examples::DEFAULT_DATABASE_URL) && usage.contains("DATABASE_URL"),
        "{usage}"
    );
    let output = run_with(
        "accept_then_work",
        &["--addr", "127.0.0.1:0"],
        Some("postgres://postgres@127.0.0.1:1/nowhere"),
        QUICK,
    );
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("127.0.0.1:1"), "names the address: {text}");
    assert!(
        text.contains("--database-url or DATABASE_URL"),
        "says how: {text}"
    );
}

/// `--flag=value` is read (ignoring it would silently run the embedded store), and an
/// unreachable server ends the process with its address and the connection error, well before
/// a pool's 30 s timeout.
#[test]
fn an_unreachable_database_fails_at_once_naming_it() {
    for args in [
        &[
            "--addr",
            "127.0.0.1:0",
            "--database-url=postgres://postgres@127.0.0.1:1/nowhere",
        ][..],
        &[
            "--addr",
            "127.0.0.1:0",
            "--database-url",
            "postgres://postgres@127.0.0.1:1/nowhere",
        ][..],
    ] {
        for name in ["accept_then_work", "http_api"] {
            let output = run(name, args, QUICK);
            let text = stderr(&output);
            assert_eq!(output.status.code(), Some(1), "{name} {args:?}: {text}");
            assert!(text.contains("127.0.0.1:1"), "names the address: {text}");
            assert!(text.to_lowercase().contains("refused"), "says why: {text}");
        }
    }
}
