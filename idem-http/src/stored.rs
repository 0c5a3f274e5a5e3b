//! A recorded response: what the first run answered, kept in the store so retries get it back
//! byte for byte, and the compact encoding it is kept in.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::Full;
use idem_core::{Codec, CodecError};

/// The response header that marks a replay (`Idempotent-Replayed: true`, as Stripe sends it).
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Headers never recorded unless the layer is told to
/// ([`replay_header`](crate::IdempotencyLayer::replay_header)): the hop-by-hop headers of RFC
/// 9110 section 7.6.1 (they describe one connection, not the answer), `Set-Cookie` (a session
/// handed to whoever retries), and the two the server sets afresh for every answer
/// (`Content-Length`, from the replayed body, and `Date`).
pub const NOT_REPLAYED: [HeaderName; 12] = [
    http::header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    http::header::PROXY_AUTHENTICATE,
    http::header::PROXY_AUTHORIZATION,
    HeaderName::from_static("proxy-connection"),
    http::header::TE,
    http::header::TRAILER,
    http::header::TRANSFER_ENCODING,
    http::header::UPGRADE,
    http::header::SET_COOKIE,
    http::header::CONTENT_LENGTH,
    http::header::DATE,
];

/// The first byte of every encoding: a version, so a later format can read old records.
const FORMAT: u8 = 1;

/// A response as recorded: status, the headers worth replaying, and the whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredResponse {
    pub status: StatusCode,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
}

impl StoredResponse {
    /// Keeps the headers of `headers` that are replayed: not in [`NOT_REPLAYED`] (unless in
    /// `allowed`), and not named by the response's own `Connection` header.
    pub fn new(
        status: StatusCode,
        headers: &HeaderMap,
        body: Bytes,
        allowed: &[HeaderName],
    ) -> StoredResponse {
        let per_connection: Vec<String> = headers
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|name| name.trim().to_ascii_lowercase())
            .collect();
        let headers = headers
            .iter()
            .filter(|(name, _)| {
                allowed.contains(name)
                    || !(NOT_REPLAYED.contains(name)
                        || per_connection.iter().any(|c| c == name.as_str()))
            })
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        StoredResponse {
            status,
            headers,
            body,
        }
    }

    /// The response to send, marked as a replay or not.
    pub fn to_response(&self, replayed: bool) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(self.body.clone()));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        if replayed {
            headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
        }
        response
    }

    /// Version, status, header count, each header as (name length, name, value length,
    /// value), then the body: all lengths big-endian.
    fn encode(&self) -> Result<Vec<u8>, CodecError> {
        let too_big = |what: &str| {
            CodecError::new(format!("cannot record the response: {what}"), "too large")
        };
        let headers_len: usize = self
            .headers
            .iter()
            .map(|(n, v)| 6 + n.as_str().len() + v.len())
            .sum();
        let mut out = Vec::with_capacity(5 + headers_len + self.body.len());
        out.push(FORMAT);
        out.extend_from_slice(&self.status.as_u16().to_be_bytes());
        let count = u16::try_from(self.headers.len()).map_err(|_| too_big("over 65535 headers"))?;
        out.extend_from_slice(&count.to_be_bytes());
        for (name, value) in &self.headers {
            let name = name.as_str().as_bytes();
            let name_len = u16::try_from(name.len()).map_err(|_| too_big("a header name"))?;
            let value_len = u32::try_from(value.len()).map_err(|_| too_big("a header value"))?;
            out.extend_from_slice(&name_len.to_be_bytes());
            out.extend_from_slice(name);
            out.extend_from_slice(&value_len.to_be_bytes());
            out.extend_from_slice(value.as_bytes());
        }
        out.extend_from_slice(&self.body);
        Ok(out)
    }

    fn decode(bytes: Vec<u8>) -> Result<StoredResponse, CodecError> {
        let corrupt = |what: &str| {
            CodecError::new(
                "cannot read the recorded response back (was it written by another program?)",
                what.to_owned(),
            )
        };
        let bytes = Bytes::from(bytes);
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<Bytes, CodecError> {
            let end = at.checked_add(n).filter(|end| *end <= bytes.len());
            let end = end.ok_or_else(|| corrupt("it ends early"))?;
            let part = bytes.slice(at..end);
            at = end;
            Ok(part)
        };
        if take(1)?[0] != FORMAT {
            return Err(corrupt("unknown format version"));
        }
        let status = u16::from_be_bytes([take(1)?[0], take(1)?[0]]);
        let status = StatusCode::from_u16(status).map_err(|_| corrupt("bad status"))?;
        let count = u16::from_be_bytes([take(1)?[0], take(1)?[0]]);
        let mut headers = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let len = take(2)?;
            let name = take(usize::from(u16::from_be_bytes([len[0], len[1]])))?;
            let name = HeaderName::from_bytes(&name).map_err(|_| corrupt("bad header name"))?;
            let len = take(4)?;
            let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]);
            let value = take(len as usize)?;
            let value =
                HeaderValue::from_maybe_shared(value).map_err(|_| corrupt("bad header value"))?;
            headers.push((name, value));
        }
        let body = bytes.slice(at..);
        Ok(StoredResponse {
            status,
            headers,
            body,
        })
    }
}

