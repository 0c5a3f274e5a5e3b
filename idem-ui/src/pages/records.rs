//! The records: a page of them with filters, and one record with its journal.

use std::time::SystemTime;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use idem_core::{InspectedRecord, RecordCursor, RecordFilter, RecordState, RecordStatus};
use serde::Deserialize;

use crate::format;
use crate::frame::{link, message, render, store_failed, Frame};
use crate::source::Source;
use crate::viewer::Viewer;

/// Records per page.
const PAGE: usize = 50;

/// A record as the pages show it.
pub(crate) struct RecordRow {
    pub key: String,
    pub scope: String,
    pub status: &'static str,
    pub fence: u64,
    pub holder: String,
    /// The lease's end (claimed) or the completion (completed).
    pub when: String,
    pub keep_until: String,
    pub output_bytes: String,
    pub href: String,
}

impl RecordRow {
    pub fn of(inspected: &InspectedRecord, now: SystemTime) -> RecordRow {
        let record = &inspected.record;
        let (when, keep_until) = match &record.state {
            RecordState::InProgress { lease_expires_at } => (
                format!("lease ends {}", format::relative(*lease_expires_at)),
                "-".to_owned(),
            ),
            RecordState::Completed {
                completed_at,
                expires_at,
                ..
            } => (
                format!("completed {}", format::time(*completed_at)),
                format::time(*expires_at),
            ),
        };
        RecordRow {
            key: record.key.as_str().to_owned(),
            scope: record.key.scope().to_owned(),
            status: inspected.status(now).as_str(),
            fence: record.fence.0,
            holder: inspected.holder.clone().unwrap_or_else(|| "-".to_owned()),
            when,
            keep_until,
            output_bytes: inspected
                .output_bytes
                .map_or_else(|| "-".to_owned(), |n| format!("{n} B")),
            href: link(
                "/record",
                &[("key", record.key.as_str()), ("scope", record.key.scope())],
            ),
        }
    }

    pub fn claimed(&self) -> bool {
        matches!(self.status, "claimed" | "stale")
    }
}

#[derive(Deserialize, Default)]
pub(crate) struct ListQuery {
    #[serde(default)]
    state: String,
    #[serde(default)]
    scope: String,
    #[serde(default)]
    prefix: String,
    after_key: Option<String>,
    after_scope: Option<String>,
}

#[derive(Template)]
#[template(path = "records.html")]
struct ListPage {
    frame: Frame,
    state: String,
    scope: String,
    prefix: String,
    records: Vec<RecordRow>,
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
    let status = match query.state.as_str() {
        "" => None,
        name => match RecordStatus::parse(name) {
            Some(status) => Some(status),
            None => {
                return message(
                    StatusCode::BAD_REQUEST,
                    frame,
                    "No such status",
                    format!(
                        "{name:?} is not a record status: claimed, stale, completed or expired"
                    ),
                    Some(("/records".to_owned(), "All records".to_owned())),
                )
            }
        },
    };
    let filter = RecordFilter {
        status,
        scope: Some(query.scope.clone()).filter(|s| !s.is_empty()),
        key_prefix: Some(query.prefix.clone()).filter(|s| !s.is_empty()),
        limit: PAGE,
        ..RecordFilter::default()
    };
    let after = query.after_key.clone().map(|key| RecordCursor {
        key,
        scope: query.after_scope.clone().unwrap_or_default(),
    });
    let found = match source.records.page(&filter, after.as_ref()).await {
        Ok(found) => found,
        Err(e) => return store_failed(frame, e),
    };
    let now = SystemTime::now();
    let records: Vec<RecordRow> = found
        .records
        .iter()
        .map(|r| RecordRow::of(r, now))
        .collect();
    let filters = [
        ("state", query.state.as_str()),
        ("scope", query.scope.as_str()),
        ("prefix", query.prefix.as_str()),
    ];
    let next = found.next.as_ref().map(|next| {
        let mut pairs = filters.to_vec();
        pairs.extend([
            ("after_key", next.key.as_str()),
            ("after_scope", next.scope.as_str()),
        ]);
        link("/records", &pairs)
    });
    let searched = next.is_some() && records.len() < PAGE;
    render(
        StatusCode::OK,
        &ListPage {
            frame,
            first: after.is_some().then(|| link("/records", &filters)),
            searched,
            scan: filter.scan,
            state: query.state,
            scope: query.scope,
            prefix: query.prefix,
            records,
            next,
        },
    )
}

#[derive(Deserialize)]
pub(crate) struct RecordQuery {
    key: String,
    #[serde(default)]
    scope: String,
}

struct JournalRow {
    effect: String,
    state: &'static str,
    fence: u64,
    recorded_at: String,
    expires_at: String,
}

#[derive(Template)]
#[template(path = "record.html")]
struct DetailPage {
    frame: Frame,
    key: String,
    records: Vec<RecordRow>,
    journal: Vec<JournalRow>,
}

pub(crate) async fn detail(
    viewer: Viewer,
    State(source): State<Source>,
    Query(query): Query<RecordQuery>,
) -> Response {
    let frame = Frame::of(&source, &viewer);
    let scope = Some(query.scope.as_str()).filter(|s| !s.is_empty());
    let (found, journal) = match tokio::try_join!(
        source.records.find(&query.key, scope),
        source.records.journal(&query.key, scope)
    ) {
        Ok(both) => both,
        Err(e) => return store_failed(frame, e),
    };
    if found.is_empty() && journal.is_empty() {
        return message(
            StatusCode::NOT_FOUND,
            frame,
            "No such record",
            format!("No record has the key {:?}.", query.key),
            Some(("/records".to_owned(), "All records".to_owned())),
        );
    }
    let now = SystemTime::now();
    render(
        StatusCode::OK,
        &DetailPage {
            frame,
            key: query.key,
            records: found.iter().map(|r| RecordRow::of(r, now)).collect(),
            journal: journal
                .into_iter()
                .map(|e| JournalRow {
                    effect: format!("{} ({})", e.effect, e.scope),
                    state: match e.entry.state {
                        idem_core::EffectState::Done => "done",
                        idem_core::EffectState::Started => "started",
                    },
                    fence: e.entry.fence.0,
                    recorded_at: format::maybe_time(e.recorded_at),
                    expires_at: format::maybe_time(e.expires_at),
                })
                .collect(),
        },
    )
}
