//! Redis key names. Every key of one record (the record and its journal entries) carries the
//! same hash tag, a 64-bit FNV-1a hash of the scope and key in braces, so on Redis Cluster they
//! live in one slot and a script may touch them together. The scope and key follow in full,
//! length-prefixed, so two records never share a name even when their hashes collide.

use idem_core::Key;

/// FNV-1a, 64 bits: stable across processes and versions (the tag decides a record's slot).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.iter().chain(&[0xff]) {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

fn tag(key: &Key) -> u64 {
    fnv1a(&[key.scope().as_bytes(), key.as_str().as_bytes()])
}

/// The record of `key`: `PREFIX:{TAG}:r:SCOPELEN:SCOPE:KEY`.
pub(crate) fn record(prefix: &str, key: &Key) -> String {
    let scope = key.scope();
    format!(
        "{prefix}:{{{:016x}}}:r:{}:{scope}:{}",
        tag(key),
        scope.len(),
        key.as_str()
    )
}

/// The journal entry of `effect` under `key`: `PREFIX:{TAG}:e:SCOPELEN:SCOPE:KEYLEN:KEY:EFFECT`.
pub(crate) fn effect(prefix: &str, key: &Key, effect: &str) -> String {
    let scope = key.scope();
    format!(
        "{prefix}:{{{:016x}}}:e:{}:{scope}:{}:{}:{effect}",
        tag(key),
        scope.len(),
        key.as_str().len(),
        key.as_str()
    )
}

/// Whether a key name (as `SCAN` finds it) is a record (else a journal entry).
pub(crate) fn is_record(prefix: &str, name: &[u8]) -> bool {
    // PREFIX:{16 hex}:r:...
    let at = prefix.len() + 1 + 18 + 1;
    name.len() > at + 1 && &name[at..at + 2] == b"r:"
}

/// The scope and key a record's name holds (the inverse of [`record`]).
pub(crate) fn parse_record(prefix: &str, name: &[u8]) -> Option<(String, String)> {
    let name = std::str::from_utf8(name).ok()?;
    let rest = name.strip_prefix(prefix)?.strip_prefix(':')?;
    let rest = rest.get(18..)?.strip_prefix(":r:")?;
    let (len, rest) = rest.split_once(':')?;
    let len: usize = len.parse().ok()?;
    let scope = rest.get(..len)?;
    let key = rest.get(len..)?.strip_prefix(':')?;
    Some((scope.to_owned(), key.to_owned()))
}

/// A `SCAN MATCH` pattern for the journal entries of `key` (glob characters escaped).
pub(crate) fn effects_pattern(prefix: &str, key: &Key) -> String {
    let name = effect(prefix, key, "");
    let mut pattern = String::with_capacity(name.len() + 1);
    for c in name.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('*');
    pattern
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_records_keys_share_one_hash_tag_and_never_collide() {
        let k = Key::new("invoice:{2026}:7")
            .unwrap()
            .with_scope("billing")
            .unwrap();
        let r = record("idem", &k);
        let e = effect("idem", &k, "send");
        let tag = |s: &str| s[s.find('{').unwrap()..=s.find('}').unwrap()].to_owned();
        assert_eq!(tag(&r), tag(&e));
        assert!(is_record("idem", r.as_bytes()));
        assert!(!is_record("idem", e.as_bytes()));
        let a = Key::new("b:c").unwrap().with_scope("a").unwrap();
        let b = Key::new("c").unwrap().with_scope("a:b").unwrap();
        assert_ne!(record("idem", &a), record("idem", &b));
        assert_eq!(
            parse_record("idem", r.as_bytes()),
            Some(("billing".to_owned(), "invoice:{2026}:7".to_owned()))
        );
        assert!(effects_pattern("idem", &k).ends_with(":*"));
    }
}
