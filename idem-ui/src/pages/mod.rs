//! The pages: each module reads what its page shows and renders its template; this one holds
//! what they share (the frame around every page, rendering, errors, links).

mod jobs;
mod overview;
mod records;
mod schedules;

use askama::Template;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use idem_core::StoreError;

use crate::auth;
use crate::source::Source;

pub(crate) use records::RecordRow;

/// The routes of the pages, the login and the stylesheet.
pub(crate) fn routes() -> Router<Source> {
    Router::new()
        .route("/", get(overview::page))
        .route("/records", get(records::list))
        .route("/record", get(records::detail))
        .route("/jobs", get(jobs::list))
        .route("/job", get(jobs::detail))
        .route("/schedules", get(schedules::list))
        .route("/schedule", get(schedules::detail))
        .route("/login", get(auth::login_page).post(auth::login))
        .route("/logout", axum::routing::post(auth::logout))
        .route("/assets/style.css", get(style))
}

async fn style() -> Response {
    (
        [(CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../assets/style.css"),
    )
        .into_response()
}

/// What every page shows around its content: the navigation, and whether to offer actions.
pub(crate) struct Frame {
    pub logged_in: bool,
    pub can_act: bool,
    pub read_only: bool,
    pub has_queue: bool,
    pub csrf: String,
}

impl Frame {
    pub fn of(source: &Source, viewer: &auth::Viewer) -> Frame {
        Frame {
            logged_in: viewer.logged_in(),
            can_act: viewer.can_act(&source.auth),
            read_only: source.auth.read_only,
            has_queue: source.queue.is_some(),
            csrf: viewer.csrf(&source.auth),
        }
    }
}

/// `template` as an HTML response with `status`.
pub(crate) fn render(status: StatusCode, template: &impl Template) -> Response {
    match template.render() {
        Ok(html) => (status, [(CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response(),
        Err(e) => {
            tracing::error!("idem-ui: a page failed to render: {e}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page failed to render",
            )
                .into_response()
        }
    }
}

#[derive(Template)]
#[template(path = "login.html")]
pub(crate) struct LoginPage {
    pub frame: Frame,
    pub message: Option<String>,
}

/// A page with a message: an action's outcome, or what went wrong.
#[derive(Template)]
#[template(path = "message.html")]
pub(crate) struct MessagePage {
    pub frame: Frame,
    pub title: String,
    pub message: String,
    /// Where to go next: (link, text).
    pub back: Option<(String, String)>,
}

/// A message page with `status`.
pub(crate) fn message(
    status: StatusCode,
    frame: Frame,
    title: &str,
    message: String,
    back: Option<(String, String)>,
) -> Response {
    render(
        status,
        &MessagePage {
            frame,
            title: title.to_owned(),
            message,
            back,
        },
    )
}

/// The store failed: a page that says so (the store's error is the operator's to read).
pub(crate) fn store_failed(frame: Frame, e: StoreError) -> Response {
    tracing::warn!("idem-ui: the store failed: {e}");
    message(
        StatusCode::BAD_GATEWAY,
        frame,
        "The store failed",
        format!("The store failed to answer: {e}"),
        None,
    )
}

/// A link to `path` with the query `pairs` (URL-encoded).
pub(crate) fn link(path: &str, pairs: &[(&str, &str)]) -> String {
    let pairs: Vec<_> = pairs.iter().filter(|(_, v)| !v.is_empty()).collect();
    if pairs.is_empty() {
        return path.to_owned();
    }
    format!(
        "{path}?{}",
        serde_urlencoded::to_string(pairs).unwrap_or_default()
    )
}
