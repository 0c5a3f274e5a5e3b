//! The schedules' commands: list, pause, resume, remove, through the queue's API.

use crate::error::Failure;
use idem_queue::http::HttpTarget;
use idem_queue::{Queue, Schedule, ScheduleState};
use serde_json::{json, Map, Value};

use crate::args::Schedules;
use crate::backend::json_time as time;
use crate::connect::Ctx;
use crate::output::{Out, NOT_FOUND, OK, USAGE};

fn row(state: &ScheduleState) -> Map<String, Value> {
    Map::from_iter([
        ("name".into(), json!(state.name)),
        ("spec".into(), json!(state.spec)),
        ("paused".into(), json!(state.paused)),
        ("last_tick".into(), time(state.last_tick)),
        ("next_tick".into(), time(state.next_tick)),
        ("missed".into(), json!(state.missed)),
        ("last_missed_at".into(), time(state.last_missed_at)),
        ("last_success_at".into(), time(state.last_success_at)),
        ("seen_at".into(), time(Some(state.seen_at))),
    ])
}

pub async fn run(ctx: &Ctx, out: &mut Out<'_>, command: &Schedules) -> Result<i32, Failure> {
    let Some((_, store, _)) = ctx.backend.postgres() else {
        out.message(
            "schedules are the work queue's, in PostgreSQL: `idem schedules` needs a postgres:// \
             --database-url",
            Map::new(),
        );
        return Ok(USAGE);
    };
    let queue = Queue::new(store);
    let (name, done, verb) = match command {
        Schedules::List => {
            let states = queue.schedules().await?;
            let rows: Vec<_> = states.iter().map(row).collect();
            out.rows(
                "schedules",
                &[
                    "name",
                    "spec",
                    "paused",
                    "last_tick",
                    "next_tick",
                    "missed",
                    "last_success_at",
                ],
                &rows,
            );
            return Ok(OK);
        }
        Schedules::Add {
            name,
            cron,
            tz,
            post,
            body,
            catch_up,
        } => return add(&queue, out, name, cron, tz, post, body, *catch_up).await,
        Schedules::Pause { name } => (name, queue.pause_schedule(name).await, "paused"),
        Schedules::Resume { name } => (name, queue.resume_schedule(name).await, "resumed"),
        Schedules::Remove { name } => (name, queue.remove_schedule(name).await, "removed"),
    };
    if done? {
        out.message(
            &format!("{verb} the schedule {name:?}"),
            Map::from_iter([(verb.into(), json!(name))]),
        );
        Ok(OK)
    } else {
        out.message(
            &format!("no schedule {name:?}"),
            Map::from_iter([("found".into(), json!(false))]),
        );
        Ok(NOT_FOUND)
    }
}

/// `schedules add`: every part checked before anything is stored.
#[allow(clippy::too_many_arguments)]
async fn add(
    queue: &Queue,
    out: &mut Out<'_>,
    name: &str,
    cron: &str,
    tz: &str,
    post: &str,
    body: &str,
    catch_up: Option<std::time::Duration>,
) -> Result<i32, Failure> {
    let refuse = |out: &mut Out<'_>, why: String| {
        out.message(&format!("error: {why}; nothing stored"), Map::new());
        Ok(USAGE)
    };
    let body: Value = match serde_json::from_str(body) {
        Ok(body) => body,
        Err(e) => return refuse(out, format!("--body is not JSON: {e}")),
    };
    let target = match HttpTarget::post(post, body) {
        Ok(target) => target,
        Err(e) => return refuse(out, e),
    };
    if post.starts_with("https:") {
        // This build's HTTP client has no TLS: every tick would fail, then die.
        return refuse(
            out,
            format!("--post {post}: this build of idem worker POSTs over plain http only"),
        );
    }
    let schedule = match Schedule::cron(name, cron).and_then(|s| s.time_zone(tz)) {
        Ok(schedule) => schedule
            .payload(target.payload())
            .queue(idem_queue::http::HTTP_QUEUE),
        Err(e) => return refuse(out, e.to_string()),
    };
    let schedule = match catch_up {
        Some(window) => schedule.catch_up(window),
        None => schedule,
    };
    queue.migrate().await?;
    queue.store_schedule(&schedule).await?;
    out.message(
        &format!(
            "stored the schedule {name:?}: {} POSTs to {post}",
            schedule.spec()
        ),
        Map::from_iter([("stored".into(), json!(name))]),
    );
    Ok(OK)
}
