//! The operator's actions, each the same operation as the `idem` command's, with its safety
//! rules: POSTs only, from a logged-in session, carrying the form token, never in read-only.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use axum::{Form, Router};
use idem_core::StoreError;
use idem_core::{release_claim, Fence, Key, Released};
use idem_queue::{Cancel, Queue};
use serde::Deserialize;

use crate::frame::{link, message, store_failed, Frame};
use crate::source::Source;
use crate::viewer::Viewer;

pub(crate) fn routes() -> Router<Source> {
    Router::new()
        .route("/actions/release", post(release))
        .route("/actions/forget", post(forget))
        .route("/actions/retry", post(retry))
        .route("/actions/retry-all-dead", post(retry_all_dead))
        .route("/actions/discard", post(discard))
        .route("/actions/cancel", post(cancel))
        .route("/actions/pause", post(pause))
        .route("/actions/resume", post(resume))
}

/// Refuses the action unless the session may act and the form carries its token.
fn refused(source: &Source, viewer: &Viewer, csrf: &str) -> Option<Response> {
    let frame = || Frame::of(source, viewer);
    let (why, back) = if source.auth.read_only {
        ("The dashboard is read-only: it takes no action.", None)
    } else if !viewer.logged_in() {
        (
            "Actions need the dashboard's token: log in first.",
            Some(("/login".to_owned(), "Log in".to_owned())),
        )
    } else if !viewer.csrf_matches(&source.auth, csrf) {
        (
            "The form's token does not match this session: reload the page and try again.",
            None,
        )
    } else {
        return None;
    };
    tracing::warn!("idem-ui: an action was refused: {why}");
    Some(message(
        StatusCode::FORBIDDEN,
        frame(),
        "Refused",
        why.to_owned(),
        back,
    ))
}

fn done(
    source: &Source,
    viewer: &Viewer,
    title: &str,
    text: String,
    back: (String, String),
) -> Response {
    message(
        StatusCode::OK,
        Frame::of(source, viewer),
        title,
        text,
        Some(back),
    )
}

fn refuse(source: &Source, viewer: &Viewer, text: String, back: (String, String)) -> Response {
    message(
        StatusCode::CONFLICT,
        Frame::of(source, viewer),
        "Refused",
        text,
        Some(back),
    )
}

fn bad_key(source: &Source, viewer: &Viewer, e: impl std::fmt::Display) -> Response {
    message(
        StatusCode::BAD_REQUEST,
        Frame::of(source, viewer),
        "Not a key",
        e.to_string(),
        None,
    )
}

#[derive(Deserialize)]
pub(crate) struct RecordForm {
    csrf: String,
    key: String,
    scope: String,
    fence: u64,
    #[serde(default)]
    force: Option<String>,
}

async fn release(
    viewer: Viewer,
    State(source): State<Source>,
    Form(form): Form<RecordForm>,
) -> Response {
    if let Some(refusal) = refused(&source, &viewer, &form.csrf) {
        return refusal;
    }
    let key = match Key::new(form.key.clone()).and_then(|k| k.with_stored_scope(&form.scope)) {
        Ok(key) => key,
        Err(e) => return bad_key(&source, &viewer, e),
    };
    let back = (
        link("/record", &[("key", &form.key), ("scope", &form.scope)]),
        "Back to the record".to_owned(),
    );
    let name = &form.key;
    match release_claim(&*source.records, &key, Fence(form.fence), form.force.is_some()).await {
        Ok(Released::Released) => done(
            &source,
            &viewer,
            "Released",
            format!("Released {name:?} (fence {}): the next delivery runs it.", form.fence),
            back,
        ),
        Ok(Released::Live { holder, left }) => refuse(
            &source,
            &viewer,
            format!(
                "{name:?} is held by {} with {:.1} s of lease left, so its run may still be \
                 going. Releasing it lets the next delivery run beside it (a double run). Wait \
                 for the lease to lapse, or tick \"force\" if that run is known dead.",
                holder.as_deref().unwrap_or("an unknown holder"),
                left.as_secs_f64()
            ),
            back,
        ),
        Ok(Released::Completed) => refuse(
            &source,
            &viewer,
            format!("{name:?} is completed, not claimed: nothing to release (forget it to run it again)."),
            back,
        ),
        Ok(Released::NotFound) => refuse(&source, &viewer, format!("No record has the key {name:?}."), back),
        Ok(Released::Changed) => refuse(
            &source,
            &viewer,
            format!("{name:?} changed meanwhile (completed, renewed or taken over); nothing released."),
            back,
        ),
        Err(e) => store_failed(Frame::of(&source, &viewer), e),
    }
}

