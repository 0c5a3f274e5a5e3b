//! The layer's own answers: `application/problem+json` (RFC 9457). Their `type` is
//! `about:blank` (RFC 9457's default: the status says what happened), or, when the user named
//! their documentation with `problem_base`, a link to its entry for the rule the request broke.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body_util::Full;

use crate::header::BadKey;

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
            Problem::UnknownCaller => "this request names no caller the idempotency layer \
                                       recognises (no credentials), and a stored answer is \
                                       only ever given to the caller who caused it; nothing \
                                       was run"
                .to_owned(),
            Problem::BodyTooLarge { limit } => {
                format!("the request body is over {limit} bytes; nothing was run")
            }
            Problem::BodyUnreadable => {
                "the request body ended with an error before it was complete; nothing was run"
                    .to_owned()
            }
            Problem::KeyReused => "this Idempotency-Key was first used with another request \
                                   to this endpoint (its query, body or fingerprinted headers \
                                   differ); nothing was run. Use a new key for a new request"
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

    /// The answer, with `type` pointing into `base` (its anchor added), or `about:blank` (and
    /// the status's reason phrase as its title, as RFC 9457 asks) without one.
    pub fn to_response(&self, base: Option<&str>) -> Response<Full<Bytes>> {
        let status = self.status();
        let (kind, title) = match base {
            Some(base) => (format!("{base}#{}", self.anchor()), self.title()),
            None => (
                "about:blank".to_owned(),
                status.canonical_reason().unwrap_or("Error"),
            ),
        };
        let body = serde_json::json!({
            "type": kind,
            "title": title,
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
        let response = Problem::InProgress { retry_after: 1 }.to_response(Some("https://docs/x"));
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[CONTENT_TYPE], PROBLEM_JSON);
        assert_eq!(response.headers()[RETRY_AFTER], "1");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["type"], "https://docs/x#idempotency-in-progress");
        assert_eq!(json["status"], 409);
        assert!(json["title"].as_str().unwrap().contains("in progress"));
    }

    /// Without a base, `type` is RFC 9457's `about:blank`, whose title is the status's phrase:
    /// no link to a page the user never named.
    #[tokio::test]
    async fn without_a_base_a_problem_is_about_blank() {
        let response = Problem::KeyReused.to_response(None);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["type"], "about:blank");
        assert_eq!(json["title"], "Unprocessable Entity");
        assert!(json["detail"].as_str().unwrap().contains("nothing was run"));
    }

    #[test]
    fn every_problem_type_links_to_an_entry_of_the_guide() {
        let guide = include_str!("lib.rs");
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
            assert!(guide.contains(&anchor), "the crate's guide lacks {anchor}");
        }
    }
}
