//! One shard's records, laid out compactly: each record is 64 bytes in a chunked slab, with its
//! scope, key, fingerprint and output in one heap block, and the hash index holds only slab
//! positions and 32 bits of each key's hash (8 bytes a slot): the table's growth doubles an
//! array of those, and rehashes them from the stored bits without reading a record or hashing
//! a key again.

use hashbrown::HashTable;
use std::hash::{BuildHasher, RandomState};

use crate::key::Key;

/// Records per slab chunk (64 KiB). The slab grows a chunk at a time, never moving the records
/// of full chunks; a new chunk doubles its way up to this size, so a fresh store holds little
/// and no growth copies more than one chunk.
const CHUNK: usize = 1024;

const COMPLETED: u8 = 1;
const TOKEN: u8 = 2;
const FINGERPRINT: u8 = 4;
const OUTPUT: u8 = 8;

/// The hash of a key, as the index and the shard choice use it (never 0).
pub(super) fn hash_key(hasher: &RandomState, key: &Key) -> u64 {
    hasher
        .hash_one((key.scope().as_bytes(), key.as_str().as_bytes()))
        .max(1)
}

/// The 32 bits of a key's hash that the index keeps.
fn tag(hash: u64) -> u32 {
    (hash ^ (hash >> 32)) as u32
}

/// The hash the index files a key under, made from its tag alone (so growth needs nothing
/// else): a multiply spreads the tag over the 64 bits hashbrown reads (its slot from the low
/// bits, its control byte from the top seven).
fn spread(tag: u32) -> u64 {
    u64::from(tag).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(tag)
}

/// One record. Times are nanoseconds: monotonic ones on the store's clock (what decides), the
/// completion's wall-clock time since the Unix epoch (only reported).
pub(super) struct Record {
    /// The scope, the key's text, the fingerprint and the output, one after another.
    blob: Box<[u8]>,
    pub fence: u64,
    token: u64,
    /// When the lease lapses (in progress) or the record stops counting (completed).
    pub until: u64,
    /// Completed: when (monotonic), which `keep` counts from.
    pub done: u64,
    /// Completed: when (wall clock).
    pub done_wall: i64,
    fingerprint_len: u32,
    key_len: u16,
    scope_len: u8,
    flags: u8,
}

impl Record {
    /// A claim in progress until `until`.
    pub fn claimed(
        key: &Key,
        fingerprint: Option<&str>,
        token: Option<u64>,
        fence: u64,
        until: u64,
    ) -> Record {
        let (scope, text) = (key.scope().as_bytes(), key.as_str().as_bytes());
        let fingerprint_bytes = fingerprint.map_or(&[][..], str::as_bytes);
        let mut blob = Vec::with_capacity(scope.len() + text.len() + fingerprint_bytes.len());
        blob.extend_from_slice(scope);
        blob.extend_from_slice(text);
        blob.extend_from_slice(fingerprint_bytes);
        let mut flags = 0;
        if token.is_some() {
            flags |= TOKEN;
        }
        if fingerprint.is_some() {
            flags |= FINGERPRINT;
        }
        Record {
            blob: blob.into_boxed_slice(),
            fence,
            token: token.unwrap_or(0),
            until,
            done: 0,
            done_wall: 0,
            // Keys and scopes are validated (at most 512 and 128 bytes); a fingerprint is a
            // hash, and one beyond 4 GiB cannot be held anyway.
            fingerprint_len: u32::try_from(fingerprint_bytes.len()).expect("fingerprint size"),
            key_len: u16::try_from(text.len()).expect("validated key length"),
            scope_len: u8::try_from(scope.len()).expect("validated scope length"),
            flags,
        }
    }

    fn scope(&self) -> &[u8] {
        &self.blob[..usize::from(self.scope_len)]
    }

    fn text(&self) -> &[u8] {
        let start = usize::from(self.scope_len);
        &self.blob[start..start + usize::from(self.key_len)]
    }

    fn name_len(&self) -> usize {
        usize::from(self.scope_len) + usize::from(self.key_len)
    }