#[derive(Deserialize)]
pub(crate) struct ForgetForm {
    csrf: String,
    key: String,
    scope: String,
    /// The operator's "yes" (the `idem forget --yes` of the form).
    #[serde(default)]
    yes: Option<String>,
}

async fn forget(
    viewer: Viewer,
    State(source): State<Source>,
    Form(form): Form<ForgetForm>,
) -> Response {
    if let Some(refusal) = refused(&source, &viewer, &form.csrf) {
        return refusal;
    }
    let key = match Key::new(form.key.clone()).and_then(|k| k.with_stored_scope(&form.scope)) {
        Ok(key) => key,
        Err(e) => return bad_key(&source, &viewer, e),
    };
    let (name, scope) = (&form.key, &form.scope);
    let record = (
        link("/record", &[("key", name), ("scope", scope)]),
        "Back to the record".to_owned(),
    );
    if form.yes.is_none() {
        return refuse(
            &source,
            &viewer,
            format!("Forgetting {name:?} makes its next call run the work again: tick \"yes\" to say so."),
            record,
        );
    }
    answer(
        &source,
        &viewer,
        source.records.forget(&key).await,
        (
            "Forgotten",
            format!("Forgot {name:?}: the next call with this key runs the work again."),
            ("/records".to_owned(), "All records".to_owned()),
        ),
        (
            format!(
                "{name:?} has no completed record in scope {scope:?} (a claim is released, not \
                 forgotten)."
            ),
            record,
        ),
    )
}

#[derive(Deserialize)]
pub(crate) struct JobForm {
    csrf: String,
    key: String,
}

/// The refusal of a queue's action on a store without one.
/// The refusal of a queue's action on a store without one.
fn no_queue(source: &Source, viewer: &Viewer) -> Response {
    message(
        StatusCode::NOT_FOUND,
        Frame::of(source, viewer),
        "No work queue",
        "This store has no work queue.".to_owned(),
        None,
    )
}

fn job_link(key: &str) -> (String, String) {
    (link("/job", &[("key", key)]), "Back to the job".to_owned())
}

/// The queue a job or schedule action acts on, once the action is allowed; else the refusal.
fn queue_for<'a>(
    source: &'a Source,
    viewer: &Viewer,
    csrf: &str,
) -> Result<&'a Queue, Box<Response>> {
    if let Some(refusal) = refused(source, viewer, csrf) {
        return Err(Box::new(refusal));
    }
    source
        .queue
        .as_ref()
        .ok_or_else(|| Box::new(no_queue(source, viewer)))
}

/// The answer to an operation that either applied (`Ok(true)`: `done`, a title, text and
/// where next) or found nothing to apply to (`Ok(false)`: `not`, a refusal's text and where
/// next).
fn answer(
    source: &Source,
    viewer: &Viewer,
    outcome: Result<bool, StoreError>,
    (title, text, next): (&str, String, (String, String)),
    (refusal, back): (String, (String, String)),
) -> Response {
    match outcome {
        Ok(true) => done(source, viewer, title, text, next),
        Ok(false) => refuse(source, viewer, refusal, back),
        Err(e) => store_failed(Frame::of(source, viewer), e),
    }
}

async fn retry(
    viewer: Viewer,
    State(source): State<Source>,
    Form(form): Form<JobForm>,
) -> Response {
    let queue = match queue_for(&source, &viewer, &form.csrf) {
        Ok(queue) => queue,
        Err(refusal) => return *refusal,
    };
    let key = &form.key;
    answer(
        &source,
        &viewer,
        queue.retry_dead(key).await,
        (
            "Retried",
            format!("{key:?} is back in the queue with fresh attempts, to run now."),
            job_link(key),
        ),
        (
            format!("{key:?} is not a dead job: only dead jobs are retried."),
            job_link(key),
        ),
    )
}

#[derive(Deserialize)]
pub(crate) struct ConfirmForm {
    csrf: String,
    #[serde(default)]
    yes: Option<String>,
}

