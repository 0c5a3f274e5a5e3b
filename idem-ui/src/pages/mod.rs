//! The pages: each module reads what its page shows and renders its template (the frame they
//! share is `frame.rs`); this one routes to them.

mod jobs;
mod login;
mod overview;
mod records;
mod schedules;

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::source::Source;

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
        .route("/login", get(login::login_page).post(login::login))
        .route("/logout", axum::routing::post(login::logout))
        .route("/assets/style.css", get(style))
}

async fn style() -> Response {
    (
        [(CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../assets/style.css"),
    )
        .into_response()
}
