//! Where the dashboard may listen.

use std::net::SocketAddr;

/// Refuses to serve `addr` without a token unless it is a loopback address: anyone who can
/// reach the port could otherwise read every key and payload.
pub fn check_bind(addr: SocketAddr, has_token: bool) -> Result<(), String> {
    if addr.ip().is_loopback() || has_token {
        Ok(())
    } else {
        Err(format!(
            "refused: {addr} is reachable from other hosts; pass --token (or IDEM_UI_TOKEN) so \
             the dashboard asks for it, or bind a loopback address"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::check_bind;

    #[test]
    fn only_loopback_serves_without_a_token() {
        assert!(check_bind("127.0.0.1:7780".parse().unwrap(), false).is_ok());
        assert!(check_bind("[::1]:7780".parse().unwrap(), false).is_ok());
        let refused = check_bind("0.0.0.0:7780".parse().unwrap(), false).unwrap_err();
        assert!(refused.contains("--token"), "{refused}");
        assert!(check_bind("0.0.0.0:7780".parse().unwrap(), true).is_ok());
    }
}
