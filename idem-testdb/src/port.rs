//! Picking a port for a throwaway server.

use std::net::TcpListener;

use crate::error::{fail, ClusterError};

/// A port nobody listens on right now, below the range the kernel hands out to outgoing
/// connections: a server stopped and started again on it (a restart test) finds it free,
/// where a port of that range may meanwhile be the local end of some client's connection.
pub fn free_port() -> Result<u16, ClusterError> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let from = (low / 2).max(1024);
    let span = u32::from(low.saturating_sub(from)).max(1);
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.subsec_nanos())
        ^ std::process::id().rotate_left(16);
    for _ in 0..200 {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let port = from + (seed % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| fail(format!("cannot find a free port: {e}")))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| fail(format!("cannot find a free port: {e}")))
}
