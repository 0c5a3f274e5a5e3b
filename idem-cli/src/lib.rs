//! # idem-cli: `idem`, the operator's command
//!
//! When a job misbehaves at 3 a.m.: what is stuck (`idem list --state stale` names the process
//! that held each claim when it died), what failed (`idem jobs list --state dead`), and release
//! or retry one safely (`idem release KEY` refuses a live claim unless `--force`). Runs against
//! idem's PostgreSQL store (`--database-url`, or `DATABASE_URL`; `--schema` and `--table` for a
//! store configured with other names), a SQLite store (`sqlite://PATH`) or a Redis store
//! (`redis://..`, several for a cluster; `--redis-prefix`). The work queue's commands need
//! PostgreSQL.
//!
//! ```sh
//! cargo install --path idem-cli
//! idem --database-url URL <command>      # or DATABASE_URL; --schema S --table T for other names
//! ```
//!
//! | command | what it does |
//! | --- | --- |
//! | `idem migrate` | applies the store's migrations (on PostgreSQL, the work queue's too) |
//! | `idem show KEY [--scope S]` | the key's records: state (`claimed`, `stale`, `completed`, `expired`), fence, lease left or completion and keep, holder (`host:pid`), fingerprint, replay size, journal entries |
//! | `idem list [--state claimed\|stale\|completed] [--scope S] [--prefix P] [--limit N]` | records, newest first; `stale` is claimed with the lease lapsed: its run died, and the holder names the process |
//! | `idem release KEY [--scope S] [--force]` | frees a claim so the next delivery runs it; refuses a live lease without `--force` and says what that risks (a double run) |
//! | `idem forget KEY [--scope S] --yes` | deletes a completed record so the work runs again; without `--yes` says what it would delete |
//! | `idem effects KEY [--scope S]` | the key's effect journal |
//! | `idem purge [--dry-run] [--batch N]` | deletes expired records and journal entries in batches, printing each batch's count |
//! | `idem schedules list` / `add NAME --cron EXPR [--tz ZONE] --post URL [--body JSON] [--catch-up DUR]` / `pause NAME` / `resume NAME` / `remove NAME` | the schedules: next tick, last tick, missed ticks, last success; `add` stores one that POSTs to a URL on each tick (`Idempotency-Key` = the tick's key), checked before anything is stored |
//! | `idem worker [--concurrency N]` | runs the stored schedules and their HTTP jobs until SIGTERM, then drains: retries with backoff on 5xx, 408, 409, 425, 429 (after their `Retry-After`; [`idem_queue::http::RETRIED_STATUSES`]), timeouts and connection errors, dead at once on other 4xx. It serves the named queue `idem-http` only (where `schedules add` puts its ticks), so a program's jobs on the same tables are never its to run; each delivery's status, time and first bytes are the job's result |
//! | `idem ui [--addr 127.0.0.1:7780] [--token TOKEN] [--read-only] [--https]` | serves the web dashboard ([idem-ui](https://docs.rs/idem-ui)) until SIGTERM: the overview, lists, detail pages and these commands' actions with the same safety rules; a non-loopback address needs `--token` (or `IDEM_UI_TOKEN`, at least 16 characters); without one, only this machine's browser is answered and a token made at start is printed for actions; `--https` when a TLS proxy is in front (`Secure` cookies); statements stop after 5 s |
//! | `idem jobs stats` / `list [--state queued\|running\|stale\|done\|dead\|cancelled]` / `show ID` / `retry ID\|--all-dead` / `discard ID` / `cancel ID [--reason TEXT]` | the work queue; `stale` is running with the lease lapsed: its worker died (`worker` names it) and the workers take it back before waiting jobs; `cancel` stops a waiting job at once and tells a running one at its next lease renewal |
//!
//! Tables for people, `--json` for scripts: one JSON document per command, with the same
//! fields (`records`: `key`, `scope`, `state`, `fence`, `holder`, `lease_expires_at`,
//! `lease_left_s`, `completed_at`, `keep_until`, `fingerprint`, `output_bytes`, and under
//! `show` `journal`; `jobs`: `id`, `state`, `queue`, `priority`, `serial_key`,
//! `outcome` (the last attempt's), `attempts`, `max_attempts`, `worker`, `last_error`,
//! `created_at`, `available_at`, `finished_at`, `cancel_requested_at`, `payload`, and under
//! `show` `attempt_log` and `result`; changes: `message` and
//! what changed). Every destructive command prints what it changed. On Redis, `list` and a
//! `show` without `--scope` walk the prefix's keys with `SCAN`.
//!
//! The binary is `idem`; [`run`] is the same command as a function (tests call it in process).
//! Exit status: 0 done, 1 no such key or job, 2 usage error, 3 refused for safety, 4 the
//! database failed. A PostgreSQL server that refuses, or does not answer within 3 s, is
//! reported at once with the host, port, database and user tried (never the password).

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod args;
mod backend;
mod connect;
mod error;
mod jobs;
mod output;
mod records;
mod schedules;
mod signal;
mod ui;
mod worker;

