//! Who is calling: the part of a record's key that keeps two callers' keys apart. A scope
//! function reads the request's head and names the caller; the layer never stores a credential
//! in clear, only what the function returns (the built-in ones return a SHA-256 of it).

use http::request::Parts;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// A function of the request's head that names its caller, or `None` when the request names no
/// caller (the layer then answers 401 and runs nothing).
pub type ScopeFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// The default scope: a SHA-256 of the request's `Authorization` header, so callers with
/// different credentials never share a key; requests without one share the scope `anonymous`
/// (and are not refused).
///
/// Use [`bearer_token`] to require a caller, or a function of your own that reads your
/// authentication's result (an extension set by an auth layer that runs first) to scope by user
/// or API client rather than by credential: then a rotated token keeps its keys.
pub fn authorization_header(parts: &Parts) -> Option<String> {
    match parts.headers.get(http::header::AUTHORIZATION) {
        Some(value) => Some(format!("auth:{}", sha256_hex(value.as_bytes()))),
        None => Some("anonymous".to_owned()),
    }
}

/// The caller is the bearer token of `Authorization: Bearer <token>`, kept as `bearer:` and its
/// SHA-256; requests without a bearer token name no caller and are answered 401.
///
/// ```
/// # use idem_http::scope::bearer_token;
/// let (parts, ()) = http::Request::post("/charges")
///     .header("authorization", "Bearer tok_1")
///     .body(())
///     .unwrap()
///     .into_parts();
/// let scope = bearer_token(&parts).unwrap();
/// assert!(scope.starts_with("bearer:") && !scope.contains("tok_1"));
/// ```
pub fn bearer_token(parts: &Parts) -> Option<String> {
    let value = parts.headers.get(http::header::AUTHORIZATION)?.as_bytes();
    let (scheme, token) = value.split_at(value.iter().position(|b| *b == b' ')?);
    let token = token.trim_ascii();
    if !scheme.eq_ignore_ascii_case(b"bearer") || token.is_empty() {
        return None;
    }
    Some(format!("bearer:{}", sha256_hex(token)))
}

/// Lowercase hex of the SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        hex.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(authorization: Option<&str>) -> Parts {
        let mut request = http::Request::post("/charges");
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn bearer_tokens_are_hashed_and_told_apart() {
        let a = bearer_token(&parts(Some("Bearer tok_a"))).unwrap();
        let b = bearer_token(&parts(Some("bearer  tok_b "))).unwrap();
        assert_ne!(a, b);
        assert_eq!(a, bearer_token(&parts(Some("Bearer tok_a"))).unwrap());
        assert!(!a.contains("tok_a"));
        assert_eq!(bearer_token(&parts(None)), None);
        assert_eq!(bearer_token(&parts(Some("Basic dXNlcg=="))), None);
        assert_eq!(bearer_token(&parts(Some("Bearer "))), None);
        assert_eq!(bearer_token(&parts(Some("Bearer"))), None);
    }

    #[test]
    fn the_default_scope_separates_credentials_and_admits_anonymous_callers() {
        let a = authorization_header(&parts(Some("Bearer tok_a"))).unwrap();
        let b = authorization_header(&parts(Some("Bearer tok_b"))).unwrap();
        assert_ne!(a, b);
        assert_eq!(authorization_header(&parts(None)).unwrap(), "anonymous");
    }
}
