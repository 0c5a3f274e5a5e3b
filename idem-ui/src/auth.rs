//! Who may look and who may act: the token, the session a login opens (a random id in a
//! cookie, kept here for [`SESSION_LIFETIME`] or until logout), and the form token every action
//! carries (an HMAC-SHA256 of the session's id under a key made at start). A restart signs
//! everyone out.

use axum::http::header::COOKIE;
use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

use crate::login_limit::LoginLimit;

/// The session cookie's name over plain HTTP.
const COOKIE_NAME: &str = "idem_session";
/// Its name over HTTPS: the `__Host-` prefix makes browsers refuse it unless it is `Secure`,
/// for the whole site and set by this host, so nothing on a sibling domain can plant one.
const SECURE_COOKIE_NAME: &str = "__Host-idem_session";

/// How long a login lasts.
const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

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
    /// Open sessions: id, and when each ends.
    sessions: Mutex<HashMap<String, Instant>>,
    /// A token of the operator's: every page needs the login, not only actions.
    pub view_needs_login: bool,
    pub read_only: bool,
    /// The operator reaches the dashboard over HTTPS: cookies are `Secure`.
    pub https: bool,
    /// Failed logins per peer.
    pub login_limit: LoginLimit,
    /// Served on a loopback address: every request must name a loopback `Host`.
    pub loopback_bound: bool,
}

impl Auth {
    pub fn new(
        token: String,
        view_needs_login: bool,
        read_only: bool,
        https: bool,
        loopback_bound: bool,
    ) -> Auth {
        Auth {
            key: random_hex(32).into_bytes(),
            token: Sha256::digest(token.as_bytes()).into(),
            sessions: Mutex::new(HashMap::new()),
            view_needs_login,
            read_only,
            https,
            login_limit: LoginLimit::default(),
            loopback_bound,
        }
    }

    fn cookie_name(&self) -> &'static str {
        if self.https {
            SECURE_COOKIE_NAME
        } else {
            COOKIE_NAME
        }
    }

    /// The `Set-Cookie` value that gives the browser the session `id`, or (with `None`) ends it.
    pub fn session_cookie(&self, id: Option<&str>) -> String {
        let secure = if self.https { "; Secure" } else { "" };
        let (value, age) = match id {
            Some(id) => (id, SESSION_LIFETIME.as_secs()),
            None => ("", 0),
        };
        format!(
            "{}={value}; Path=/; HttpOnly; SameSite=Strict{secure}; Max-Age={age}",
            self.cookie_name()
        )
    }

    fn mac(&self, label: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(label.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// Opens a session: its id, the cookie's value.
    pub fn open_session(&self) -> String {
        let id = random_hex(32);
        let now = Instant::now();
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, ends| *ends > now);
        sessions.insert(id.clone(), now + SESSION_LIFETIME);
        id
    }

    pub fn close_session(&self, id: &str) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.remove(id);
    }

    /// The form token of the session `id`.
    pub fn csrf(&self, id: &str) -> String {
        self.mac(&format!("csrf:{id}"))
    }

    pub fn token_matches(&self, given: &str) -> bool {
        let given: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        bool::from(given.ct_eq(&self.token))
    }

    /// The session whose cookie `headers` carry, if it is open.
    pub fn session(&self, headers: &HeaderMap) -> Option<String> {
        let now = Instant::now();
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .filter(|(name, _)| *name == self.cookie_name())
            // A map lookup by the id: the id is 256 random bits, so its timing tells nothing.
            .find(|(_, id)| sessions.get(*id).is_some_and(|ends| *ends > now))
            .map(|(_, id)| id.to_owned())
    }
}
