//! Where the dashboard may listen, and with what token.

use std::net::SocketAddr;

/// The shortest token the `idem ui` command takes: a guessable one would open every page.
pub const MIN_TOKEN_LEN: usize = 16;

/// Refuses a `token` shorter than [`MIN_TOKEN_LEN`], and an `addr` other than a loopback
/// address without a token: anyone who can reach the port could otherwise read every key and
/// payload.
pub fn check_bind(addr: SocketAddr, token: Option<&str>) -> Result<(), String> {
    match token {
        Some(token) if token.chars().count() < MIN_TOKEN_LEN => Err(format!(
            "refused: the token has {} characters; use at least {MIN_TOKEN_LEN} (a random one: \
             `openssl rand -hex 16`)",
            token.chars().count()
        )),
        None if !addr.ip().is_loopback() => Err(format!(
            "refused: {addr} is reachable from other hosts; pass --token (or IDEM_UI_TOKEN) so \
             the dashboard asks for it, or bind a loopback address"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::check_bind;

    #[test]
    fn only_loopback_serves_without_a_token_and_a_token_is_not_short() {
        let addr = |a: &str| a.parse().unwrap();
        let token = Some("0123456789abcdef");
        assert!(check_bind(addr("127.0.0.1:7780"), None).is_ok());
        assert!(check_bind(addr("[::1]:7780"), None).is_ok());
        let refused = check_bind(addr("0.0.0.0:7780"), None).unwrap_err();
        assert!(refused.contains("--token"), "{refused}");
        assert!(check_bind(addr("0.0.0.0:7780"), token).is_ok());
        let short = check_bind(addr("0.0.0.0:7780"), Some("secret")).unwrap_err();
        assert!(short.contains("at least 16"), "{short}");
    }
}
