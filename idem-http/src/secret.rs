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
//!
//! A kept secret is as safe as the store: whoever reads the whole store (a backup, a database
//! login) reads the secret too, and could test guesses at a weak credential against the
//! stored scopes. An application whose credentials can be weak (passwords) gives a secret of
//! its own, kept elsewhere (an environment variable, a secret manager).

use hmac::{Hmac, Mac};
use idem_core::{Call, Key, Outcome, Store, MAX_DURATION};
use sha2::Sha256;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::RwLock;
// Tokio's clock, so that the tests can move it.
use tokio::time::Instant;

use crate::scope::{Kind, Scope};

/// The shortest secret the layer takes: 256 bits, as HMAC-SHA256's key.
pub const MIN_SECRET_LEN: usize = 32;

/// The record the store keeps the layer's secret in, when the application gives none: its
/// scope (no scope of a request's record starts so) and key.
pub(crate) const KEPT_SCOPE: &str = "idem_http";
pub(crate) const KEPT_KEY: &str = "scope-secret";

/// How long a server waits for another that is making the kept secret.
const KEPT_WAIT: Duration = Duration::from_secs(10);

/// How long a server uses the kept secret before it reads it again: if the record was deleted
/// (an operator's `forget`, a Redis eviction) and made anew by another server, every server
/// keys credentials alike again within this long.
const KEPT_FOR: Duration = Duration::from_secs(60);

/// Where credential scopes get their key: given, or kept in the store (read again every
/// [`KEPT_FOR`]).
pub(crate) struct Secret {
    given: Option<Arc<[u8]>>,
    kept: RwLock<Option<(Arc<[u8]>, Instant)>>,
}

impl Secret {
    /// The store's kept secret, read (or made) when first needed.
    pub fn kept() -> Secret {
        Secret {
            given: None,
            kept: RwLock::new(None),
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
            kept: RwLock::new(None),
        }
    }

    async fn key(&self, store: &dyn Store) -> Result<Arc<[u8]>, String> {
        if let Some(given) = &self.given {
            return Ok(given.clone());
        }
        let fresh = |kept: &Option<(Arc<[u8]>, Instant)>| {
            kept.as_ref()
                .filter(|(_, read)| read.elapsed() < KEPT_FOR)
                .map(|(key, _)| key.clone())
        };
        if let Some(key) = fresh(&*self.kept.read().await) {
            return Ok(key);
        }
        // One read of the store at a time; the others wait for it and use what it read.
        let mut kept = self.kept.write().await;
        if let Some(key) = fresh(&kept) {
            return Ok(key);
        }
        let key = read_or_make(store).await?;
        *kept = Some((key.clone(), Instant::now()));
        Ok(key)
    }

    /// The text `scope` is stored under (before the layer's `http:` prefix): `user:` and the
    /// caller's id, `key:` and the credential's HMAC, or `shared`. `Err` when the kept secret
    /// could not be read (the store failed): the request is refused, nothing runs.
    pub async fn scope_text(&self, store: &dyn Store, scope: &Scope) -> Result<String, String> {
        Ok(match &scope.0 {
            Kind::Caller(id) => format!("user:{id}"),
            Kind::Credential(credential) => {
                let key = self.key(store).await?;
                let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key");
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

    /// Stands for a store whose kept secret was deleted and made anew by another server: it
    /// answers from `before` until switched, then from `after`.
    #[derive(Debug, Clone)]
    struct Switched {
        before: MemoryStore,
        after: MemoryStore,
        switched: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Switched {
        fn now(&self) -> &MemoryStore {
            if self.switched.load(std::sync::atomic::Ordering::SeqCst) {
                &self.after
            } else {
                &self.before
            }
        }
    }

    #[async_trait::async_trait]
    impl Store for Switched {
        async fn claim(
            &self,
            request: idem_core::ClaimRequest<'_>,
        ) -> Result<idem_core::Claim, idem_core::StoreError> {
            self.now().claim(request).await
        }
        async fn complete(
            &self,
            key: &Key,
            fence: idem_core::Fence,
            completion: idem_core::Completion<'_>,
        ) -> Result<idem_core::Fenced, idem_core::StoreError> {
            self.now().complete(key, fence, completion).await
        }
        async fn release(
            &self,
            key: &Key,
            fence: idem_core::Fence,
        ) -> Result<idem_core::Fenced, idem_core::StoreError> {
            self.now().release(key, fence).await
        }
        async fn renew(
            &self,
            key: &Key,
            fence: idem_core::Fence,
            lease: Duration,
        ) -> Result<idem_core::Fenced, idem_core::StoreError> {
            self.now().renew(key, fence, lease).await
        }
        async fn get(&self, key: &Key) -> Result<Option<idem_core::Record>, idem_core::StoreError> {
            self.now().get(key).await
        }
        fn shared(&self) -> Arc<dyn Store> {
            Arc::new(self.clone())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_secret_made_anew_is_used_by_every_server_within_a_minute() {
        let (before, after) = (MemoryStore::new(), MemoryStore::new());
        let token = Scope::credential("tok");
        let old = Secret::kept().scope_text(&before, &token).await.unwrap();
        let new = Secret::kept().scope_text(&after, &token).await.unwrap();
        assert_ne!(old, new);
        let store = Switched {
            before,
            after,
            switched: Arc::default(),
        };
        let running = Secret::kept();
        assert_eq!(running.scope_text(&store, &token).await.unwrap(), old);
        store
            .switched
            .store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            running.scope_text(&store, &token).await.unwrap(),
            old,
            "kept for a while"
        );
        tokio::time::advance(KEPT_FOR).await;
        assert_eq!(
            running.scope_text(&store, &token).await.unwrap(),
            new,
            "read again"
        );
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
