//! Who is calling: the part of a record's key that keeps two callers' keys apart, so a stored
//! answer is only ever replayed to the caller whose request caused it.
//!
//! A scope function reads the request's head and names its caller with a [`Scope`], or returns
//! `None` when the request names no caller: the layer then answers 401 and runs nothing. There
//! is no shared "anonymous" scope unless the application asks for one with [`shared`].
//!
//! - **An authenticated principal** ([`Scope::caller`]): a user or API client id that your
//!   authentication established. The documented path: an auth layer that runs *before* the
//!   idempotency layer inserts a [`Caller`] extension (read by [`caller`] and by the default,
//!   [`authenticated`]), or any extension of its own type (read with [`extension`]).
//! - **A credential** ([`Scope::credential`]): a bearer token, an `Authorization` header, a
//!   session cookie ([`bearer_token`], [`authorization_header`], [`cookie`]). It is stored as an
//!   HMAC-SHA256 under a server secret ([`IdempotencyLayer::secret`](crate::IdempotencyLayer::secret),
//!   or one the store keeps), never in clear and never as a bare hash that could be tested
//!   against guesses offline.
//! - **Everyone at once** ([`shared`]): for a single-caller, server-to-server endpoint only.
//!
//! A scope names the caller; it does not authenticate it. A credential scope keeps an attacker
//! who lacks the victim's credential from reaching the victim's answers, but an application
//! still authenticates requests itself: put its auth layer outside the idempotency layer, so a
//! request without valid credentials is refused before any answer is replayed.

use http::request::Parts;
use std::sync::Arc;

/// The caller a request comes from, as a scope function names it. Built with
/// [`caller`](Scope::caller), [`credential`](Scope::credential) or [`shared`](Scope::shared);
/// a `String` or `&str` converts to a caller.
#[derive(Clone, PartialEq, Eq)]
pub struct Scope(pub(crate) Kind);

#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A stable, non-secret id: stored as given (hashed only when too long or not printable).
    Caller(String),
    /// A secret that names its holder: stored only as an HMAC under the layer's secret.
    Credential(Vec<u8>),
    /// One scope for every request.
    Shared,
}

impl Scope {
    /// A caller named by a stable id your authentication established (a user id, an API
    /// client id): not a secret, since it is stored as given. Keys survive a rotated token.
    pub fn caller(id: impl Into<String>) -> Scope {
        Scope(Kind::Caller(id.into()))
    }

    /// A caller named by a credential it holds (a token, a session id). The layer stores an
    /// HMAC-SHA256 of it under its secret, so the store never holds the credential, nor a
    /// hash of it that a leaked table would let anyone test guesses against.
    pub fn credential(secret: impl AsRef<[u8]>) -> Scope {
        Scope(Kind::Credential(secret.as_ref().to_vec()))
    }

    /// One scope shared by every request: any caller who sends another's key and body gets
    /// the other's answer. Only for endpoints that a single caller uses (server to server).
    pub fn shared() -> Scope {
        Scope(Kind::Shared)
    }
}

impl Scope {
    /// Whether this scope names a caller: a caller id or a credential that is empty (or only
    /// white space) names nobody, and would otherwise put every such request in one scope.
    pub(crate) fn names_someone(&self) -> bool {
        match &self.0 {
            Kind::Caller(id) => !id.trim().is_empty(),
            Kind::Credential(secret) => !secret.trim_ascii().is_empty(),
            Kind::Shared => true,
        }
    }
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Kind::Caller(id) => f.debug_tuple("Caller").field(id).finish(),
            // A credential is never printed.
            Kind::Credential(_) => f.write_str("Credential(..)"),
            Kind::Shared => f.write_str("Shared"),
        }
    }
}

impl From<String> for Scope {
    fn from(id: String) -> Scope {
        Scope::caller(id)
    }
}

impl From<&str> for Scope {
    fn from(id: &str) -> Scope {
        Scope::caller(id)
    }
}

/// A function of the request's head that names its caller, or `None` when the request names no
/// caller (the layer then answers 401 and runs nothing).
pub type ScopeFn = Arc<dyn Fn(&Parts) -> Option<Scope> + Send + Sync>;