    fn hash(&self, hasher: &RandomState) -> u64 {
        hasher.hash_one((self.scope(), self.text())).max(1)
    }

    fn is(&self, key: &Key) -> bool {
        self.text() == key.as_str().as_bytes() && self.scope() == key.scope().as_bytes()
    }

    pub fn fingerprint(&self) -> Option<&str> {
        (self.flags & FINGERPRINT != 0).then(|| {
            let start = self.name_len();
            let bytes = &self.blob[start..start + self.fingerprint_len as usize];
            std::str::from_utf8(bytes).expect("stored from a str")
        })
    }

    pub fn output(&self) -> Option<&[u8]> {
        (self.flags & OUTPUT != 0)
            .then(|| &self.blob[self.name_len() + self.fingerprint_len as usize..])
    }

    pub fn token(&self) -> Option<u64> {
        (self.flags & TOKEN != 0).then_some(self.token)
    }

    pub fn is_completed(&self) -> bool {
        self.flags & COMPLETED != 0
    }

    /// Marks the record completed at `done` (`done_wall`), counting until `until`, with `output`.
    pub fn complete(&mut self, done: u64, done_wall: i64, until: u64, output: Option<&[u8]>) {
        let kept = self.name_len() + self.fingerprint_len as usize;
        if output.is_some() || self.output().is_some() {
            let output = output.unwrap_or(&[]);
            let mut blob = Vec::with_capacity(kept + output.len());
            blob.extend_from_slice(&self.blob[..kept]);
            blob.extend_from_slice(output);
            self.blob = blob.into_boxed_slice();
        }
        self.flags = (self.flags & !OUTPUT) | COMPLETED;
        if output.is_some() {
            self.flags |= OUTPUT;
        }
        (self.done, self.done_wall, self.until) = (done, done_wall, until);
    }
}

/// The records of one shard, and the index that finds them by key.
#[derive(Default)]
pub(super) struct Table {
    /// (slab position, tag) of each record.
    index: HashTable<(u32, u32)>,
    chunks: Vec<Vec<Option<Record>>>,
    /// Slab positions whose record was removed, for reuse.
    free: Vec<u32>,
}

fn split(at: u32) -> (usize, usize) {
    (at as usize / CHUNK, at as usize % CHUNK)
}

impl Table {
    /// How many records are held.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Where the record for `key` is, if there is one.
    pub fn find(&self, hash: u64, key: &Key) -> Option<u32> {
        let chunks = &self.chunks;
        let tag = tag(hash);
        self.index
            .find(spread(tag), |&(at, other)| {
                other == tag && slot(chunks, at).as_ref().is_some_and(|r| r.is(key))
            })
            .map(|&(at, _)| at)
    }

    pub fn get(&self, at: u32) -> &Record {
        slot(&self.chunks, at).as_ref().expect("a held record")
    }

    pub fn get_mut(&mut self, at: u32) -> &mut Record {
        let (chunk, offset) = split(at);
        self.chunks[chunk][offset].as_mut().expect("a held record")
    }

    /// Replaces the record at `at` with another for the same key.
    pub fn replace(&mut self, at: u32, record: Record) {
        *self.get_mut(at) = record;
    }

    /// Adds the record of a key that has none (`hash` is its key's).
    pub fn insert(&mut self, hash: u64, record: Record) {
        let at = match self.free.pop() {
            Some(at) => {
                let (chunk, offset) = split(at);
                self.chunks[chunk][offset] = Some(record);
                at
            }
            None => {
                if self.chunks.last().is_none_or(|chunk| chunk.len() == CHUNK) {
                    self.chunks.push(Vec::new());
                }
                let full = (self.chunks.len() - 1) * CHUNK;
                let chunk = self.chunks.last_mut().expect("pushed above");
                chunk.push(Some(record));
                u32::try_from(full + chunk.len() - 1).expect("fewer than 2^32 records a shard")
            }
        };
        let tag = tag(hash);
        self.index
            .insert_unique(spread(tag), (at, tag), |&(_, tag)| spread(tag));
    }

