//! The Lua scripts: each store operation is one of them, run atomically by Redis (one round
//! trip, `EVALSHA`; the script is loaded once per server, on its first `NOSCRIPT`). Times are the
//! server's clock (`TIME`), in microseconds.
//!
//! A record is a hash: `f` fence, `fp` fingerprint (empty: none), `tk` the claim's token, `d` `1`
//! when completed, `x` when it stops counting (lease end, or end of `keep`), `c` when it completed,
//! `o` the output, `h` who claimed it (`host:pid`). A journal entry is a hash: `s` state (0
//! started, 1 done), `f` fence, `x` expiry, `ho` whether it has an output, `o` the output. Both
//! carry a Redis expiry of their `x` plus a grace (ARGV), so a lapsed record is still seen (and
//! reported as taken over) for a while; Redis deletes them after it, and `purge` earlier.
//!
//! Fences are the server's time in microseconds at the claim, or one more than the record's
//! fence if that is larger: they grow across claims, releases and takeovers of a key, and
//! after its record is gone, as long as the server's clock does not step back.

use redis::Script;
use std::sync::LazyLock;

const NOW: &str = "local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
";

fn script(body: &str) -> Script {
    Script::new(&format!("{NOW}{body}"))
}

/// KEYS: record. ARGV: fingerprint, token, lease (µs), grace (ms), holder. Returns
/// `{1, fence, expires, taken_over}`, `{2, expires}` (in progress),
/// `{3, completed, has_output, output}` or `{4}` (fingerprint mismatch).
pub(crate) static CLAIM: LazyLock<Script> = LazyLock::new(|| Script::new(&CLAIM_SOURCE));

/// The claim script's full source.
pub(crate) static CLAIM_SOURCE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{NOW}{}",
        "local r = redis.call('HMGET', KEYS[1], 'f', 'fp', 'tk', 'd', 'x', 'c', 'o')
local old = tonumber(r[1])
local taken = 0
if old then
  local exp = tonumber(r[5])
  if exp > now then
    if r[2] and r[2] ~= '' and ARGV[1] ~= '' and r[2] ~= ARGV[1] then return {4} end
    if r[4] == '1' then
      if r[7] then return {3, tonumber(r[6]), 1, r[7]} end
      return {3, tonumber(r[6]), 0, ''}
    end
    if ARGV[2] ~= '' and r[3] == ARGV[2] then return {1, old, exp, 0} end
    return {2, exp}
  end
  taken = 1
end
local fence = now
if old and old >= now then fence = old + 1 end
local lease = tonumber(ARGV[3])
local exp = now + lease
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'f', fence, 'fp', ARGV[1], 'tk', ARGV[2], 'd', '0', 'x', exp, 'h', ARGV[5])
redis.call('PEXPIRE', KEYS[1], math.ceil(lease / 1000) + tonumber(ARGV[4]))
return {1, fence, exp, taken}"
    )
});

/// KEYS: record. ARGV: fence, keep (µs), grace (ms), has output (`1`/`0`), output. Returns 1
/// when applied.
pub(crate) static COMPLETE: LazyLock<Script> = LazyLock::new(|| {
    script(
        "local r = redis.call('HMGET', KEYS[1], 'f', 'd', 'c')
if not r[1] or tonumber(r[1]) ~= tonumber(ARGV[1]) then return 0 end
local completed = now
if r[2] == '1' and r[3] then completed = tonumber(r[3]) end
local exp = completed + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'd', '1', 'c', completed, 'x', exp)
if ARGV[4] == '1' then redis.call('HSET', KEYS[1], 'o', ARGV[5]) else redis.call('HDEL', KEYS[1], 'o') end
local ttl = math.ceil((exp - now) / 1000) + tonumber(ARGV[3])
if ttl < 1 then ttl = 1 end
redis.call('PEXPIRE', KEYS[1], ttl)
return 1",
    )
});

/// KEYS: record. ARGV: fence. Deletes an unfinished claim holding the fence; returns 1 if so.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    script(
        "local r = redis.call('HMGET', KEYS[1], 'f', 'd')
if not r[1] or tonumber(r[1]) ~= tonumber(ARGV[1]) or r[2] == '1' then return 0 end
redis.call('DEL', KEYS[1])
return 1",
    )
});

/// KEYS: record. ARGV: fence. Returns 1 when the claim holding the fence, unfinished and its
/// lease lapsed, was deleted.
pub(crate) static RELEASE_LAPSED: LazyLock<Script> = LazyLock::new(|| {
    script(
        "local r = redis.call('HMGET', KEYS[1], 'f', 'd', 'x')
if not r[1] or tonumber(r[1]) ~= tonumber(ARGV[1]) or r[2] == '1' then return 0 end
if tonumber(r[3]) > now then return 0 end
redis.call('DEL', KEYS[1])
return 1",
    )
});

/// KEYS: record. ARGV: fence, lease (µs), grace (ms). Returns 1 when renewed.
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| {
    script(
        "local r = redis.call('HMGET', KEYS[1], 'f', 'd')
if not r[1] or tonumber(r[1]) ~= tonumber(ARGV[1]) or r[2] == '1' then return 0 end
local lease = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'x', now + lease)
redis.call('PEXPIRE', KEYS[1], math.ceil(lease / 1000) + tonumber(ARGV[3]))
return 1",
    )
});

/// KEYS: journal entry. Returns `{0}` (none, or expired) or `{1, state, fence, has_output,
/// output}`.
pub(crate) static EFFECT: LazyLock<Script> = LazyLock::new(|| {
    script(
        "local r = redis.call('HMGET', KEYS[1], 's', 'f', 'x', 'ho', 'o')
if not r[1] or tonumber(r[3]) <= now then return {0} end
return {1, tonumber(r[1]), tonumber(r[2]), r[4] or '0', r[5] or ''}",
    )
});

/// KEYS: record, journal entry. ARGV: fence, state, keep (µs), grace (ms), has output, output.
/// Writes while the record holds the fence and is in progress, never over a done entry that
/// has not expired. Returns 1 when written.
pub(crate) static RECORD_EFFECT: LazyLock<Script> = LazyLock::new(|| {
    script(
        "local r = redis.call('HMGET', KEYS[1], 'f', 'd')
if not r[1] or tonumber(r[1]) ~= tonumber(ARGV[1]) or r[2] == '1' then return 0 end
local e = redis.call('HMGET', KEYS[2], 's', 'x')
if e[1] == '1' and tonumber(e[2]) > now then return 0 end
local keep = tonumber(ARGV[3])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 's', ARGV[2], 'f', ARGV[1], 'x', now + keep, 'ho', ARGV[5])
if ARGV[5] == '1' then redis.call('HSET', KEYS[2], 'o', ARGV[6]) end
redis.call('PEXPIRE', KEYS[2], math.ceil(keep / 1000) + tonumber(ARGV[4]))
return 1",
    )
});

/// KEYS: a record or journal entry. Deletes it if it has expired; returns 1 if so.
pub(crate) static PURGE_ONE: LazyLock<Script> = LazyLock::new(|| {
    script(
        "local x = redis.call('HGET', KEYS[1], 'x')
if not x or tonumber(x) > now then return 0 end
redis.call('DEL', KEYS[1])
return 1",
    )
});

/// KEYS: record. Deletes a completed record (so its work runs again); returns 1 if so.
pub(crate) static FORGET: LazyLock<Script> = LazyLock::new(|| {
    script(
        "if redis.call('HGET', KEYS[1], 'd') ~= '1' then return 0 end
redis.call('DEL', KEYS[1])
return 1",
    )
});
