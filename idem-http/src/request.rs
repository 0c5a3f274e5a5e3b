//! What the layer reads off a request before it claims anything: the whole body (within the
//! limit), the record's key and scope, and the request's fingerprint.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{HeaderName, CONTENT_LENGTH};
use http::request::Parts;
use http_body::Body;
use http_body_util::BodyExt;
use idem_core::{Fingerprint, Key, MAX_KEY_LEN, MAX_SCOPE_LEN};

use crate::problem::Problem;

/// Lowercase hex of the SHA-256 of `bytes`.
fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes))
}

/// Reads the whole request body, refusing one over `limit` bytes (413): at once when
/// `Content-Length` says it is more than twice the limit, and otherwise once the body has been
/// read and dropped. A client is usually still sending an oversized body when the refusal is
/// ready; answered before it finishes, it meets a closed connection (a broken pipe or a reset)
/// instead of the 413. Reading and dropping up to another `limit` bytes lets it read the
/// answer; a body beyond that is cut off (the cost of a refusal stays bounded).
pub(crate) async fn read_body<B>(parts: &Parts, body: B, limit: usize) -> Result<Bytes, Problem>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let too_large = Problem::BodyTooLarge { limit };
    let drain_to = limit.saturating_mul(2);
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > drain_to as u64) {
        return Err(too_large);
    }
    let mut body = std::pin::pin!(body);
    let mut read = BytesMut::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            tracing::debug!(error = %e.into(), "the request body failed while it was read");
            Problem::BodyUnreadable
        })?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        seen = seen.saturating_add(data.remaining());
        if seen > drain_to {
            return Err(too_large);
        }
        if seen <= limit {
            read.put(data);
        }
    }
    if seen > limit {
        return Err(too_large);
    }
    Ok(read.freeze())
}

/// The record's key for `client_key` from the caller `scope`: its text is the method, the path
/// and the client's key (`POST /charges 8e03978e`), so one key sent to two endpoints names two
/// records; a path too long to fit is replaced by its SHA-256. The scope is `http:` and the
/// caller's scope text (`user:<id>`, `key:<hmac>`, `shared`), or its SHA-256 when that is too
/// long or not printable.
pub(crate) fn record_key(parts: &Parts, scope: &str, client_key: &str) -> Key {
    let method = parts.method.as_str();
    let path = parts.uri.path();
    let mut text = format!("{method} {path} {client_key}");
    if text.len() > MAX_KEY_LEN || path.chars().any(char::is_control) {
        text = format!(
            "{method} sha256:{} {client_key}",
            sha256_hex(path.as_bytes())
        );
    }
    let caller = if scope.len() + 5 > MAX_SCOPE_LEN || scope.chars().any(char::is_control) {
        format!("http:sha256:{}", sha256_hex(scope.as_bytes()))
    } else {
        format!("http:{scope}")
    };
    // Both parts are within the limits and printable by construction.
    Key::new(text)
        .and_then(|key| key.with_scope(caller))
        .expect("the layer's record keys are valid by construction")
}

/// The request's fingerprint: method, path, query, a SHA-256 of the body, and the values of the
/// headers named in the options (in the order named). The same key sent with another
/// fingerprint is refused with 422.
pub(crate) fn fingerprint(parts: &Parts, body: &[u8], headers: &[HeaderName]) -> Fingerprint {
    let encode = |builder: idem_core::FingerprintBuilder, name: &str, value: &str| {
        // Strings always serialize; the builder fails only for values that cannot.
        builder
            .field(name, value)
            .expect("strings always fingerprint")
    };
    let mut builder = Fingerprint::builder();
    builder = encode(builder, "method", parts.method.as_str());
    builder = encode(builder, "path", parts.uri.path());
    builder = encode(builder, "query", parts.uri.query().unwrap_or(""));
    builder = encode(builder, "body_sha256", &sha256_hex(body));
    for name in headers {
        let values: Vec<String> = parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        builder = encode(builder, name.as_str(), &values.join("\n"));
    }
    builder.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str) -> Parts {
        http::Request::post(uri)
            .header("x-tenant", "t1")
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[test]
    fn the_key_names_method_path_and_client_key_in_the_callers_scope() {
        let key = record_key(&parts("/charges?x=1"), "user:abc", "k-1");
        assert_eq!(key.as_str(), "POST /charges k-1");
        assert_eq!(key.scope(), "http:user:abc");
        let long_path = format!("/{}", "p".repeat(600));
        let key = record_key(&parts(&long_path), &"s".repeat(300), &"k".repeat(255));
        assert!(key.as_str().starts_with("POST sha256:"));
        assert!(key.scope().starts_with("http:sha256:"));
    }

    #[test]
    fn the_fingerprint_covers_method_path_query_body_and_named_headers() {
        let named = [HeaderName::from_static("x-tenant")];
        let base = fingerprint(&parts("/a?q=1"), b"{}", &[]);
        assert_eq!(base, fingerprint(&parts("/a?q=1"), b"{}", &[]));
        assert_ne!(base, fingerprint(&parts("/a?q=2"), b"{}", &[]));
        assert_ne!(base, fingerprint(&parts("/b?q=1"), b"{}", &[]));
        assert_ne!(base, fingerprint(&parts("/a?q=1"), b"{ }", &[]));
        assert_ne!(base, fingerprint(&parts("/a?q=1"), b"{}", &named));
    }
}
