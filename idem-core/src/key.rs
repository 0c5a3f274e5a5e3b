//! Idempotency keys: the rendered, validated name of one unit of work.

use std::fmt;

/// The longest key a store accepts, in bytes.
///
/// Keys name work (`invoice-run:2026-11`), they do not carry it. Put large inputs in the
/// fingerprint instead, which stores a fixed-size hash.
pub const MAX_KEY_LEN: usize = 512;

/// A validated idempotency key: non-empty, at most [`MAX_KEY_LEN`] bytes, no control characters.
///
/// ```
/// use idem_core::Key;
///
/// let key = Key::new("reminder:user42:2026-11-01").unwrap();
/// assert_eq!(key.as_str(), "reminder:user42:2026-11-01");
/// assert!(Key::new("").is_err());
/// assert!(Key::new("tab\there").is_err());
/// ```
///
/// A key belongs to a **scope**, kept apart from its text (a field, and a column in database
/// stores, never a prefix a template could forge): the same text in two scopes names two
/// records. `#[idempotent]` scopes keys by the function's name (or its `scope = ".."`), the
/// PostgreSQL queue its jobs by a scope of its own, and [`Key::new`] makes a
/// key in [`DEFAULT_SCOPE`].
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    scope: std::borrow::Cow<'static, str>,
    key: String,
    /// The key's hash in `MemoryStore`'s index, once computed (so a call's claim and
    /// completion hash it once). Not part of the key's value: equal, hash and order ignore it.
    memo: Memo,
}

/// A hash remembered for a [`Key`] (0: not yet). Neutral in every comparison, so the derived
/// traits of `Key` stay those of its scope and text.
#[derive(Default)]
struct Memo(std::sync::atomic::AtomicU64);

impl Clone for Memo {
    fn clone(&self) -> Memo {
        Memo(std::sync::atomic::AtomicU64::new(self.get()))
    }
}

