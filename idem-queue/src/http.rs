//! HTTP targets (feature `http`): a job that POSTs to a URL, the self-hosted version of a hosted
//! scheduler's HTTP jobs. The job's key is the request's `Idempotency-Key`, the same on every
//! attempt of one tick, so a receiver behind `idem-http` (or any API that honours the header)
//! runs it once however often it is delivered.
//!
//! Delivered on a 2xx answer only. Retried with the worker's backoff on 5xx and on
//! [`RETRIED_STATUSES`] (408, 409: a receiver still running the first delivery of the key, as
//! `idem-http` answers, 425 and 429; after the `Retry-After` the answer gives, in seconds or as
//! a date, when it gives one), on timeouts and on connection errors; dead at once on a redirect or any other 4xx, which no
//! retry can fix. Each failed attempt's status, duration and the first bytes of the answer go
//! in the job's attempt log; the delivery's are the job's result ([`Delivery`]), which
//! `idem jobs show` prints.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::job::Job;
use crate::outcome::JobError;

/// The 4xx answers an HTTP target retries besides every 5xx: 408 Request Timeout, 409 Conflict
/// (what `idem-http` answers while the key's first request runs), 425 Too Early and 429 Too
/// Many Requests. Any other 4xx, and a redirect, make the job dead at once.
pub const RETRIED_STATUSES: [u16; 4] = [408, 409, 425, 429];

/// The named queue of HTTP jobs: where schedules that `idem schedules add` stores put their
/// ticks' jobs, and the only queue `idem worker` serves, so its handler (which runs HTTP jobs
/// only) never meets a program's jobs.
pub const HTTP_QUEUE: &str = "idem-http";

/// How long a request may take, by default.
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// How many bytes of an answer the attempt log keeps (and the most read of any answer).
const ANSWER_BYTES: usize = 200;

/// The longest `Retry-After` honoured: a longer one waits this long.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The client [`post`] expects: it follows no redirect (a redirected POST would arrive as a
/// GET without its body, and look delivered).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client with no redirects")
}

/// What an HTTP job sends: a JSON body POSTed to a URL. It travels as the job's payload,
/// under `"http"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HttpTarget {
    /// Where to POST.
    pub url: String,
    /// The JSON body.
    #[serde(default)]
    pub body: Value,
    /// How long a request may take, in milliseconds (default [`DEFAULT_HTTP_TIMEOUT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl HttpTarget {
    /// A POST of `body` to `url`. Fails for a URL that is not `http://` or `https://`.
    pub fn post(url: impl Into<String>, body: Value) -> Result<HttpTarget, String> {
        let url = url.into();
        let parsed = reqwest::Url::parse(&url).map_err(|e| format!("invalid URL {url:?}: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "invalid URL {url:?}: only http and https can be POSTed to"
            ));
        }
        Ok(HttpTarget {
            url,
            body,
            timeout_ms: None,
        })
    }

    /// The job payload that carries this target (`{"http": ...}`).
    pub fn payload(&self) -> Value {
        serde_json::json!({ "http": self })
    }

    /// The target a job's payload carries, if it carries one.
    pub fn of(job: &Job) -> Option<HttpTarget> {
        serde_json::from_value(job.payload().get("http")?.clone()).ok()
    }
}

/// What a delivered HTTP job answered: its result, kept with the job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The answer's status (2xx).
    pub status: u16,
    /// How long the request took, in milliseconds.
    pub elapsed_ms: u64,
    /// The answer's first bytes (up to 200), as text.
    pub answer: String,
}

/// Runs an HTTP job: POSTs its target's body with `Idempotency-Key: <the job's key>`. A job
/// whose payload carries no target is dead-lettered, saying so. Use it as (or from) a worker's
/// handler, with a [`client`] (one that follows no redirect):
/// `queue.worker(move |job| { let c = c.clone(); async move { idem_queue::http::post(&c, job).await } })`.
pub async fn post(client: &reqwest::Client, job: Job) -> Result<Delivery, JobError> {
    let Some(target) = HttpTarget::of(&job) else {
        return Err(JobError::permanent(
            "not an HTTP job: its payload has no \"http\" target (this worker runs HTTP jobs only)",
        ));
    };
    let timeout = target
        .timeout_ms
        .map_or(DEFAULT_HTTP_TIMEOUT, Duration::from_millis);
    let started = Instant::now();
    let sent = client
        .post(&target.url)
        .header("Idempotency-Key", job.key())
        .header("Content-Type", "application/json")
        .body(target.body.to_string())
        .timeout(timeout)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        // Timeouts and connection errors: the request may not have arrived; the same key makes
        // a retry safe.
        Err(e) => {
            return Err(JobError::retry(format!(
                "POST {} failed after {} ms: {e}",
                target.url,
                started.elapsed().as_millis()
            )))
        }
    };
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(retry_after)
        .map(|delay| delay.min(MAX_RETRY_AFTER));
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // The first bytes of the answer, for the result or the attempt log; never the whole of a
    // large one.
    let mut answer = Vec::new();
    let mut response = response;
    while answer.len() < ANSWER_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => answer.extend_from_slice(&chunk),
            _ => break,
        }
    }
    answer.truncate(ANSWER_BYTES);
    let first = String::from_utf8_lossy(&answer).into_owned();
    let elapsed = started.elapsed().as_millis();
    if status.is_success() {
        tracing::info!(url = %target.url, status = status.as_u16(), elapsed_ms = elapsed as u64, "HTTP job delivered");
        return Ok(Delivery {
            status: status.as_u16(),
            elapsed_ms: u64::try_from(elapsed).unwrap_or(u64::MAX),
            answer: first,
        });
    }
    let message = match location {
        Some(location) if status.is_redirection() => format!(
            "POST {} answered {} (to {location}) in {elapsed} ms: a redirect is not a delivery",
            target.url,
            status.as_u16()
        ),
        _ => format!(
            "POST {} answered {} in {elapsed} ms: {first}",
            target.url,
            status.as_u16()
        ),
    };
    let retryable = status.is_server_error() || RETRIED_STATUSES.contains(&status.as_u16());
    Err(match (retryable, retry_after) {
        (true, Some(delay)) => JobError::retry_after(delay, message),
        (true, None) => JobError::retry(message),
        (false, _) => JobError::permanent(message),
    })
}

/// A `Retry-After` value: seconds, or an HTTP date (the delay until then; none if past).
fn retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// How many jobs waiting or running in [`HTTP_QUEUE`] carry no HTTP target: a worker that runs
/// only [`post`] (as `idem worker` does) would dead-letter them, so it refuses to start while
/// there are any.
pub async fn foreign_work(queue: &crate::queue::Queue) -> Result<u64, idem_core::StoreError> {
    queue
        .sql
        .admin
        .without_http_target(queue.store().pool(), HTTP_QUEUE)
        .await
        .map_err(|e| idem_postgres_core::extend::store_error(e).during(idem_core::Operation::Get))
}
