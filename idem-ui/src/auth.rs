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

pub(crate) const COOKIE_NAME: &str = "idem_session";

/// How long a login lasts.
pub(crate) const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

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
}

impl Auth {
    pub fn new(token: String, view_needs_login: bool, read_only: bool) -> Auth {
        Auth {
            key: random_hex(32).into_bytes(),
            token: Sha256::digest(token.as_bytes()).into(),
            sessions: Mutex::new(HashMap::new()),
            view_needs_login,
            read_only,
        }
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
            .filter(|(name, _)| *name == COOKIE_NAME)
            // A map lookup by the id: the id is 256 random bits, so its timing tells nothing.
            .find(|(_, id)| sessions.get(*id).is_some_and(|ends| *ends > now))
            .map(|(_, id)| id.to_owned())
    }
}

/// The names a request may address the dashboard by when it is open without a token: its
/// loopback addresses only, so a page elsewhere cannot reach it through a name it rebinds to
/// 127.0.0.1 (DNS rebinding).
pub(crate) fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
    else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