impl Memo {
    fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl PartialEq for Memo {
    fn eq(&self, _: &Memo) -> bool {
        true
    }
}

impl Eq for Memo {}

impl PartialOrd for Memo {
    fn partial_cmp(&self, other: &Memo) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Memo {
    fn cmp(&self, _: &Memo) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl std::hash::Hash for Memo {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

/// The longest scope, in bytes.
pub const MAX_SCOPE_LEN: usize = 128;

/// The scope of a key made by [`Key::new`] (and of a [`Call`](crate::Call) given no scope).
pub const DEFAULT_SCOPE: &str = "default";

/// The scope (`""`) of records a PostgreSQL store wrote before keys had scopes. A claim in any
/// scope finds such a record until it expires, so upgrading never turns done work into new
/// work. No call can be made in it; operator tools name it to release or forget such a record
/// ([`Key::with_stored_scope`]).
pub const LEGACY_SCOPE: &str = "";

impl Key {
    /// Validates `key` and wraps it.
    pub fn new(key: impl Into<String>) -> Result<Key, InvalidKey> {
        let key = key.into();
        let reason = if key.is_empty() {
            Some(InvalidKeyReason::Empty)
        } else if key.len() > MAX_KEY_LEN {
            Some(InvalidKeyReason::TooLong { len: key.len() })
        } else {
            key.char_indices()
                .find(|(_, c)| c.is_control())
                .map(|(offset, _)| InvalidKeyReason::ControlCharacter { offset })
        };
        match reason {
            None => Ok(Key {
                scope: std::borrow::Cow::Borrowed(DEFAULT_SCOPE),
                key,
                memo: Memo::default(),
            }),
            Some(reason) => Err(InvalidKey { key, reason }),
        }
    }

    /// This key in a scope as a store reports it: [`with_scope`](Key::with_scope), or
    /// [`LEGACY_SCOPE`] for `""`, so that an operator tool can release or forget any record it
    /// lists. A call refuses a key in the legacy scope ([`Error::InvalidKey`](crate::Error)).
    pub fn with_stored_scope(self, scope: &str) -> Result<Key, InvalidKey> {
        if scope == LEGACY_SCOPE {
            let mut key = self;
            key.scope = std::borrow::Cow::Borrowed(LEGACY_SCOPE);
            key.memo = Memo::default();
            return Ok(key);
        }
        self.with_scope(scope.to_owned())
    }

    /// This key, unless it is in [`LEGACY_SCOPE`]: that scope names records written before
    /// scopes, and no new work goes in it.
    pub(crate) fn callable(self) -> Result<Key, InvalidKey> {
        if self.scope == LEGACY_SCOPE {
            return Err(InvalidKey {
                key: format!("/{}", self.key),
                reason: InvalidKeyReason::InvalidScope,
            });
        }
        Ok(self)
    }

    /// This key in `scope` (1 to [`MAX_SCOPE_LEN`] bytes, no control characters). Renaming
    /// a scope makes every key in it new work.
    pub fn with_scope(
        mut self,
        scope: impl Into<std::borrow::Cow<'static, str>>,
    ) -> Result<Key, InvalidKey> {
        let scope = scope.into();
        if scope.is_empty() || scope.len() > MAX_SCOPE_LEN || scope.chars().any(char::is_control) {
            return Err(InvalidKey {
                key: format!("{scope}/{}", self.key),
                reason: InvalidKeyReason::InvalidScope,
            });
        }
        self.scope = scope;
        self.memo = Memo::default();
        Ok(self)
    }

    /// The key as text (without its scope).
    pub fn as_str(&self) -> &str {
        &self.key
    }

    /// The key's scope ([`DEFAULT_SCOPE`] unless set).
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// Moves the key out, leaving an empty one (which nothing may use) in its place: how a
    /// call hands its key to the body's context without copying it.
    pub(crate) fn take(&mut self) -> Key {
        std::mem::replace(
            self,
            Key {
                scope: std::borrow::Cow::Borrowed(DEFAULT_SCOPE),
                key: String::new(),
                memo: Memo::default(),
            },
        )
    }

    /// The key's hash under `MemoryStore`'s process-wide hasher: `compute`d once, then
    /// remembered (never 0, which marks "not yet"). Only that one hasher may use it.
    pub(crate) fn memory_hash(&self, compute: impl FnOnce(&Key) -> u64) -> u64 {
        match self.memo.get() {
            0 => {
                let hash = compute(self).max(1);
                self.memo
                    .0
                    .store(hash, std::sync::atomic::Ordering::Relaxed);
                hash
            }
            hash => hash,
        }
    }

    /// The key's text as an owned `String`.
    pub fn into_string(self) -> String {
        self.key
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.scope == DEFAULT_SCOPE {
            fmt::Debug::fmt(&self.key, f)
        } else {
            write!(f, "{:?} in scope {:?}", self.key, self.scope)
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        &self.key
    }
}

impl TryFrom<String> for Key {
    type Error = InvalidKey;
    fn try_from(key: String) -> Result<Key, InvalidKey> {
        Key::new(key)
    }
}

impl TryFrom<&str> for Key {
    type Error = InvalidKey;
    fn try_from(key: &str) -> Result<Key, InvalidKey> {
        Key::new(key)
    }
}

/// Why a rendered key was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidKeyReason {
    /// The key rendered to the empty string.
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`] bytes.
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The key holds a control character (newline, tab, NUL, ...).
    ControlCharacter {
        /// Byte offset of the first one.
        offset: usize,
    },
    /// The scope is empty, longer than [`MAX_SCOPE_LEN`] bytes, or holds a control character.
    InvalidScope,
}

/// A key that failed validation. Nothing was claimed and the handler did not run.
#[derive(Clone, PartialEq, Eq)]
pub struct InvalidKey {
    key: String,
    reason: InvalidKeyReason,
}

impl InvalidKey {
    /// The refused key, as rendered.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Why it was refused.
    pub fn reason(&self) -> InvalidKeyReason {
        self.reason
    }
}

impl fmt::Debug for InvalidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InvalidKey")
            .field("key", &Shown(&self.key))
            .field("reason", &self.reason)
            .finish()
    }
}

impl fmt::Display for InvalidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            InvalidKeyReason::Empty => f.write_str(
                "invalid idempotency key: it rendered to the empty string; \
                 make sure every value in the key template is non-empty",
            ),
            InvalidKeyReason::TooLong { len } => write!(
                f,
                "invalid idempotency key {:?}: it is {len} bytes long and keys are at most \
                 {MAX_KEY_LEN}; name the work in the key and move large inputs to `fingerprint(..)`",
                Shown(&self.key)
            ),
            InvalidKeyReason::InvalidScope => write!(
                f,
                "invalid idempotency scope in {:?}: scopes are 1 to {MAX_SCOPE_LEN} bytes of \
                 printable text",
                Shown(&self.key)
            ),
            InvalidKeyReason::ControlCharacter { offset } => write!(
                f,
                "invalid idempotency key {:?}: it has a control character at byte {offset}; \
                 keys must be printable text",
                Shown(&self.key)
            ),
        }
    }
}

impl std::error::Error for InvalidKey {}

impl From<std::convert::Infallible> for InvalidKey {
    fn from(never: std::convert::Infallible) -> InvalidKey {
        match never {}
    }
}

/// Shows at most the first 64 characters of a key, so an oversized key does not flood a log.
struct Shown<'a>(&'a str);

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOW: usize = 64;
        match self.0.char_indices().nth(SHOW) {
            Some((cut, _)) => write!(f, "{:?}...", &self.0[..cut]),
            None => write!(f, "{:?}", self.0),
        }
    }
}