use crate::error::Failure;
use clap::Parser;
use std::io::Write;

pub use args::{Args, Command};
use connect::{connect, Ctx};
use output::{Out, FAILED, OK, USAGE};

/// Runs `idem` with `args` (the first is the program's name), printing to `out` (usage errors
/// and failures to `err`), and returns its exit status.
pub async fn run<I, T>(args: I, out: &mut (dyn Write + Send), err: &mut dyn Write) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args = match Args::try_parse_from(args) {
        Ok(args) => args,
        Err(e) => {
            let status = e.exit_code();
            let rendered = e.render().to_string();
            let _ = if status == OK {
                write!(out, "{rendered}")
            } else {
                write!(err, "{rendered}")
            };
            return status;
        }
    };
    let Some(url) = args.database_url.clone() else {
        let _ = writeln!(
            err,
            "error: no database: pass --database-url URL or set DATABASE_URL"
        );
        return USAGE;
    };
    let statement_timeout =
        matches!(args.command, Command::Ui { .. }).then_some(connect::UI_STATEMENT_TIMEOUT);
    let connected = connect(
        &url,
        &args.schema,
        &args.table,
        &args.redis_prefix,
        statement_timeout,
    );
    let backend = match connected.await {
        Ok(backend) => backend,
        Err((status, message)) => {
            let _ = writeln!(err, "error: {message}");
            return status;
        }
    };
    let ctx = Ctx { backend };
    let mut out = Out {
        json: args.json,
        w: out,
    };
    let result = execute(&ctx, &mut out, &args.command).await;
    ctx.backend.close().await;
    match result {
        Ok(status) => status,
        Err(e) => {
            // A table that does not exist: the store (or its work queue) was never migrated.
            let hint = if e.undefined_table() {
                " (run `idem migrate` to create idem's tables)"
            } else {
                ""
            };
            let _ = writeln!(err, "error: {e}{hint}");
            FAILED
        }
    }
}

async fn execute(ctx: &Ctx, out: &mut Out<'_>, command: &Command) -> Result<i32, Failure> {
    match command {
        Command::Migrate => {
            ctx.backend.migrate().await?;
            let name = ctx.backend.name();
            out.message(
                &format!("migrated {name}"),
                serde_json::Map::from_iter([("migrated".into(), serde_json::json!(name))]),
            );
            Ok(OK)
        }
        Command::Show(key) => records::show(ctx, out, &key.key, key.scope.as_deref()).await,
        Command::List {
            state,
            scope,
            prefix,
            limit,
        } => {
            records::list(
                ctx,
                out,
                *state,
                scope.as_deref(),
                prefix.as_deref(),
                *limit,
            )
            .await
        }
        Command::Release { key, force } => {
            records::release(ctx, out, &key.key, key.scope.as_deref(), *force).await
        }
        Command::Forget { key, yes } => {
            records::forget(ctx, out, &key.key, key.scope.as_deref(), *yes).await
        }
        Command::Effects(key) => records::effects(ctx, out, &key.key, key.scope.as_deref()).await,
        Command::Purge { dry_run, batch } => records::purge(ctx, out, *dry_run, *batch).await,
        Command::Jobs(jobs) => jobs::run(ctx, out, jobs).await,
        Command::Schedules(command) => schedules::run(ctx, out, command).await,
        Command::Worker { concurrency } => worker::run(ctx, out, *concurrency).await,
        Command::Ui {
            addr,
            token,
            read_only,
            https,
        } => ui::run(ctx, out, *addr, token.clone(), *read_only, *https).await,
    }
}
