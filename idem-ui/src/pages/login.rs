//! The login page, the login and the logout: where a session opens and ends.

use axum::extract::State;
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use crate::auth::{loopback_host, COOKIE_NAME, SESSION_LIFETIME};
use crate::frame::{render, Frame, LoginPage};
use crate::source::Source;
use crate::viewer::Viewer;

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    token: String,
}

pub(crate) async fn login_page(State(source): State<Source>, headers: HeaderMap) -> Response {
    if !source.auth.view_needs_login && !loopback_host(&headers) {
        return (
            StatusCode::MISDIRECTED_REQUEST,
            "refused: not a loopback address",
        )
            .into_response();
    }
    let viewer = Viewer {
        session: source.auth.session(&headers),
    };
    let frame = Frame::of(&source, &viewer);
    render(
        StatusCode::OK,
        &LoginPage {
            frame,
            message: None,
        },
    )
}

pub(crate) async fn login(
    State(source): State<Source>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if !source.auth.view_needs_login && !loopback_host(&headers) {
        return (
            StatusCode::MISDIRECTED_REQUEST,
            "refused: not a loopback address",
        )
            .into_response();
    }
    if !source.auth.token_matches(&form.token) {
        tracing::warn!("idem-ui: a login with a wrong token was refused");
        let frame = Frame::of(&source, &Viewer { session: None });
        return render(
            StatusCode::UNAUTHORIZED,
            &LoginPage {
                frame,
                message: Some("That is not the dashboard's token.".to_owned()),
            },
        );
    }
    let cookie = format!(
        "{COOKIE_NAME}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        source.auth.open_session(),
        SESSION_LIFETIME.as_secs()
    );
    ([(SET_COOKIE, cookie)], Redirect::to("/")).into_response()
}

#[derive(Deserialize)]
pub(crate) struct LogoutForm {
    csrf: String,
}

pub(crate) async fn logout(
    viewer: Viewer,
    State(source): State<Source>,
    Form(form): Form<LogoutForm>,
) -> Response {
    let Some(session) = viewer.session.as_deref() else {
        return Redirect::to("/login").into_response();
    };
    if !viewer.csrf_matches(&source.auth, &form.csrf) {
        return (
            StatusCode::FORBIDDEN,
            "refused: the form's token does not match",
        )
            .into_response();
    }
    // The session ends here, not only in this browser: a copied cookie stops working too.
    source.auth.close_session(session);
    let cookie = format!("{COOKIE_NAME}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    ([(SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
}
