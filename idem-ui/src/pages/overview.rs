//! The overview: what is stuck, what failed, what ran, on one page.

use std::time::{Duration, SystemTime};

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use idem_core::{RecordFilter, RecordStatus, ScopeCounts};
use idem_queue::{JobFilter, JobsQuery, QueueStats};

use super::jobs::JobRow;
use super::records::RecordRow;
use super::schedules::ScheduleRow;
use crate::frame::{render, store_failed, Frame};
use crate::plot::Plot;
use crate::source::Source;
use crate::viewer::Viewer;

/// The plots' window.
const MINUTES: u32 = 180;
/// Stale claims and dead jobs shown (the lists page through the rest).
const SHOWN: usize = 10;

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    frame: Frame,
    scopes: Vec<ScopeCounts>,
    scopes_partial: bool,
    summary_rows: u64,
    stale: Vec<RecordRow>,
    /// The stale claims shown were found among the first records read, not all.
    stale_searched: bool,
    queues: Vec<(String, QueueStats)>,
    queues_partial: bool,
    counts_finished: u64,
    dead: Vec<JobRow>,
    schedules: Vec<ScheduleRow>,
    plots: Vec<Plot>,
}

pub(crate) async fn page(viewer: Viewer, State(source): State<Source>) -> Response {
    let frame = Frame::of(&source, &viewer);
    let now = SystemTime::now();
    // The plots start on a minute, so each bar is one whole minute.
    let since = now - Duration::from_secs(60 * u64::from(MINUTES));
    let since = SystemTime::UNIX_EPOCH
        + Duration::from_secs(
            since
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() / 60 * 60 + 60),
        );
    let stale_filter = RecordFilter {
        status: Some(RecordStatus::Stale),
        limit: SHOWN,
        ..RecordFilter::default()
    };
    let (summary, stale) = match tokio::try_join!(
        source.records.summary(since),
        source.records.page(&stale_filter, None)
    ) {
        Ok(both) => both,
        Err(e) => return store_failed(frame, e),
    };
    let mut plots = vec![Plot::per_minute(
        "Calls completed per minute",
        since,
        MINUTES,
        summary.completed_per_minute.iter().copied(),
    )];
    let (mut queues, mut dead, mut schedules) = (Vec::new(), Vec::new(), Vec::new());
    let mut queues_partial = false;
    if let Some(queue) = &source.queue {
        let dead_query = JobsQuery {
            state: Some(JobFilter::Dead),
            limit: SHOWN,
            ..JobsQuery::default()
        };
        let read = tokio::try_join!(
            queue.queue_counts(),
            queue.jobs_page(&dead_query, None),
            queue.schedules(),
            queue.finished_per_minute(since),
        );
        let (counts, dead_page, states, finished) = match read {
            Ok(all) => all,
            Err(e) => return store_failed(frame, e),
        };
        queues = counts.queues;
        queues_partial = counts.partial;
        dead = dead_page.jobs.iter().map(JobRow::of).collect();
        schedules = match ScheduleRow::all(queue, &states).await {
            Ok(rows) => rows,
            Err(e) => return store_failed(frame, e),
        };
        plots.push(Plot::per_minute(
            "Jobs done per minute",
            since,
            MINUTES,
            finished.iter().map(|m| (m.minute, m.done)),
        ));
        plots.push(Plot::per_minute(
            "Jobs dead-lettered per minute",
            since,
            MINUTES,
            finished.iter().map(|m| (m.minute, m.dead)),
        ));
    }
    render(
        StatusCode::OK,
        &OverviewPage {
            frame,
            scopes: summary.scopes,
            scopes_partial: summary.partial,
            summary_rows: idem_core::SUMMARY_ROWS,
            stale_searched: stale.next.is_some() && stale.records.len() < SHOWN,
            stale: stale
                .records
                .iter()
                .map(|r| RecordRow::of(r, now))
                .collect(),
            queues,
            queues_partial,
            counts_finished: idem_queue::COUNTS_FINISHED,
            dead,
            schedules,
            plots,
        },
    )
}
