//! Picking a port for a throwaway server.

use std::net::TcpListener;

use crate::error::{fail, ClusterError};

/// A port nobody listens on right now.
pub(crate) fn free_port() -> Result<u16, ClusterError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| fail(format!("cannot find a free port: {e}")))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| fail(format!("cannot find a free port: {e}")))
}
