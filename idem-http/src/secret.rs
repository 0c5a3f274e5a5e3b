//! The server secret that credential scopes are keyed with, and the scope text a record is
//! stored under.
//!
//! A credential (a token, a session id) is stored only as HMAC-SHA256 under a secret the
//! attacker does not have: a bare hash of a low-entropy credential (a Basic-auth password) could
//! be reversed offline by anyone who reads the records table or the dashboard. The secret is the
//! application's ([`IdempotencyLayer::secret`](crate::IdempotencyLayer::secret)) or, without
//! one, made once by whichever server needs it first and kept in the store, so every replica
//! and every restart keys a credential the same way (a per-process secret would give a retry
//! that lands on another replica a new scope, and run it again).

use hmac::{Hmac, Mac};
use idem_core::{Call, Key, Outcome, Store, MAX_DURATION};
use sha2::Sha256;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

use crate::scope::{Kind, Scope};

/// The shortest secret the layer takes: 256 bits, as HMAC-SHA256's key.
pub const MIN_SECRET_LEN: usize = 32;

/// The record the store keeps the layer's secret in, when the application gives none: its
/// scope (no scope of a request's record starts so) and key.
pub(crate) const KEPT_SCOPE: &str = "idem_http";
pub(crate) const KEPT_KEY: &str = "scope-secret";

/// How long a server waits for another that is making the kept secret.
const KEPT_WAIT: Duration = Duration::from_secs(10);

/// Where credential scopes get their key: given, or kept in the store (read once).
pub(crate) struct Secret {
    given: Option<Arc<[u8]>>,
    kept: OnceCell<Arc<[u8]>>,
}

impl Secret {
    /// The store's kept secret, read (or made) when first needed.
    pub fn kept() -> Secret {
        Secret {
            given: None,
            kept: OnceCell::new(),
        }
    }

    /// The application's secret.
    ///
    /// # Panics
    ///
    /// When it is shorter than [`MIN_SECRET_LEN`] bytes.
    pub fn given(secret: &[u8]) -> Secret {
        assert!(
            secret.len() >= MIN_SECRET_LEN,
            "IdempotencyLayer::secret takes at least {MIN_SECRET_LEN} random bytes, got {}: a \
             short secret lets anyone who reads the records test credential guesses offline",
            secret.len()
        );
        Secret {
            given: Some(secret.into()),
            kept: OnceCell::new(),
        }
    }

    async fn key(&self, store: &dyn Store) -> Result<&[u8], String> {
        if let Some(given) = &self.given {
            return Ok(given);
        }
        let kept = self.kept.get_or_try_init(|| read_or_make(store)).await?;
        Ok(kept)
    }

    /// The text `scope` is stored under (before the layer's `http:` prefix): `user:` and the
    /// caller's id, `key:` and the credential's HMAC, or `shared`. `Err` when the kept secret
    /// could not be read (the store failed): the request is refused, nothing runs.
    pub async fn scope_text(&self, store: &dyn Store, scope: &Scope) -> Result<String, String> {
        Ok(match &scope.0 {
            Kind::Caller(id) => format!("user:{id}"),
            Kind::Credential(credential) => {
                let key = self.key(store).await?;
                let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
                mac.update(credential);
                format!("key:{}", hex::encode(mac.finalize().into_bytes()))
            }
            Kind::Shared => "shared".to_owned(),
        })
    }
}

/// The secret kept in the store: made (32 random bytes) by the first server to claim its
/// record, which is kept for as long as a store keeps anything; the others read it.
async fn read_or_make(store: &dyn Store) -> Result<Arc<[u8]>, String> {
    let key = Key::new(KEPT_KEY)
        .and_then(|key| key.with_scope(KEPT_SCOPE))
        .expect("a valid key");
    let made = async {
        let mut bytes = [0u8; MIN_SECRET_LEN];
        getrandom::fill(&mut bytes).expect("the operating system's random source");
        Ok::<_, Infallible>(hex::encode(bytes))
    };
    let outcome = Call::new(store, key)
        .name("idem_http_secret")
        .keep(MAX_DURATION)
        .wait(KEPT_WAIT)
        .run_replay(made)
        .await
        .map_err(|e| format!("the layer's secret could not be read from the store: {e}"))?;
    let text = match outcome {
        Outcome::Executed(text)
        | Outcome::Duplicate {
            value: Some(text), ..
        } => text,
        other => {
            return Err(format!(
                "the layer's secret could not be read from the store ({})",
                if other.is_duplicate() {
                    "its record holds no value"
                } else {
                    "another server is still making it"
                }
            ))
        }
    };
    match hex::decode(&text) {
        Ok(bytes) if bytes.len() >= MIN_SECRET_LEN => Ok(bytes.into()),
        _ => Err(
            "the layer's secret kept in the store is not valid: refusing to key \
                  credentials with it (forget the record idem_http/scope-secret to make a new \
                  one, or give the layer a secret)"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::MemoryStore;

    #[tokio::test]
    async fn credentials_are_keyed_and_never_stored_or_bare_hashed() {
        let store = MemoryStore::new();
        let secret = Secret::given(&[7u8; 32]);
        let text = secret
            .scope_text(&store, &Scope::credential("Basic dXNlcjpodW50ZXIy"))
            .await
            .unwrap();
        assert!(text.starts_with("key:"));
        assert!(!text.contains("dXNlcjpodW50ZXIy"));
        let bare = hex::encode(<Sha256 as sha2::Digest>::digest(b"Basic dXNlcjpodW50ZXIy"));
        assert!(!text.contains(&bare), "not a bare hash of the credential");
        let other = Secret::given(&[8u8; 32]);
        assert_ne!(
            text,
            other
                .scope_text(&store, &Scope::credential("Basic dXNlcjpodW50ZXIy"))
                .await
                .unwrap(),
            "the key depends on the secret"
        );
    }

    #[tokio::test]
    async fn every_server_on_one_store_keys_a_credential_alike_with_the_kept_secret() {
        let store = MemoryStore::new();
        let (a, b) = (Secret::kept(), Secret::kept());
        let token = Scope::credential("tok");
        let from_a = a.scope_text(&store, &token).await.unwrap();
        assert_eq!(from_a, b.scope_text(&store, &token).await.unwrap());
        let elsewhere = Secret::kept()
            .scope_text(&MemoryStore::new(), &token)
            .await
            .unwrap();
        assert_ne!(from_a, elsewhere, "each store makes a secret of its own");
    }

    #[test]
    #[should_panic(expected = "at least 32 random bytes")]
    fn a_short_secret_is_refused() {
        Secret::given(b"hunter2");
    }

    #[tokio::test]
    async fn callers_and_the_shared_scope_are_told_apart_from_credentials() {
        let store = MemoryStore::new();
        let secret = Secret::given(&[7u8; 32]);
        let text = |scope| {
            let (secret, store) = (&secret, &store);
            async move { secret.scope_text(store, &scope).await.unwrap() }
        };
        assert_eq!(text(Scope::caller("u1")).await, "user:u1");
        assert_eq!(text(Scope::shared()).await, "shared");
        assert_ne!(text(Scope::caller("shared")).await, "shared");
    }
}
