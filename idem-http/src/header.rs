//! Reading the `Idempotency-Key` header: a structured-field string (`"abc"`, as the draft
//! defines it) or a bare token (`abc`, as Stripe's clients send it), 1 to 255 characters.

use http::header::{HeaderMap, HeaderName};
use std::fmt;

/// The request header the layer reads (the draft's field name).
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The longest key a client may send, in characters (each one byte: keys are ASCII).
pub const MAX_CLIENT_KEY_LEN: usize = 255;

/// Why a request's `Idempotency-Key` was refused (answered with 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadKey {
    /// The header appears more than once.
    Repeated,
    /// The header's value is empty, or an empty string `""`.
    Empty,
    /// Longer than [`MAX_CLIENT_KEY_LEN`] characters.
    TooLong,
    /// A character that is not visible ASCII (a control character, a byte over 0x7E), or a
    /// space outside a quoted string.
    BadCharacter,
    /// A quoted string that does not end in an unescaped `"`, has text after its closing quote,
    /// or an escape other than `\"` and `\\`.
    BadQuoting,
}

impl fmt::Display for BadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BadKey::Repeated => "the Idempotency-Key header appears more than once",
            BadKey::Empty => "the Idempotency-Key header is empty",
            BadKey::TooLong => "the Idempotency-Key is longer than 255 characters",
            BadKey::BadCharacter => {
                "the Idempotency-Key may only hold visible ASCII characters (a quoted string may \
                 also hold spaces)"
            }
            BadKey::BadQuoting => {
                "the Idempotency-Key starts a quoted string that is not a valid structured-field \
                 string (unterminated, text after the closing quote, or an escape other than \
                 \\\" and \\\\)"
            }
        })
    }
}

/// The client's key from `headers`: `Ok(None)` when there is no `Idempotency-Key` header.
pub(crate) fn client_key(headers: &HeaderMap) -> Result<Option<String>, BadKey> {
    let mut values = headers.get_all(&IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(BadKey::Repeated);
    }
    parse(value.as_bytes()).map(Some)
}

/// Parses one header value (surrounding spaces and tabs are not part of it, as in HTTP).
pub(crate) fn parse(raw: &[u8]) -> Result<String, BadKey> {
    let raw = trim(raw);
    let key = match raw.first() {
        None => return Err(BadKey::Empty),
        Some(b'"') => unquote(&raw[1..])?,
        Some(_) => {
            if !raw.iter().all(|b| is_visible(*b)) {
                return Err(BadKey::BadCharacter);
            }
            raw.to_vec()
        }
    };
    if key.is_empty() {
        return Err(BadKey::Empty);
    }
    if key.len() > MAX_CLIENT_KEY_LEN {
        return Err(BadKey::TooLong);
    }
    // Every byte was checked to be ASCII above.
    String::from_utf8(key).map_err(|_| BadKey::BadCharacter)
}

/// The body of an sf-string after its opening quote (RFC 8941, section 4.2.5).
fn unquote(rest: &[u8]) -> Result<Vec<u8>, BadKey> {
    let mut out = Vec::with_capacity(rest.len());
    let mut bytes = rest.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => out.push(escaped),
                Some(&c) if !(0x20..=0x7e).contains(&c) => return Err(BadKey::BadCharacter),
                _ => return Err(BadKey::BadQuoting),
            },
            b'"' => {
                return if bytes.next().is_none() {
                    Ok(out)
                } else {
                    Err(BadKey::BadQuoting)
                };
            }
            0x20..=0x7e => out.push(b),
            _ => return Err(BadKey::BadCharacter),
        }
    }
    Err(BadKey::BadQuoting)
}

fn is_visible(b: u8) -> bool {
    (0x21..=0x7e).contains(&b)
}

fn trim(mut raw: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = raw {
        raw = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = raw {
        raw = rest;
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_tokens_and_sf_strings_are_read() {
        assert_eq!(parse(b"abc-123").unwrap(), "abc-123");
        assert_eq!(parse(b"\"abc-123\"").unwrap(), "abc-123");
        assert_eq!(
            parse(b"  8e03978e-40d5-43e8  ").unwrap(),
            "8e03978e-40d5-43e8"
        );
        assert_eq!(parse(b"\"with space\"").unwrap(), "with space");
        assert_eq!(parse(br#""a\"b\\c""#).unwrap(), r#"a"b\c"#);
        assert_eq!(parse(&[b'k'; 255]).unwrap().len(), 255);
    }

    #[test]
    fn malformed_keys_are_refused_with_their_reason() {
        assert_eq!(parse(b""), Err(BadKey::Empty));
        assert_eq!(parse(b"   "), Err(BadKey::Empty));
        assert_eq!(parse(b"\"\""), Err(BadKey::Empty));
        assert_eq!(parse(&[b'k'; 256]), Err(BadKey::TooLong));
        let quoted = [&b"\""[..], &[b'k'; 256], b"\""].concat();
        assert_eq!(parse(&quoted), Err(BadKey::TooLong));
        assert_eq!(parse(b"a\x01b"), Err(BadKey::BadCharacter));
        assert_eq!(parse(b"a b"), Err(BadKey::BadCharacter));
        assert_eq!(parse(b"caf\xc3\xa9"), Err(BadKey::BadCharacter));
        assert_eq!(parse(b"\"a\tb\""), Err(BadKey::BadCharacter));
        assert_eq!(parse(b"\"abc"), Err(BadKey::BadQuoting));
        assert_eq!(parse(b"\"abc\\\""), Err(BadKey::BadQuoting));
        assert_eq!(parse(b"\"abc\"def"), Err(BadKey::BadQuoting));
        assert_eq!(parse(br#""a\nb""#), Err(BadKey::BadQuoting));
    }

    #[test]
    fn a_repeated_header_is_refused() {
        let mut headers = HeaderMap::new();
        assert_eq!(client_key(&headers), Ok(None));
        headers.append(IDEMPOTENCY_KEY, "a".parse().unwrap());
        assert_eq!(client_key(&headers), Ok(Some("a".to_owned())));
        headers.append(IDEMPOTENCY_KEY, "a".parse().unwrap());
        assert_eq!(client_key(&headers), Err(BadKey::Repeated));
    }
}