    /// Removes the record at `at` (`hash` is its key's).
    pub fn remove(&mut self, hash: u64, at: u32) {
        if let Ok(entry) = self
            .index
            .find_entry(spread(tag(hash)), |&(other, _)| other == at)
        {
            entry.remove();
        }
        let (chunk, offset) = split(at);
        self.chunks[chunk][offset] = None;
        self.free.push(at);
    }

    /// Removes up to `limit` records for which `expired` holds; returns how many.
    pub fn remove_where(
        &mut self,
        limit: usize,
        hasher: &RandomState,
        expired: impl Fn(&Record) -> bool,
    ) -> usize {
        let mut removed = 0;
        for chunk in 0..self.chunks.len() {
            for offset in 0..self.chunks[chunk].len() {
                if removed >= limit {
                    return removed;
                }
                let hash = match &self.chunks[chunk][offset] {
                    Some(record) if expired(record) => record.hash(hasher),
                    _ => continue,
                };
                self.remove(
                    hash,
                    u32::try_from(chunk * CHUNK + offset).expect("a slab position"),
                );
                removed += 1;
            }
        }
        removed
    }
}

fn slot(chunks: &[Vec<Option<Record>>], at: u32) -> &Option<Record> {
    let (chunk, offset) = split(at);
    &chunks[chunk][offset]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_64_bytes() {
        assert_eq!(std::mem::size_of::<Option<Record>>(), 64);
    }

    /// Records come back by key, through growth, removals and reuse of their positions.
    #[test]
    fn finds_what_it_holds() {
        let hasher = RandomState::new();
        let mut table = Table::default();
        let keys: Vec<Key> = (0..5000)
            .map(|i| {
                Key::new(format!("k{i}"))
                    .unwrap()
                    .with_scope(if i % 2 == 0 { "a" } else { "b" })
                    .unwrap()
            })
            .collect();
        for (i, key) in keys.iter().enumerate() {
            let record = Record::claimed(key, Some("fp"), Some(i as u64), i as u64, 0);
            table.insert(hash_key(&hasher, key), record);
        }
        assert_eq!(table.len(), 5000);
        let removed = table.remove_where(usize::MAX, &hasher, |r| r.fence % 3 == 0);
        assert_eq!(removed, 1667);
        for (i, key) in keys.iter().enumerate() {
            let found = table.find(hash_key(&hasher, key), key);
            assert_eq!(found.is_some(), i % 3 != 0, "{key:?}");
            if let Some(at) = found {
                let record = table.get(at);
                assert_eq!((record.fence, record.token()), (i as u64, Some(i as u64)));
                assert_eq!(record.fingerprint(), Some("fp"));
            }
        }
        // The same text in the other scope is another key.
        let other = Key::new("k1").unwrap().with_scope("a").unwrap();
        assert!(table.find(hash_key(&hasher, &other), &other).is_none());
        // Freed positions are reused.
        let key = Key::new("again").unwrap();
        table.insert(
            hash_key(&hasher, &key),
            Record::claimed(&key, None, None, 1, 0),
        );
        assert_eq!(table.chunks.iter().map(Vec::len).sum::<usize>(), 5000);
    }

    #[test]
    fn completion_keeps_the_fingerprint_and_replaces_the_output() {
        let key = Key::new("k").unwrap();
        let mut record = Record::claimed(&key, Some("abc"), None, 1, 10);
        assert_eq!((record.output(), record.is_completed()), (None, false));
        record.complete(5, 6, 7, Some(b"out"));
        assert_eq!(record.output(), Some(&b"out"[..]));
        record.complete(5, 6, 8, Some(b""));
        assert_eq!(record.output(), Some(&b""[..]));
        record.complete(5, 6, 9, None);
        assert_eq!((record.output(), record.fingerprint()), (None, Some("abc")));
        assert!(record.is_completed() && record.is(&key) && record.token().is_none());
    }
}