async fn retry_all_dead(
    viewer: Viewer,
    State(source): State<Source>,
    Form(form): Form<ConfirmForm>,
) -> Response {
    let queue = match queue_for(&source, &viewer, &form.csrf) {
        Ok(queue) => queue,
        Err(refusal) => return *refusal,
    };
    if form.yes.is_none() {
        return refuse(
            &source,
            &viewer,
            "Retrying every dead job runs each again: tick \"yes\" to say so.".to_owned(),
            ("/jobs?state=dead".to_owned(), "Dead jobs".to_owned()),
        );
    }
    match queue.retry_all_dead().await {
        Ok(retried) => done(
            &source,
            &viewer,
            "Retried",
            format!(
                "{} dead jobs are back in the queue with fresh attempts, to run now.",
                retried.len()
            ),
            ("/jobs?state=queued".to_owned(), "Queued jobs".to_owned()),
        ),
        Err(e) => store_failed(Frame::of(&source, &viewer), e),
    }
}

async fn discard(
    viewer: Viewer,
    State(source): State<Source>,
    Form(form): Form<JobForm>,
) -> Response {
    let queue = match queue_for(&source, &viewer, &form.csrf) {
        Ok(queue) => queue,
        Err(refusal) => return *refusal,
    };
    let key = &form.key;
    answer(
        &source,
        &viewer,
        queue.discard(key).await,
        (
            "Discarded",
            format!("Discarded the job {key:?}; its key can be enqueued again."),
            ("/jobs?state=dead".to_owned(), "Dead jobs".to_owned()),
        ),
        (
            format!("{key:?} is not a dead or cancelled job: only those are discarded."),
            job_link(key),
        ),
    )
}

async fn cancel(
    viewer: Viewer,
    State(source): State<Source>,
    Form(form): Form<JobForm>,
) -> Response {
    let queue = match queue_for(&source, &viewer, &form.csrf) {
        Ok(queue) => queue,
        Err(refusal) => return *refusal,
    };
    let key = &form.key;
    let (title, text) = match queue.cancel(key, "cancelled from the dashboard").await {
        Ok(Cancel::Cancelled) => ("Cancelled", format!("Cancelled {key:?}: it will not run.")),
        Ok(Cancel::Requested) => (
            "Cancel requested",
            format!(
                "{key:?} is running: it is asked to stop (its handler hears it at the next lease \
             renewal) and ends cancelled unless it finishes first."
            ),
        ),
        Ok(Cancel::Finished(state)) => {
            return refuse(
                &source,
                &viewer,
                format!("{key:?} already ended ({state:?}): nothing to cancel."),
                job_link(key),
            )
        }
        Ok(Cancel::NotFound) => {
            return refuse(
                &source,
                &viewer,
                format!("No job has the key {key:?}."),
                job_link(key),
            )
        }
        Err(e) => return store_failed(Frame::of(&source, &viewer), e),
    };
    done(&source, &viewer, title, text, job_link(key))
}

#[derive(Deserialize)]
pub(crate) struct ScheduleForm {
    csrf: String,
    name: String,
}

async fn pause(
    viewer: Viewer,
    State(source): State<Source>,
    Form(form): Form<ScheduleForm>,
) -> Response {
    toggle(viewer, source, form, true).await
}

async fn resume(
    viewer: Viewer,
    State(source): State<Source>,
    Form(form): Form<ScheduleForm>,
) -> Response {
    toggle(viewer, source, form, false).await
}

async fn toggle(viewer: Viewer, source: Source, form: ScheduleForm, pause: bool) -> Response {
    let queue = match queue_for(&source, &viewer, &form.csrf) {
        Ok(queue) => queue,
        Err(refusal) => return *refusal,
    };
    let name = &form.name;
    let (outcome, title, text) = if pause {
        (
            queue.pause_schedule(name).await,
            "Paused",
            format!("Paused {name:?}: its ticks are passed over until it is resumed."),
        )
    } else {
        (
            queue.resume_schedule(name).await,
            "Resumed",
            format!("Resumed {name:?}."),
        )
    };
    let back = || {
        (
            link("/schedule", &[("name", name)]),
            "Back to the schedule".to_owned(),
        )
    };
    answer(
        &source,
        &viewer,
        outcome,
        (title, text, back()),
        (format!("No schedule is named {name:?}."), back()),
    )
}