/// The authenticated principal, as a request extension: an auth layer that runs before the
/// idempotency layer inserts it once it has checked the request's credentials, and the default
/// scope ([`authenticated`]) and [`caller`] read it.
///
/// ```
/// use axum::{extract::Request, middleware::Next, response::Response, http::StatusCode};
/// use idem_http::Caller;
///
/// async fn auth(mut request: Request, next: Next) -> Result<Response, StatusCode> {
///     let user = check_credentials(&request).ok_or(StatusCode::UNAUTHORIZED)?;
///     request.extensions_mut().insert(Caller::new(user));
///     Ok(next.run(request).await)
/// }
/// # fn check_credentials(_: &Request) -> Option<String> { Some("user-7".into()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Caller(String);

impl Caller {
    /// The caller named by `id`: a stable user or client id, not a secret.
    pub fn new(id: impl Into<String>) -> Caller {
        Caller(id.into())
    }

    /// The caller's id.
    pub fn id(&self) -> &str {
        &self.0
    }
}

/// The default scope: the [`Caller`] extension your auth layer set; without one, the request's
/// `Authorization` header as a credential; without either, no caller (401).
///
/// A cookie-authenticated application therefore gets 401 until its auth layer sets [`Caller`]
/// (or it chooses [`cookie`]): a request without credentials never shares a scope with
/// anyone.
pub fn authenticated(parts: &Parts) -> Option<Scope> {
    caller(parts).or_else(|| authorization_header(parts))
}

/// The [`Caller`] extension an auth layer set before this layer runs; none, no caller (401).
pub fn caller(parts: &Parts) -> Option<Scope> {
    parts
        .extensions
        .get::<Caller>()
        .map(|caller| Scope::caller(caller.id()))
}

/// The caller is read from a request extension of your own type `T` (the user your auth layer
/// stored), by `id`; a request without one names no caller (401).
///
/// ```
/// # use idem_core::MemoryStore;
/// use idem_http::{scope, IdempotencyLayer};
///
/// #[derive(Clone)]
/// struct User { id: u64 }
///
/// let layer = IdempotencyLayer::new(MemoryStore::new())
///     .scope(scope::extension(|user: &User| user.id.to_string()));
/// ```
pub fn extension<T, F>(id: F) -> impl Fn(&Parts) -> Option<Scope> + Send + Sync + 'static
where
    T: Send + Sync + 'static,
    F: Fn(&T) -> String + Send + Sync + 'static,
{
    move |parts: &Parts| parts.extensions.get::<T>().map(|t| Scope::caller(id(t)))
}

/// The caller is the whole `Authorization` header, as a credential (any scheme); a request
/// without one names no caller (401).
pub fn authorization_header(parts: &Parts) -> Option<Scope> {
    let value = only_authorization(parts)?;
    (!value.trim_ascii().is_empty()).then(|| Scope::credential(value))
}

/// The request's one `Authorization` header. Several name no caller: an auth layer that reads
/// another of them than the scope does would name another principal.
fn only_authorization(parts: &Parts) -> Option<&[u8]> {
    let mut all = parts.headers.get_all(http::header::AUTHORIZATION).iter();
    let value = all.next()?;
    all.next().is_none().then_some(value.as_bytes())
}

/// The caller is the bearer token of `Authorization: Bearer <token>`, as a credential; a
/// request without a bearer token names no caller (401).
///
/// ```
/// # use idem_http::scope::bearer_token;
/// let (parts, ()) = http::Request::post("/charges")
///     .header("authorization", "Bearer tok_1")
///     .body(())
///     .unwrap()
///     .into_parts();
/// assert!(bearer_token(&parts).is_some());
/// ```
pub fn bearer_token(parts: &Parts) -> Option<Scope> {
    let value = only_authorization(parts)?;
    let (scheme, token) = value.split_at(value.iter().position(|b| *b == b' ')?);
    let token = token.trim_ascii();
    if !scheme.eq_ignore_ascii_case(b"bearer") || token.is_empty() {
        return None;
    }
    Some(Scope::credential(token))
}

