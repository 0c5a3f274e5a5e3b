//! The work queue's jobs: a page of them with filters, and one job with its attempts.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use idem_queue::{JobFilter, JobInfo, JobsQuery};
use serde::Deserialize;

use crate::format;
use crate::frame::{link, message, render, store_failed, Frame};
use crate::source::Source;
use crate::viewer::Viewer;

/// Jobs per page.
const PAGE: usize = 50;

/// A job as the pages show it.
pub(crate) struct JobRow {
    pub key: String,
    pub state: &'static str,
    pub queue: String,
    pub priority: i16,
    pub attempts: String,
    pub last_error: String,
    pub worker: String,
    pub available_at: String,
    pub created_at: String,
    pub finished_at: String,
    pub href: String,
}

impl JobRow {
    pub fn of(job: &JobInfo) -> JobRow {
        JobRow {
            key: job.key.clone(),
            state: job.state.as_str(),
            queue: job.queue.clone(),
            priority: job.priority,
            attempts: format!("{}/{}", job.attempts, job.max_attempts),
            last_error: job.last_error.clone().unwrap_or_default(),
            worker: job.worker.clone().unwrap_or_default(),
            available_at: format::time(job.available_at),
            created_at: format::time(job.created_at),
            finished_at: format::maybe_time(job.finished_at),
            href: link("/job", &[("key", &job.key)]),
        }
    }
}

/// The state an operator names, or `None` for every job.
pub(crate) fn parse_state(name: &str) -> Result<Option<JobFilter>, String> {
    if name.is_empty() {
        return Ok(None);
    }
    JobFilter::parse(name).map(Some).ok_or_else(|| {
        format!("{name:?} is not a job state: queued, running, stale, done, dead or cancelled")
    })
}

fn no_queue(frame: Frame) -> Response {
    message(
        StatusCode::NOT_FOUND,
        frame,
        "No work queue",
        "This store has no work queue: the queue and schedules need PostgreSQL.".to_owned(),
        Some(("/".to_owned(), "Overview".to_owned())),
    )
}

#[derive(Deserialize, Default)]
pub(crate) struct ListQuery {
    #[serde(default)]
    state: String,
    #[serde(default)]
    queue: String,
    #[serde(default)]
    prefix: String,
    after: Option<String>,
}

#[derive(Template)]
#[template(path = "jobs.html")]
struct ListPage {
    frame: Frame,
    state: String,
    queue: String,
    prefix: String,
    jobs: Vec<JobRow>,
    next: Option<String>,
    first: Option<String>,
    /// The page stopped at its scan before it was full.
    searched: bool,
    scan: usize,
}

pub(crate) async fn list(
    viewer: Viewer,
    State(source): State<Source>,
    Query(query): Query<ListQuery>,
) -> Response {
    let frame = Frame::of(&source, &viewer);
    let Some(queue) = &source.queue else {
        return no_queue(frame);
    };
    let state = match parse_state(&query.state) {
        Ok(state) => state,
        Err(e) => {
            return message(
                StatusCode::BAD_REQUEST,
                frame,
                "No such state",
                e,
                Some(("/jobs".to_owned(), "All jobs".to_owned())),
            )
        }
    };
    let jobs_query = JobsQuery {
        state,
        queue: Some(query.queue.clone()).filter(|s| !s.is_empty()),
        key_prefix: Some(query.prefix.clone()).filter(|s| !s.is_empty()),
        limit: PAGE,
        ..JobsQuery::default()
    };
    if let Some(after) = query
        .after
        .as_deref()
        .filter(|after| !jobs_query.takes_cursor(after))
    {
        return message(
            StatusCode::BAD_REQUEST,
            frame,
            "Not a page",
            format!("{after:?} is not where a page of finished jobs ends."),
            Some(("/jobs".to_owned(), "All jobs".to_owned())),
        );
    }
    let page = match queue.jobs_page(&jobs_query, query.after.as_deref()).await {
        Ok(page) => page,
        Err(e) => return store_failed(frame, e),
    };
    let filters = [
        ("state", query.state.as_str()),
        ("queue", query.queue.as_str()),
        ("prefix", query.prefix.as_str()),
    ];
    let next = page.next.as_deref().map(|after| {
        let mut pairs = filters.to_vec();
        pairs.push(("after", after));
        link("/jobs", &pairs)
    });
    let searched = next.is_some() && page.jobs.len() < PAGE;
    render(
        StatusCode::OK,
        &ListPage {
            frame,
            first: query.after.is_some().then(|| link("/jobs", &filters)),
            searched,
            scan: jobs_query.scan,
            jobs: page.jobs.iter().map(JobRow::of).collect(),
            state: query.state,
            queue: query.queue,
            prefix: query.prefix,
            next,
        },
    )
}

#[derive(Deserialize)]
pub(crate) struct JobQuery {
    key: String,
}

struct AttemptRow {
    attempt: u32,
    outcome: String,
    started_at: String,
    ended_at: String,
    error: String,
}

#[derive(Template)]
#[template(path = "job.html")]
struct DetailPage {
    frame: Frame,
    job: JobRow,
    payload: String,
    worker: String,
    serial_key: String,
    available_at: String,
    cancel_requested_at: String,
    attempts: Vec<AttemptRow>,
    result: String,
    dead: bool,
    discardable: bool,
    cancellable: bool,
    logged_attempts: usize,
}

pub(crate) async fn detail(
    viewer: Viewer,
    State(source): State<Source>,
    Query(query): Query<JobQuery>,
) -> Response {
    let frame = Frame::of(&source, &viewer);
    let Some(queue) = &source.queue else {
        return no_queue(frame);
    };
    let (job, result) = match tokio::try_join!(queue.job(&query.key), queue.result(&query.key)) {
        Ok(both) => both,
        Err(e) => return store_failed(frame, e),
    };
    let Some(job) = job else {
        return message(
            StatusCode::NOT_FOUND,
            frame,
            "No such job",
            format!(
                "No job has the key {:?} (never enqueued, discarded or purged).",
                query.key
            ),
            Some(("/jobs".to_owned(), "All jobs".to_owned())),
        );
    };
    let result = match result {
        Some(idem_queue::JobResult::Done(Some(value))) => {
            serde_json::to_string_pretty(&value).unwrap_or_default()
        }
        _ => String::new(),
    };
    render(
        StatusCode::OK,
        &DetailPage {
            frame,
            payload: serde_json::to_string_pretty(&job.payload).unwrap_or_default(),
            worker: job.worker.clone().unwrap_or_else(|| "-".to_owned()),
            serial_key: job.serial_key.clone().unwrap_or_else(|| "-".to_owned()),
            available_at: format::time(job.available_at),
            cancel_requested_at: format::maybe_time(job.cancel_requested_at),
            attempts: job
                .attempt_log
                .iter()
                .map(|a| AttemptRow {
                    attempt: a.attempt,
                    outcome: a.outcome.clone(),
                    started_at: format::maybe_time(a.started_at),
                    ended_at: format::maybe_time(a.ended_at),
                    error: a.error.clone().unwrap_or_default(),
                })
                .collect(),
            result,
            dead: job.state == JobFilter::Dead,
            discardable: matches!(job.state, JobFilter::Dead | JobFilter::Cancelled),
            logged_attempts: idem_queue::MAX_LOGGED_ATTEMPTS,
            cancellable: matches!(
                job.state,
                JobFilter::Queued | JobFilter::Running | JobFilter::Stale
            ),
            job: JobRow::of(&job),
        },
    )
}
