//! The login page, the login and the logout: where a session opens and ends. Logins are
//! limited per peer (`login_limit.rs`).

use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::{ConnectInfo, State};
use axum::http::header::{RETRY_AFTER, SET_COOKIE};
use axum::http::{Extensions, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

use crate::frame::{render, Frame, LoginPage};
use crate::source::Source;
use crate::viewer::Viewer;

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    token: String,
}

pub(crate) async fn login_page(State(source): State<Source>, headers: HeaderMap) -> Response {
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
    extensions: Extensions,
    Form(form): Form<LoginForm>,
) -> Response {
    let auth = &source.auth;
    let peer = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    let now = Instant::now();
    let refused = |status: StatusCode, message: String, wait: Option<std::time::Duration>| {
        let frame = Frame::of(&source, &Viewer { session: None });
        let mut response = render(
            status,
            &LoginPage {
                frame,
                message: Some(message),
            },
        );
        if let Some(wait) = wait {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            response.headers_mut().insert(RETRY_AFTER, secs.into());
        }
        response
    };
    // While the peer waits, no token is even compared: guessing cannot go on meanwhile.
    if let Some(wait) = auth.login_limit.wait(peer, now) {
        return refused(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "Too many failed logins: try again in {} s.",
                wait.as_secs().max(1)
            ),
            Some(wait),
        );
    }
    if !auth.token_matches(&form.token) {
        let (wait, log) = auth.login_limit.failed(peer, now);
        if log {
            tracing::warn!(
                peer = ?peer,
                wait = ?wait,
                "idem-ui: a login with a wrong token was refused (further ones from this peer \
                 are logged only when they make it wait)"
            );
        }
        return refused(
            StatusCode::UNAUTHORIZED,
            "That is not the dashboard's token.".to_owned(),
            wait,
        );
    }
    auth.login_limit.succeeded(peer);
    let cookie = auth.session_cookie(Some(&auth.open_session()));
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
    let cookie = source.auth.session_cookie(None);
    ([(SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
}
