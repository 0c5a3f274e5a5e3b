//! Who may look and who may act: the token, the session cookie a login sets, and the CSRF
//! token every action carries. Both are HMAC-SHA256 values under a key made at start, so a
//! restart signs everyone out, and nothing is kept per session.

use axum::extract::{FromRequestParts, State};
use axum::http::header::{COOKIE, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::pages::{render, Frame, LoginPage};
use crate::source::Source;

const COOKIE_NAME: &str = "idem_session";

/// `n` random bytes, as hex.
pub(crate) fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    hex::encode(bytes)
}

/// The dashboard's secrets and rules.
pub(crate) struct Auth {
    key: Vec<u8>,
    token: [u8; 32],
    /// A token of the operator's: every page needs the login, not only actions.
    pub view_needs_login: bool,
    pub read_only: bool,
}

impl Auth {
    pub fn new(token: String, view_needs_login: bool, read_only: bool) -> Auth {
        Auth {
            key: random_hex(32).into_bytes(),
            token: Sha256::digest(token.as_bytes()).into(),
            view_needs_login,
            read_only,
        }
    }

    fn mac(&self, label: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(label.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// The value of a logged-in session's cookie.
    fn session(&self) -> String {
        self.mac("session")
    }

    /// The token each action's form carries.
    pub fn csrf(&self) -> String {
        self.mac("csrf")
    }

    pub fn token_matches(&self, given: &str) -> bool {
        let given: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        bool::from(given.ct_eq(&self.token))
    }

    pub fn csrf_matches(&self, given: &str) -> bool {
        bool::from(given.as_bytes().ct_eq(self.csrf().as_bytes()))
    }

    fn logged_in(&self, headers: &HeaderMap) -> bool {
        let session = self.session();
        headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| {
                name == COOKIE_NAME && bool::from(value.as_bytes().ct_eq(session.as_bytes()))
            })
    }
}

/// Who asks for a page: whether they logged in. A page that needs the login redirects there.
pub(crate) struct Viewer {
    pub logged_in: bool,
}

impl Viewer {
    /// They may act: logged in, and the dashboard is not read-only.
    pub fn can_act(&self, auth: &Auth) -> bool {
        self.logged_in && !auth.read_only
    }
}

impl FromRequestParts<Source> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Source) -> Result<Viewer, Response> {
        let logged_in = state.auth.logged_in(&parts.headers);
        if state.auth.view_needs_login && !logged_in {
            return Err(Redirect::to("/login").into_response());
        }
        Ok(Viewer { logged_in })
    }
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    token: String,
}

pub(crate) async fn login_page(State(source): State<Source>, headers: HeaderMap) -> Response {
    let frame = Frame::new(&source, source.auth.logged_in(&headers), false);
    render(
        StatusCode::OK,
        &LoginPage {
            frame,
            message: None,
        },
    )
}

pub(crate) async fn login(State(source): State<Source>, Form(form): Form<LoginForm>) -> Response {
    if !source.auth.token_matches(&form.token) {
        tracing::warn!("idem-ui: a login with a wrong token was refused");
        let frame = Frame::new(&source, false, false);
        return render(
            StatusCode::UNAUTHORIZED,
            &LoginPage {
                frame,
                message: Some("That is not the dashboard's token.".to_owned()),
            },
        );
    }
    let cookie = format!(
        "{COOKIE_NAME}={}; Path=/; HttpOnly; SameSite=Strict",
        source.auth.session()
    );
    ([(SET_COOKIE, cookie)], Redirect::to("/")).into_response()
}

#[derive(Deserialize)]
pub(crate) struct LogoutForm {
    csrf: String,
}

pub(crate) async fn logout(State(source): State<Source>, Form(form): Form<LogoutForm>) -> Response {
    if !source.auth.csrf_matches(&form.csrf) {
        return (
            StatusCode::FORBIDDEN,
            "refused: the form's token does not match",
        )
            .into_response();
    }
    let cookie = format!("{COOKIE_NAME}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    ([(SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
}
