//! The schedules: all of them, and one with its recent ticks and their jobs.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use idem_core::StoreError;
use idem_queue::{JobFilter, JobsQuery, Queue, ScheduleState};
use serde::Deserialize;

use super::jobs::JobRow;
use crate::format;
use crate::frame::{link, message, render, store_failed, Frame};
use crate::source::Source;
use crate::viewer::Viewer;

/// Ticks of each kind a schedule's page shows.
const TICKS: usize = 20;
/// The most jobs read to find a schedule's recent ticks of one state.
const TICKS_SCAN: usize = 100_000;

/// A schedule as the pages show it.
pub(crate) struct ScheduleRow {
    pub name: String,
    pub spec: String,
    pub paused: bool,
    pub next_tick: String,
    pub last_tick: String,
    /// Its latest tick's job's state (`-` when it has none: purged, or never enqueued).
    pub last_outcome: &'static str,
    pub missed: u64,
    pub last_missed_at: String,
    pub last_success_at: String,
    pub href: String,
}

impl ScheduleRow {
    /// Rows for `states`, each with its last tick's outcome (one read for all).
    pub async fn all(
        queue: &Queue,
        states: &[ScheduleState],
    ) -> Result<Vec<ScheduleRow>, StoreError> {
        let keys: Vec<String> = states
            .iter()
            .filter_map(ScheduleState::last_tick_key)
            .collect();
        let outcomes = queue.states_of(&keys).await?;
        Ok(states
            .iter()
            .map(|state| {
                let outcome = state
                    .last_tick_key()
                    .and_then(|key| outcomes.get(&key).copied());
                ScheduleRow::of(state, outcome)
            })
            .collect())
    }

    pub fn of(state: &ScheduleState, outcome: Option<JobFilter>) -> ScheduleRow {
        ScheduleRow {
            name: state.name.clone(),
            spec: state.spec.clone(),
            paused: state.paused,
            next_tick: state.next_tick.map_or_else(
                || "-".to_owned(),
                |at| format!("{} ({})", format::time(at), format::relative(at)),
            ),
            last_tick: format::maybe_time(state.last_tick),
            last_outcome: outcome.map_or("-", JobFilter::as_str),
            missed: state.missed,
            last_missed_at: format::maybe_time(state.last_missed_at),
            last_success_at: format::maybe_time(state.last_success_at),
            href: link("/schedule", &[("name", &state.name)]),
        }
    }
}

fn no_queue(frame: Frame) -> Response {
    message(
        StatusCode::NOT_FOUND,
        frame,
        "No schedules",
        "This store has no schedules: the queue and schedules need PostgreSQL.".to_owned(),
        Some(("/".to_owned(), "Overview".to_owned())),
    )
}

#[derive(Template)]
#[template(path = "schedules.html")]
struct ListPage {
    frame: Frame,
    schedules: Vec<ScheduleRow>,
}

pub(crate) async fn list(viewer: Viewer, State(source): State<Source>) -> Response {
    let frame = Frame::of(&source, &viewer);
    let Some(queue) = &source.queue else {
        return no_queue(frame);
    };
    let rows = match queue.schedules().await {
        Ok(states) => ScheduleRow::all(queue, &states).await,
        Err(e) => Err(e),
    };
    match rows {
        Ok(schedules) => render(StatusCode::OK, &ListPage { frame, schedules }),
        Err(e) => store_failed(frame, e),
    }
}

#[derive(Deserialize)]
pub(crate) struct ScheduleQuery {
    name: String,
}

#[derive(Template)]
#[template(path = "schedule.html")]
struct DetailPage {
    frame: Frame,
    schedule: ScheduleRow,
    pending: Vec<JobRow>,
    finished: Vec<JobRow>,
}

pub(crate) async fn detail(
    viewer: Viewer,
    State(source): State<Source>,
    Query(query): Query<ScheduleQuery>,
) -> Response {
    let frame = Frame::of(&source, &viewer);
    let Some(queue) = &source.queue else {
        return no_queue(frame);
    };
    let states = match queue.schedules().await {
        Ok(states) => states,
        Err(e) => return store_failed(frame, e),
    };
    let Some(state) = states.into_iter().find(|s| s.name == query.name) else {
        return message(
            StatusCode::NOT_FOUND,
            frame,
            "No such schedule",
            format!("No schedule is named {:?}.", query.name),
            Some(("/schedules".to_owned(), "All schedules".to_owned())),
        );
    };
    // Its tick jobs: those waiting or running, then the finished ones, newest first.
    let prefix = state.tick_key_prefix();
    let mut pending = Vec::new();
    let mut finished = Vec::new();
    for job_state in [
        JobFilter::Queued,
        JobFilter::Running,
        JobFilter::Stale,
        JobFilter::Done,
        JobFilter::Dead,
        JobFilter::Cancelled,
    ] {
        let into = match job_state {
            JobFilter::Done | JobFilter::Dead | JobFilter::Cancelled => &mut finished,
            _ => &mut pending,
        };
        // A schedule's finished ticks are found along the finished jobs' index, among every
        // other job that finished since: read further than a list page does, still bounded.
        let ticks = JobsQuery {
            state: Some(job_state),
            queue: None,
            key_prefix: Some(prefix.clone()),
            limit: TICKS,
            scan: TICKS_SCAN,
        };
        match queue.jobs_page(&ticks, None).await {
            Ok(page) => into.extend(page.jobs),
            Err(e) => return store_failed(frame, e),
        }
    }
    finished.sort_by_key(|job| std::cmp::Reverse(job.finished_at));
    finished.truncate(TICKS);
    let schedule = match ScheduleRow::all(queue, std::slice::from_ref(&state)).await {
        Ok(mut rows) => rows.remove(0),
        Err(e) => return store_failed(frame, e),
    };
    render(
        StatusCode::OK,
        &DetailPage {
            frame,
            schedule,
            pending: pending.iter().map(JobRow::of).collect(),
            finished: finished.iter().map(JobRow::of).collect(),
        },
    )
}
