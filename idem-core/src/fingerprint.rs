//! Fingerprints: a stable hash of the inputs that must match when a key is reused.

use serde::Serialize;
use sha2::{Digest, Sha256};
use std::fmt;

use crate::error::CodecError;

/// A stable hash of a call's inputs, stored next to its key.
///
/// A second call with the same key but a different fingerprint is refused with
/// [`Error::KeyReused`](crate::Error::KeyReused) instead of being answered with the first
/// call's outcome (Stripe answers such a request with an error, for the same reason).
///
/// The hash is SHA-256 over the JSON encoding (`serde_json`) of each named value, so it is the
/// same in every process, build and platform as long as the values serialize the same way.
///
/// ```
/// use idem_core::Fingerprint;
///
/// let a = Fingerprint::builder().field("amount", &100u32)?.field("currency", &"EUR")?.finish();
/// let b = Fingerprint::builder().field("amount", &100u32)?.field("currency", &"EUR")?.finish();
/// let c = Fingerprint::builder().field("amount", &101u32)?.field("currency", &"EUR")?.finish();
/// assert_eq!(a, b);
/// assert_ne!(a, c);
/// # Ok::<(), idem_core::CodecError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// Starts a fingerprint over named values.
    pub fn builder() -> FingerprintBuilder {
        FingerprintBuilder {
            hasher: Sha256::new(),
        }
    }

    /// Wraps a fingerprint read back from storage.
    pub fn from_stored(hex: impl Into<String>) -> Fingerprint {
        Fingerprint(hex.into())
    }

    /// The fingerprint as lowercase hex (32 characters), as stores keep it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", self.0)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Builds a [`Fingerprint`] from named values; see [`Fingerprint::builder`].
#[derive(Clone)]
pub struct FingerprintBuilder {
    hasher: Sha256,
}

impl FingerprintBuilder {
    /// Adds one named value. Names keep `(a = 1, b = 2)` apart from `(a = 12)`.
    pub fn field<V: Serialize + ?Sized>(
        mut self,
        name: &str,
        value: &V,
    ) -> Result<FingerprintBuilder, CodecError> {
        let encoded = serde_json::to_vec(value)
            .map_err(|e| CodecError::new(format!("cannot fingerprint parameter `{name}`"), e))?;
        for part in [name.as_bytes(), &encoded] {
            self.hasher.update((part.len() as u64).to_le_bytes());
            self.hasher.update(part);
        }
        Ok(self)
    }

    /// Finishes the hash.
    pub fn finish(self) -> Fingerprint {
        let digest = self.hasher.finalize();
        let mut hex = String::with_capacity(32);
        for byte in &digest[..16] {
            hex.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
            hex.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
        }
        Fingerprint(hex)
    }
}
