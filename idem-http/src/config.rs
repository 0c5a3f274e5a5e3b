//! The layer's options as the service reads them, and their defaults.

use http::header::HeaderName;
use http::{Method, StatusCode};
use idem_core::{Store, DEFAULT_KEEP, DEFAULT_LEASE};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

use crate::scope::ScopeFn;
use crate::secret::Secret;

/// The largest request body the layer reads by default (1 MiB); larger ones get 413.
pub const DEFAULT_MAX_REQUEST_BODY: usize = 1024 * 1024;

/// The largest response body recorded by default (1 MiB); larger responses are sent but not
/// recorded, and their key is released.
pub const DEFAULT_MAX_RESPONSE_BODY: usize = 1024 * 1024;

/// The `Retry-After` of a 409 (in progress) or 503 (store unavailable) answer by default.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The most requests the layer runs at once by default; see
/// [`IdempotencyLayer::max_running`](crate::IdempotencyLayer::max_running).
pub const DEFAULT_MAX_RUNNING: usize = 1024;

/// The 4xx answers [`default_records`] does not record (it releases the key so a retry runs
/// again): see there why each.
pub const RELEASED_STATUSES: [u16; 7] = [401, 403, 407, 408, 409, 425, 429];

/// Which statuses are recorded and replayed by default: every 2xx, 3xx and 4xx except
/// [`RELEASED_STATUSES`]:
///
/// - 401 (Unauthorized), 403 (Forbidden) and 407 (Proxy Authentication Required): an
///   authentication failure is about the request's credentials, not its key, and storing one
///   would let whoever sends a predictable key first refuse it for its owner until `keep` ends;
/// - 408 (Request Timeout), 409 (Conflict), 425 (Too Early) and 429 (Too Many Requests), which
///   say "try again", as do all 5xx.
///
/// Those release the key, so a retry runs again.
pub fn default_records(status: StatusCode) -> bool {
    (200..500).contains(&status.as_u16()) && !RELEASED_STATUSES.contains(&status.as_u16())
}

/// What an [`IdempotencyLayer`](crate::IdempotencyLayer) was told: shared by the services it
/// makes.
#[derive(Clone)]
pub(crate) struct Config {
    pub store: Arc<dyn Store>,
    pub methods: Vec<Method>,
    pub require_key: bool,
    pub scope: ScopeFn,
    pub fingerprint_headers: Vec<HeaderName>,
    pub wait: Option<Duration>,
    pub lease: Duration,
    pub keep: Duration,
    pub max_request_body: usize,
    pub max_response_body: usize,
    pub records: Arc<dyn Fn(StatusCode) -> bool + Send + Sync>,
    pub replay_headers: Vec<HeaderName>,
    pub problem_base: Option<Cow<'static, str>>,
    pub retry_after: Duration,
    pub finish_when_client_leaves: bool,
    /// What credential scopes are keyed with.
    pub secret: Arc<Secret>,
    /// A permit per request the layer runs (claim to answer), [`DEFAULT_MAX_RUNNING`] unless
    /// told otherwise.
    pub running: Arc<Semaphore>,
    pub max_running: usize,
}

impl Config {
    /// The `Retry-After` of 409 and 503 answers, in whole seconds (rounded up).
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after.as_secs_f64().ceil() as u64
    }

    /// Every option at its default, recording in `store`.
    pub fn new(store: Arc<dyn Store>) -> Config {
        Config {
            store,
            methods: vec![Method::POST, Method::PATCH],
            require_key: true,
            scope: Arc::new(crate::scope::authenticated),
            fingerprint_headers: Vec::new(),
            wait: None,
            lease: DEFAULT_LEASE,
            keep: DEFAULT_KEEP,
            max_request_body: DEFAULT_MAX_REQUEST_BODY,
            max_response_body: DEFAULT_MAX_RESPONSE_BODY,
            records: Arc::new(default_records),
            replay_headers: Vec::new(),
            problem_base: None,
            retry_after: DEFAULT_RETRY_AFTER,
            finish_when_client_leaves: true,
            secret: Arc::new(Secret::kept()),
            running: Arc::new(Semaphore::new(DEFAULT_MAX_RUNNING)),
            max_running: DEFAULT_MAX_RUNNING,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_records_final_answers_and_releases_try_again_and_auth_failures() {
        for kept in [200, 201, 204, 301, 303, 400, 404, 410, 422] {
            assert!(
                default_records(StatusCode::from_u16(kept).unwrap()),
                "{kept}"
            );
        }
        for released in [401, 403, 407, 408, 409, 425, 429, 500, 502, 503, 504] {
            assert!(
                !default_records(StatusCode::from_u16(released).unwrap()),
                "{released}"
            );
        }
    }
}
