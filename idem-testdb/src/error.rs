//! The one error of starting and stopping throwaway servers.

use std::fmt;

/// Why a cluster could not be started or stopped.
#[derive(Debug)]
pub struct ClusterError(String);

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ClusterError {}

pub(crate) fn fail(message: impl Into<String>) -> ClusterError {
    ClusterError(message.into())
}
