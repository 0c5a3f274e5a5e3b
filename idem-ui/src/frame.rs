//! What every page and action response shares: the frame around the content, rendering,
//! message pages, and links.

use askama::Template;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idem_core::StoreError;

use crate::source::Source;
use crate::viewer::Viewer;

/// What every page shows around its content: the navigation, and whether to offer actions.
pub(crate) struct Frame {
    pub logged_in: bool,
    pub can_act: bool,
    pub read_only: bool,
    pub has_queue: bool,
    pub csrf: String,
}

impl Frame {
    pub fn of(source: &Source, viewer: &Viewer) -> Frame {
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

/// The store failed: a page that says so in plain words. The error itself (which can name
/// hosts, users, tables and statements) goes to the log in full, never to the viewer.
pub(crate) fn store_failed(frame: Frame, e: StoreError) -> Response {
    tracing::error!(error = ?e, "idem-ui: the store failed: {e}");
    message(
        StatusCode::BAD_GATEWAY,
        frame,
        "The store did not answer",
        "The store did not answer in time or refused the request. The details are in the \
         dashboard's log; try again shortly."
            .to_owned(),
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
