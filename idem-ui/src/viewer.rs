//! Who asks for a page: the session their cookie names, if any, and the login a token asks
//! for. (What every request passes first is `guard.rs`'s.)

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use subtle::ConstantTimeEq;

use crate::auth::Auth;
use crate::source::Source;

/// Who asks for a page: their session, if they logged in. A page that needs the login
/// redirects there.
pub(crate) struct Viewer {
    pub session: Option<String>,
}

impl Viewer {
    pub fn logged_in(&self) -> bool {
        self.session.is_some()
    }

    /// They may act: logged in, and the dashboard is not read-only.
    pub fn can_act(&self, auth: &Auth) -> bool {
        self.logged_in() && !auth.read_only
    }

    /// The form token of their session (empty without one).
    pub fn csrf(&self, auth: &Auth) -> String {
        self.session
            .as_deref()
            .map_or_else(String::new, |id| auth.csrf(id))
    }

    /// `given` is their session's form token.
    pub fn csrf_matches(&self, auth: &Auth, given: &str) -> bool {
        let expected = self.csrf(auth);
        !expected.is_empty() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
    }
}

impl FromRequestParts<Source> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Source) -> Result<Viewer, Response> {
        let session = state.auth.session(&parts.headers);
        if state.auth.view_needs_login && session.is_none() {
            return Err(Redirect::to("/login").into_response());
        }
        Ok(Viewer { session })
    }
}
