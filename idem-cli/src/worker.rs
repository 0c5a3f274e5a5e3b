//! `idem worker`: the stored schedules and their HTTP jobs, until SIGTERM, then a drain.

use crate::error::Failure;
use std::time::Duration;

use idem_queue::http::HTTP_QUEUE;
use idem_queue::{Queue, Schedule, SchedulerHandle};
use serde_json::{json, Map, Value};

use crate::connect::Ctx;
use crate::output::{Out, OK, USAGE};
use crate::signal::shutdown_signal;

/// How often the worker reads the stored schedules again: a schedule added, changed or
/// removed with `idem schedules` is fired (or stops firing) within this.
const RELOAD_EVERY: Duration = Duration::from_secs(5);

/// How long running jobs get to finish at shutdown.
const DRAIN: Duration = Duration::from_secs(30);

/// The definitions of `schedules`, to tell when they changed.
fn definitions(schedules: &[Schedule]) -> Vec<Value> {
    schedules
        .iter()
        .map(|s| json!([s.name(), s.to_stored()]))
        .collect()
}

pub async fn run(ctx: &Ctx, out: &mut Out<'_>, concurrency: usize) -> Result<i32, Failure> {
    let Some((_, store, table)) = ctx.backend.postgres() else {
        out.message(
            "the worker runs the work queue, in PostgreSQL: `idem worker` needs a postgres:// \
             --database-url",
            Map::new(),
        );
        return Ok(USAGE);
    };
    let queue = Queue::new(store);
    queue.migrate().await?;
    // It serves the HTTP jobs' named queue only, whose jobs its handler runs; a program's jobs
    // put there would be dead-lettered. Refuse, saying why.
    let others = idem_queue::http::foreign_work(&queue).await?;
    if others > 0 {
        out.message(
            &format!(
                "error: the queue {HTTP_QUEUE:?} of {table} holds {others} waiting jobs that are \
                 not HTTP jobs; `idem worker` runs HTTP jobs only and would dead-letter them. \
                 Give a program's jobs a named queue of their own"
            ),
            Map::from_iter([("refused".into(), json!(true))]),
        );
        return Ok(crate::output::REFUSED);
    }
    let client = idem_queue::http::client();
    let workers = queue
        .worker(move |job| {
            let client = client.clone();
            async move { idem_queue::http::post(&client, job).await }
        })
        .queue(HTTP_QUEUE, concurrency.max(1))
        .start();
    let mut running: Option<(Vec<Value>, SchedulerHandle)> = None;
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        match queue.stored_schedules().await {
            Ok(schedules) => {
                let defs = definitions(&schedules);
                if running.as_ref().map(|(d, _)| d) != Some(&defs) {
                    if let Some((_, old)) = running.take() {
                        old.shutdown().await;
                    }
                    let names: Vec<&str> = schedules.iter().map(Schedule::name).collect();
                    eprintln!("idem worker: running the stored schedules {names:?}");
                    match queue.scheduler(schedules) {
                        Ok(scheduler) => match scheduler.start().await {
                            Ok(handle) => running = Some((defs, handle)),
                            Err(e) => eprintln!("idem worker: the scheduler did not start: {e}"),
                        },
                        Err(e) => eprintln!("idem worker: the stored schedules conflict: {e}"),
                    }
                }
            }
            Err(e) => {
                eprintln!("idem worker: cannot read the stored schedules, retrying: {e}")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RELOAD_EVERY) => {}
            _ = &mut stop => break,
        }
    }
    if let Some((_, scheduler)) = running.take() {
        scheduler.shutdown().await;
    }
    let report = workers.shutdown(DRAIN).await;
    out.message(
        &format!(
            "stopped: {} running jobs finished, {} given back to the queue, {} background \
             settlements unfinished",
            report.finished, report.released, report.unsettled
        ),
        Map::from_iter([
            ("finished".into(), json!(report.finished)),
            ("released".into(), json!(report.released)),
            ("unsettled".into(), json!(report.unsettled)),
        ]),
    );
    Ok(OK)
}
