//! The layer's own answers: `application/problem+json` (RFC 9457), each with a `type` link to
//! the README's entry for the rule the request broke.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body_util::Full;

use crate::header::BadKey;

/// Where the `type` links of problem answers point by default: the README's table of the
/// layer's answers, one anchor per rule.
pub const DEFAULT_PROBLEM_BASE: &str =
    concat!(env!("CARGO_PKG_REPOSITORY"), "/blob/main/README.md");

/// The media type of every answer the layer makes itself.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// A rule a request broke, or a reason the layer could not serve it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Problem {
    MissingKey,
    BadKey(BadKey),
    UnknownCaller,
    BodyTooLarge { limit: usize },
    BodyUnreadable,
    KeyReused,
    InProgress { retry_after: u64 },
    StoreUnavailable { retry_after: u64 },
    ReplayUnreadable,
    ResponseFailed,
    Unexpected,
}

impl Problem {
    fn status(&self) -> StatusCode {
        match self {
            Problem::MissingKey | Problem::BadKey(_) | Problem::BodyUnreadable => {
                StatusCode::BAD_REQUEST
            }
            Problem::UnknownCaller => StatusCode::UNAUTHORIZED,
            Problem::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Problem::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Problem::InProgress { .. } => StatusCode::CONFLICT,
            Problem::StoreUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Problem::ReplayUnreadable | Problem::ResponseFailed | Problem::Unexpected => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// The README anchor of the rule (`type` is the base URL with this fragment).
    pub fn anchor(&self) -> &'static str {
        match self {
            Problem::MissingKey => "idempotency-key-missing",
            Problem::BadKey(_) => "idempotency-key-malformed",
            Problem::UnknownCaller => "idempotency-caller-unknown",
            Problem::BodyTooLarge { .. } => "idempotency-body-too-large",
            Problem::BodyUnreadable => "idempotency-body-unreadable",
            Problem::KeyReused => "idempotency-key-reused",
            Problem::InProgress { .. } => "idempotency-in-progress",
            Problem::StoreUnavailable { .. } => "idempotency-store-unavailable",
            Problem::ReplayUnreadable => "idempotency-replay-unreadable",
            Problem::ResponseFailed => "idempotency-response-failed",
            Problem::Unexpected => "idempotency-unexpected",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Problem::MissingKey => "Idempotency-Key required",
            Problem::BadKey(_) => "Malformed Idempotency-Key",
            Problem::UnknownCaller => "Caller not identified",
            Problem::BodyTooLarge { .. } => "Request body too large",
            Problem::BodyUnreadable => "Request body could not be read",
            Problem::KeyReused => "Idempotency-Key reused with another request",
            Problem::InProgress { .. } => "A request with this Idempotency-Key is in progress",
            Problem::StoreUnavailable { .. } => "Idempotency store unavailable",
            Problem::ReplayUnreadable => "Recorded response unreadable",
            Problem::ResponseFailed => "Response could not be read",
            Problem::Unexpected => "Unexpected idempotency error",
        }
    }

    fn detail(&self) -> String {
        match self {
            Problem::MissingKey => "this request must carry an Idempotency-Key header (a unique \
                                    string of 1 to 255 visible ASCII characters, such as a UUID)"
                .to_owned(),
            Problem::BadKey(reason) => format!("{reason}; nothing was run"),
            Problem::UnknownCaller => "idempotent requests must identify their caller (for \
                                       example with an Authorization header); nothing was run"
                .to_owned(),
            Problem::BodyTooLarge { limit } => {
                format!("the request body is over {limit} bytes; nothing was run")
            }
            Problem::BodyUnreadable => {
                "the request body ended with an error before it was complete; nothing was run"
                    .to_owned()
            }
            Problem::KeyReused => "this Idempotency-Key was first used with another request \
                                   (method, path, query or body differ); nothing was run. Use a \
                                   new key for a new request"
                .to_owned(),
            Problem::InProgress { retry_after } => format!(
                "the first request with this Idempotency-Key has not finished; retry in \
                 {retry_after} s to get its response"
            ),
            Problem::StoreUnavailable { retry_after } => format!(
                "the idempotency store could not be reached, so the request was not run; retry \
                 in {retry_after} s with the same Idempotency-Key"
            ),
            Problem::ReplayUnreadable => "the response recorded for this Idempotency-Key could \
                                          not be read back; nothing was run again"
                .to_owned(),
            Problem::ResponseFailed => "the response failed while it was being recorded; it \
                                        was not kept, so a retry with the same key runs again"
                .to_owned(),
            Problem::Unexpected => "the idempotency layer met an error it does not know; it \
                                    was logged"
                .to_owned(),
        }
    }

    /// The answer, with `type` pointing into `base`.
    pub fn to_response(&self, base: &str) -> Response<Full<Bytes>> {
        let status = self.status();
        let body = serde_json::json!({
            "type": format!("{base}#{}", self.anchor()),
            "title": self.title(),
            "status": status.as_u16(),
            "detail": self.detail(),
        });
        let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Problem::InProgress { retry_after } | Problem::StoreUnavailable { retry_after } =
            self
        {
            headers.insert(RETRY_AFTER, HeaderValue::from(*retry_after));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_problem_is_problem_json_with_a_link_to_its_rule() {
        let response = Problem::InProgress { retry_after: 1 }.to_response("https://docs/x");
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[CONTENT_TYPE], PROBLEM_JSON);
        assert_eq!(response.headers()[RETRY_AFTER], "1");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["type"], "https://docs/x#idempotency-in-progress");
        assert_eq!(json["status"], 409);
        assert!(json["title"].as_str().unwrap().contains("in progress"));
    }

    #[test]
    fn every_problem_type_links_to_an_entry_of_the_readme() {
        let readme = include_str!("../../README.md");
        let all = [
            Problem::MissingKey,
            Problem::BadKey(BadKey::Empty),
            Problem::UnknownCaller,
            Problem::BodyTooLarge { limit: 1 },
            Problem::BodyUnreadable,
            Problem::KeyReused,
            Problem::InProgress { retry_after: 1 },
            Problem::StoreUnavailable { retry_after: 1 },
            Problem::ReplayUnreadable,
            Problem::ResponseFailed,
            Problem::Unexpected,
        ];
        for problem in all {
            let anchor = format!("<a id=\"{}\"></a>", problem.anchor());
            assert!(readme.contains(&anchor), "README.md lacks {anchor}");
        }
    }
}