/// The caller is the value of the cookie `name` (a session id), as a credential; a request
/// without it names no caller (401). For cookie-authenticated applications whose auth layer
/// does not set [`Caller`].
///
/// ```
/// # use idem_core::MemoryStore;
/// use idem_http::{scope, IdempotencyLayer};
///
/// let layer = IdempotencyLayer::new(MemoryStore::new()).scope(scope::cookie("session"));
/// ```
pub fn cookie(name: &'static str) -> impl Fn(&Parts) -> Option<Scope> + Send + Sync + 'static {
    move |parts: &Parts| {
        let mut values = parts
            .headers
            .get_all(http::header::COOKIE)
            .iter()
            .flat_map(|value| value.as_bytes().split(|b| *b == b';'))
            .filter_map(|pair| {
                let at = pair.iter().position(|b| *b == b'=')?;
                Some((pair[..at].trim_ascii(), pair[at + 1..].trim_ascii()))
            })
            .filter(|(n, _)| *n == name.as_bytes())
            .map(|(_, value)| value);
        let value = values.next()?;
        // Two cookies of the name (one planted for a parent domain, say) name no one caller.
        (values.next().is_none() && !value.is_empty()).then(|| Scope::credential(value))
    }
}

/// One scope for every request, chosen on purpose: for an endpoint a single caller uses
/// (server to server, behind its own authentication). Any caller who sends another's key and
/// body gets the other's stored answer.
pub fn shared(_: &Parts) -> Option<Scope> {
    Some(Scope::shared())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut request = http::Request::post("/charges");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn bearer_tokens_are_credentials_told_apart() {
        let a = bearer_token(&parts(&[("authorization", "Bearer tok_a")])).unwrap();
        let b = bearer_token(&parts(&[("authorization", "bearer  tok_b ")])).unwrap();
        assert_ne!(a, b);
        assert_eq!(a, Scope::credential("tok_a"));
        assert_eq!(bearer_token(&parts(&[])), None);
        assert_eq!(
            bearer_token(&parts(&[("authorization", "Basic dXNlcg==")])),
            None
        );
        assert_eq!(bearer_token(&parts(&[("authorization", "Bearer ")])), None);
        assert_eq!(bearer_token(&parts(&[("authorization", "Bearer")])), None);
        let twice = parts(&[
            ("authorization", "Bearer tok_a"),
            ("authorization", "Bearer tok_b"),
        ]);
        assert_eq!(bearer_token(&twice), None, "which of them?");
        assert_eq!(authenticated(&twice), None);
        assert!(!format!("{a:?}").contains("tok_a"), "never printed");
    }

    #[test]
    fn the_default_needs_a_caller_or_credentials_and_admits_no_anonymous_request() {
        assert_eq!(authenticated(&parts(&[])), None);
        assert_eq!(authenticated(&parts(&[("authorization", " ")])), None);
        assert_eq!(authenticated(&parts(&[("cookie", "session=abc")])), None);
        assert_eq!(
            authenticated(&parts(&[("authorization", "Basic dXNlcg==")])),
            Some(Scope::credential("Basic dXNlcg=="))
        );
        let mut with_caller = parts(&[("authorization", "Bearer x")]);
        with_caller.extensions.insert(Caller::new("user-7"));
        assert_eq!(authenticated(&with_caller), Some(Scope::caller("user-7")));
    }

    #[test]
    fn a_cookie_scope_reads_only_its_cookie() {
        let session = cookie("session");
        let both = parts(&[("cookie", "theme=dark; session=abc"), ("cookie", "x=1")]);
        assert_eq!(session(&both), Some(Scope::credential("abc")));
        assert_eq!(session(&parts(&[("cookie", "sessionx=abc")])), None);
        assert_eq!(session(&parts(&[("cookie", "session=")])), None);
        let planted = parts(&[("cookie", "session=abc; session=evil")]);
        assert_eq!(session(&planted), None, "which of them?");
        assert_eq!(session(&parts(&[])), None);
    }

    #[test]
    fn empty_ids_and_credentials_name_nobody() {
        assert!(!Scope::caller("").names_someone());
        assert!(!Scope::caller("  ").names_someone());
        assert!(!Scope::credential(" ").names_someone());
        assert!(Scope::caller("u1").names_someone());
        assert!(Scope::shared().names_someone());
    }

    #[test]
    fn an_extension_scope_reads_the_applications_own_type() {
        #[derive(Clone)]
        struct User(u64);
        let by_user = extension(|user: &User| user.0.to_string());
        let mut request = parts(&[]);
        assert_eq!(by_user(&request), None);
        request.extensions.insert(User(42));
        assert_eq!(by_user(&request), Some(Scope::caller("42")));
    }
}