/// The codec the layer records responses with.
pub(crate) struct ResponseCodec;

impl Codec<StoredResponse> for ResponseCodec {
    fn encode(&self, value: &StoredResponse) -> Result<Option<Vec<u8>>, CodecError> {
        value.encode().map(Some)
    }

    fn decode(&self, stored: Option<Vec<u8>>) -> Result<Option<StoredResponse>, CodecError> {
        match stored {
            Some(bytes) => StoredResponse::decode(bytes).map(Some),
            None => Err(CodecError::new(
                "the key was completed without a recorded response",
                "completed by something other than the HTTP layer (the same scope and key used \
                 by a handler?)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header;

    fn sample() -> StoredResponse {
        let mut headers = HeaderMap::new();
        headers.insert(header::LOCATION, "/charges/ch_1".parse().unwrap());
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        headers.append("x-multi", "one".parse().unwrap());
        headers.append("x-multi", "two".parse().unwrap());
        headers.insert(header::SET_COOKIE, "session=abc".parse().unwrap());
        headers.insert(header::CONNECTION, "close, x-hop".parse().unwrap());
        headers.insert("x-hop", "1".parse().unwrap());
        headers.insert(header::CONTENT_LENGTH, "7".parse().unwrap());
        headers.insert(
            header::DATE,
            "Tue, 01 Dec 2026 08:00:00 GMT".parse().unwrap(),
        );
        StoredResponse::new(
            StatusCode::CREATED,
            &headers,
            Bytes::from_static(b"{\"a\":1}"),
            &[],
        )
    }

    #[test]
    fn a_response_round_trips_through_its_encoding() {
        let stored = sample();
        let bytes = ResponseCodec.encode(&stored).unwrap();
        let back = ResponseCodec.decode(bytes).unwrap().unwrap();
        assert_eq!(back, stored);
        let empty =
            StoredResponse::new(StatusCode::NO_CONTENT, &HeaderMap::new(), Bytes::new(), &[]);
        let bytes = ResponseCodec.encode(&empty).unwrap();
        assert_eq!(ResponseCodec.decode(bytes).unwrap().unwrap(), empty);
    }

    #[test]
    fn hop_by_hop_headers_and_cookies_are_not_recorded_unless_allowed() {
        let stored = sample();
        let names: Vec<&str> = stored.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["location", "content-type", "x-multi", "x-multi"]);
        let mut headers = HeaderMap::new();
        headers.insert(header::SET_COOKIE, "session=abc".parse().unwrap());
        let allowed = StoredResponse::new(
            StatusCode::OK,
            &headers,
            Bytes::new(),
            &[header::SET_COOKIE],
        );
        assert_eq!(allowed.headers.len(), 1);
    }

    #[test]
    fn a_replay_is_marked() {
        let response = sample().to_response(true);
        assert_eq!(response.headers()[IDEMPOTENT_REPLAYED], "true");
        assert_eq!(response.headers().get_all("x-multi").iter().count(), 2);
        assert!(sample()
            .to_response(false)
            .headers()
            .get(IDEMPOTENT_REPLAYED)
            .is_none());
    }

    #[test]
    fn damaged_records_are_refused_not_misread() {
        let bytes = ResponseCodec.encode(&sample()).unwrap().unwrap();
        for cut in [0, 1, 3, 5, 9] {
            assert!(
                ResponseCodec.decode(Some(bytes[..cut].to_vec())).is_err(),
                "cut at {cut}"
            );
        }
        let mut other = bytes.clone();
        other[0] = 9;
        assert!(ResponseCodec.decode(Some(other)).is_err());
        assert!(ResponseCodec.decode(None).is_err());
    }
}
