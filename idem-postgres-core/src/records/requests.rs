//! Requests that own their parts, to travel to the driver of a batch.

use std::time::Duration;

use idem_core::{ClaimRequest, ClaimToken, Completion, Fence, Fingerprint, Key};

/// A claim request that owns its parts, to travel to a batch's driver.
pub(crate) struct OwnedClaim {
    pub(crate) key: Key,
    pub(crate) fingerprint: Option<Fingerprint>,
    pub(crate) lease: Duration,
    pub(crate) token: Option<ClaimToken>,
}

impl OwnedClaim {
    pub fn new(request: ClaimRequest<'_>) -> OwnedClaim {
        OwnedClaim {
            key: request.key.clone(),
            fingerprint: request.fingerprint.cloned(),
            lease: request.lease,
            token: request.token,
        }
    }

    pub(crate) fn request(&self) -> ClaimRequest<'_> {
        ClaimRequest {
            key: &self.key,
            fingerprint: self.fingerprint.as_ref(),
            lease: self.lease,
            token: self.token,
        }
    }
}

/// A completion that owns its parts.
pub(crate) struct OwnedCompletion {
    pub(crate) key: Key,
    pub(crate) fence: Fence,
    pub(crate) output: Option<Vec<u8>>,
    pub(crate) keep: Duration,
}

impl OwnedCompletion {
    pub fn new(key: &Key, fence: Fence, completion: Completion<'_>) -> OwnedCompletion {
        OwnedCompletion {
            key: key.clone(),
            fence,
            output: completion.output.map(<[u8]>::to_vec),
            keep: completion.keep,
        }
    }

    pub(crate) fn completion(&self) -> Completion<'_> {
        Completion {
            output: self.output.as_deref(),
            keep: self.keep,
        }
    }
}
