//! The rules of [`Store`] and [`Purge`](idem_core::Purge), one function each, declared once in
//! the [`declare_cases!`](crate::declare_cases) block below (which also lists them for
//! [`store_conformance!`](crate::store_conformance)). Every function takes a fresh harness and
//! panics on a violation with a message that names the rule.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use idem_core::{
    Call, Claim, ClaimRequest, ClaimToken, Completion, EffectRecord, EffectState, Fence, Fenced,
    Fingerprint, Key, Outcome, RecordState, Store,
};

use tokio::sync::Semaphore;

use crate::Harness;

const LONG_LEASE: Duration = Duration::from_secs(600);
const KEEP: Duration = Duration::from_secs(3600);

fn key(name: &str) -> Key {
    Key::new(format!("conformance:{name}")).expect("valid key")
}

fn fp(value: u32) -> Fingerprint {
    Fingerprint::builder()
        .field("value", &value)
        .expect("serializable")
        .finish()
}

async fn claim(store: &dyn Store, key: &Key, lease: Duration) -> Claim {
    claim_fp(store, key, lease, None).await
}

async fn claim_fp(
    store: &dyn Store,
    key: &Key,
    lease: Duration,
    fingerprint: Option<&Fingerprint>,
) -> Claim {
    store
        .claim(ClaimRequest {
            key,
            fingerprint,
            lease,
            token: None,
        })
        .await
        .expect("claim succeeds")
}

async fn acquire(store: &dyn Store, key: &Key, lease: Duration) -> Fence {
    match claim(store, key, lease).await {
        Claim::Acquired { fence, .. } => fence,
        other => panic!("expected to acquire {key}, got {other:?}"),
    }
}

async fn complete(store: &dyn Store, key: &Key, fence: Fence, output: Option<&[u8]>) -> Fenced {
    store
        .complete(key, fence, Completion { output, keep: KEEP })
        .await
        .expect("complete succeeds")
}

/// A lapse: a little more than the short lease.
fn past(lease: Duration) -> Duration {
    lease + lease / 4 + Duration::from_millis(50)
}

async fn replay_twice<T>(store: &dyn Store, name: &str, value: T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + Clone + PartialEq + std::fmt::Debug,
{
    let k = key(&format!("replay-{name}"));
    let first = Call::new(store, k.clone())
        .run_replay(async { Ok::<_, std::io::Error>(value.clone()) })
        .await
        .expect("first run");
    assert_eq!(first, Outcome::Executed(value.clone()));
    let second = Call::new(store, k)
        .run_replay(async {
            let ran: Result<T, std::io::Error> = Err(std::io::Error::other("duplicate ran"));
            ran
        })
        .await
        .expect("duplicate");
    match second {
        Outcome::Duplicate { value: got, .. } => {
            assert_eq!(got, Some(value), "replayed {name} must equal the original")
        }
        other => panic!("expected a duplicate for {name}, got {other:?}"),
    }
}

async fn record(
    store: &dyn Store,
    key: &Key,
    fence: Fence,
    effect: &str,
    state: EffectState,
    output: Option<&[u8]>,
    keep: Duration,
) -> Fenced {
    store
        .record_effect(
            key,
            fence,
            EffectRecord {
                effect,
                state,
                output,
                keep,
            },
        )
        .await
        .expect("record_effect succeeds")
}

/// Records `effect` done with `output`, kept for [`KEEP`].
async fn record_done(
    store: &dyn Store,
    key: &Key,
    fence: Fence,
    effect: &str,
    output: &[u8],
) -> Fenced {
    record(
        store,
        key,
        fence,
        effect,
        EffectState::Done,
        Some(output),
        KEEP,
    )
    .await
}

crate::declare_cases! { $ __store_cases:
    /// A fresh key is acquired, with a lease in the future.
    pub async fn first_claim_acquires(h: &impl Harness) {
        let store = h.store();
        let before = SystemTime::now() - Duration::from_secs(5);
        match claim(&*store, &key("first"), LONG_LEASE).await {
            Claim::Acquired {
                lease_expires_at,
                taken_over,
                ..
            } => {
                assert!(!taken_over, "a fresh key is not a takeover");
                assert!(
                    lease_expires_at > before + LONG_LEASE / 2,
                    "lease lies ahead"
                );
            }
            other => panic!("first claim must acquire, got {other:?}"),
        }
    }

    /// After completion, a claim reports the completion with the stored output.
    pub async fn completed_key_is_a_duplicate_with_its_output(h: &impl Harness) {
        let store = h.store();
        let k = key("dup");
        let fence = acquire(&*store, &k, LONG_LEASE).await;
        assert_eq!(
            complete(&*store, &k, fence, Some(b"42")).await,
            Fenced::Applied
        );
        match claim(&*store, &k, LONG_LEASE).await {
            Claim::Completed { output, .. } => assert_eq!(output.as_deref(), Some(&b"42"[..])),
            other => panic!("a completed key must be a duplicate, got {other:?}"),
        }
    }

    /// A claim sent again with its own token (its first answer was lost) finds the claim it made
    /// and holds the key with the same fence; any other claim sees it in progress, and once it
    /// is completed the token claims nothing.
    pub async fn a_claim_sent_again_with_its_token_is_its_own(h: &impl Harness) {
        let store = h.store();
        let k = key("token");
        let token = ClaimToken::random();
        let request = |token| ClaimRequest {
            key: &k,
            fingerprint: None,
            lease: LONG_LEASE,
            token,
        };
        let Claim::Acquired { fence, .. } = store.claim(request(Some(token))).await.unwrap() else {
            panic!("a fresh key must be acquired");
        };
        match store.claim(request(Some(token))).await.unwrap() {
            Claim::Acquired {
                fence: again,
                taken_over,
                ..
            } => {
                assert_eq!(again, fence, "the same claim, the same fence");
                assert!(!taken_over, "not a takeover");
            }
            other => panic!("the caller's own claim must be acquired again, got {other:?}"),
        }
        for other in [Some(ClaimToken::random()), None] {
            assert!(
                matches!(store.claim(request(other)).await.unwrap(), Claim::InProgress { .. }),
                "another caller sees the claim in progress"
            );
        }
        assert_eq!(complete(&*store, &k, fence, None).await, Fenced::Applied);
        assert!(
            matches!(store.claim(request(Some(token))).await.unwrap(), Claim::Completed { .. }),
            "a completed key is a duplicate, even for the token that claimed it"
        );
    }

    /// The same key text in two scopes names two records: claiming, completing and reading one
    /// leaves the other alone (regression: two handlers with one template, or a handler and a
    /// queue job, shared a record, and the second was a silent duplicate).
    pub async fn scopes_keep_records_apart(h: &impl Harness) {
        let store = h.store();
        let a = key("scoped").with_scope("handler_a").unwrap();
        let b = key("scoped").with_scope("handler_b").unwrap();
        let fence = acquire(&*store, &a, LONG_LEASE).await;
        let other = acquire(&*store, &b, LONG_LEASE).await;
        assert_ne!(fence, other);
        assert_eq!(complete(&*store, &a, fence, Some(b"a")).await, Fenced::Applied);
        assert!(matches!(claim(&*store, &a, LONG_LEASE).await, Claim::Completed { .. }));
        assert!(
            matches!(claim(&*store, &b, LONG_LEASE).await, Claim::InProgress { .. }),
            "completing one scope's record leaves the other's in progress"
        );
        let record = store.get(&b).await.unwrap().expect("b's record");
        assert_eq!(record.fence, other);
        assert!(matches!(record.state, RecordState::InProgress { .. }));
    }

    /// While the first claim is live, a second claim reports it in progress with its expiry.
    pub async fn live_claim_is_in_progress(h: &impl Harness) {
        let store = h.store();
        let k = key("busy");
        let Claim::Acquired {
            lease_expires_at, ..
        } = claim(&*store, &k, LONG_LEASE).await
        else {
            panic!("first claim must acquire");
        };
        match claim(&*store, &k, LONG_LEASE).await {
            Claim::InProgress {
                lease_expires_at: seen,
            } => assert_eq!(seen, lease_expires_at, "reports the holder's expiry"),
            other => panic!("a live claim must be in progress, got {other:?}"),
        }
    }

    /// Once a lease lapses the key is taken over, with a greater fence.
    pub async fn lapsed_lease_is_taken_over_with_a_higher_fence(h: &impl Harness) {
        let store = h.store();
        let k = key("lapse");
        let lease = h.short_lease();
        let first = acquire(&*store, &k, lease).await;
        h.advance(past(lease)).await;
        match claim(&*store, &k, LONG_LEASE).await {
            Claim::Acquired {
                fence, taken_over, ..
            } => {
                assert!(taken_over, "a lapsed claim is a takeover");
                assert!(fence > first, "takeover fence {fence} must exceed {first}");
            }
            other => panic!("a lapsed lease must be taken over, got {other:?}"),
        }
    }

    /// The run that lost its claim cannot complete over the newer run's record.
    pub async fn stale_completion_is_fenced_out(h: &impl Harness) {
        let store = h.store();
        let k = key("stale");
        let lease = h.short_lease();
        let stale = acquire(&*store, &k, lease).await;
        h.advance(past(lease)).await;
        let fresh = acquire(&*store, &k, LONG_LEASE).await;
        assert_eq!(
            complete(&*store, &k, stale, Some(b"stale")).await,
            Fenced::Lost,
            "a stale fence must not complete"
        );
        let record = store.get(&k).await.unwrap().expect("record exists");
        assert_eq!(record.fence, fresh);
        assert!(matches!(record.state, RecordState::InProgress { .. }));
        assert_eq!(complete(&*store, &k, fresh, None).await, Fenced::Applied);
    }

    /// Release and renew with a stale fence change nothing.
    pub async fn stale_release_and_renew_are_fenced_out(h: &impl Harness) {
        let store = h.store();
        let k = key("stale-ops");
        let lease = h.short_lease();
        let stale = acquire(&*store, &k, lease).await;
        h.advance(past(lease)).await;
        let fresh = acquire(&*store, &k, LONG_LEASE).await;
        assert_eq!(store.release(&k, stale).await.unwrap(), Fenced::Lost);
        assert_eq!(
            store.renew(&k, stale, LONG_LEASE).await.unwrap(),
            Fenced::Lost
        );
        assert!(
            matches!(
                claim(&*store, &k, LONG_LEASE).await,
                Claim::InProgress { .. }
            ),
            "the fresh claim still holds"
        );
        assert_eq!(store.get(&k).await.unwrap().unwrap().fence, fresh);
    }

    /// Release frees the key at once; the next claim's fence is still greater.
    pub async fn release_frees_the_key_and_fences_keep_growing(h: &impl Harness) {
        let store = h.store();
        let k = key("release");
        let first = acquire(&*store, &k, LONG_LEASE).await;
        assert_eq!(store.release(&k, first).await.unwrap(), Fenced::Applied);
        let second = acquire(&*store, &k, LONG_LEASE).await;
        assert!(
            second > first,
            "fence after release {second} must exceed {first}"
        );
        assert_eq!(
            complete(&*store, &k, first, None).await,
            Fenced::Lost,
            "the released run cannot complete the new claim"
        );
    }

    /// Releasing a completed record (a late release) leaves it completed.
    pub async fn release_of_a_completed_record_keeps_it(h: &impl Harness) {
        let store = h.store();
        let k = key("release-done");
        let fence = acquire(&*store, &k, LONG_LEASE).await;
        assert_eq!(complete(&*store, &k, fence, None).await, Fenced::Applied);
        assert_eq!(
            store.release(&k, fence).await.unwrap(),
            Fenced::Lost,
            "nothing unfinished to release"
        );
        assert!(matches!(
            claim(&*store, &k, LONG_LEASE).await,
            Claim::Completed { .. }
        ));
    }

    /// Another fingerprint on a live or completed key is a mismatch.
    pub async fn fingerprint_mismatch_is_reported(h: &impl Harness) {
        let store = h.store();
        let k = key("fp");
        let (one, two) = (fp(1), fp(2));
        let Claim::Acquired { fence, .. } = claim_fp(&*store, &k, LONG_LEASE, Some(&one)).await else {
            panic!("first claim must acquire");
        };
        assert_eq!(
            claim_fp(&*store, &k, LONG_LEASE, Some(&two)).await,
            Claim::Mismatch,
            "in progress with another fingerprint"
        );
        assert_eq!(complete(&*store, &k, fence, None).await, Fenced::Applied);
        assert_eq!(
            claim_fp(&*store, &k, LONG_LEASE, Some(&two)).await,
            Claim::Mismatch,
            "completed with another fingerprint"
        );
        let record = store.get(&k).await.unwrap().unwrap();
        assert_eq!(record.fingerprint.as_ref(), Some(&one));
    }

    /// The same fingerprint, or a missing one on either side, is not a mismatch.
    pub async fn matching_or_absent_fingerprints_are_not_a_mismatch(h: &impl Harness) {
        let store = h.store();
        let k = key("fp-same");
        let one = fp(1);
        let Claim::Acquired { fence, .. } = claim_fp(&*store, &k, LONG_LEASE, Some(&one)).await else {
            panic!("first claim must acquire");
        };
        assert_eq!(complete(&*store, &k, fence, None).await, Fenced::Applied);
        assert!(matches!(
            claim_fp(&*store, &k, LONG_LEASE, Some(&one)).await,
            Claim::Completed { .. }
        ));
        assert!(matches!(
            claim_fp(&*store, &k, LONG_LEASE, None).await,
            Claim::Completed { .. }
        ));
    }

    /// A lapsed claim is free, whatever its fingerprint was: the new claim's fingerprint is kept.
    pub async fn lapsed_claim_is_taken_over_even_with_another_fingerprint(h: &impl Harness) {
        let store = h.store();
        let k = key("fp-lapse");
        let lease = h.short_lease();
        let _ = claim_fp(&*store, &k, lease, Some(&fp(1))).await;
        h.advance(past(lease)).await;
        assert!(matches!(
            claim_fp(&*store, &k, LONG_LEASE, Some(&fp(2))).await,
            Claim::Acquired {
                taken_over: true,
                ..
            }
        ));
        let record = store.get(&k).await.unwrap().unwrap();
        assert_eq!(record.fingerprint, Some(fp(2)));
    }

    /// A completed record counts for `keep`, then the key is free again.
    pub async fn keep_expiry_frees_the_key(h: &impl Harness) {
        let store = h.store();
        let k = key("keep");
        let keep = h.short_lease();
        let fence = acquire(&*store, &k, LONG_LEASE).await;
        let done = store
            .complete(&k, fence, Completion { output: None, keep })
            .await
            .unwrap();
        assert_eq!(done, Fenced::Applied);
        assert!(matches!(
            claim(&*store, &k, LONG_LEASE).await,
            Claim::Completed { .. }
        ));
        h.advance(past(keep)).await;
        match claim(&*store, &k, LONG_LEASE).await {
            Claim::Acquired {
                fence: next,
                taken_over,
                ..
            } => {
                assert!(taken_over);
                assert!(next > fence);
            }
            other => panic!("after keep the key must be free, got {other:?}"),
        }
    }

    /// Renewing moves the lease forward, so a renewed claim outlives its first lease.
    pub async fn renew_extends_a_live_lease(h: &impl Harness) {
        let store = h.store();
        let k = key("renew");
        let lease = h.short_lease();
        let fence = acquire(&*store, &k, lease).await;
        h.advance(lease * 6 / 10).await;
        assert_eq!(
            store.renew(&k, fence, lease).await.unwrap(),
            Fenced::Applied
        );
        h.advance(lease * 6 / 10).await;
        assert!(
            matches!(claim(&*store, &k, lease).await, Claim::InProgress { .. }),
            "1.2 leases after the claim, the renewed claim must still hold"
        );
    }

    /// A completed record cannot be renewed back into progress.
    pub async fn renew_of_a_completed_record_is_refused(h: &impl Harness) {
        let store = h.store();
        let k = key("renew-done");
        let fence = acquire(&*store, &k, LONG_LEASE).await;
        assert_eq!(complete(&*store, &k, fence, None).await, Fenced::Applied);
        assert_eq!(
            store.renew(&k, fence, LONG_LEASE).await.unwrap(),
            Fenced::Lost
        );
        assert!(matches!(
            claim(&*store, &k, LONG_LEASE).await,
            Claim::Completed { .. }
        ));
    }

    /// Completing twice with the same fence (a retried completion) applies and keeps the first
    /// completion time.
    pub async fn repeated_completion_with_the_same_fence_applies(h: &impl Harness) {
        let store = h.store();
        let k = key("complete-twice");
        let fence = acquire(&*store, &k, LONG_LEASE).await;
        assert_eq!(
            complete(&*store, &k, fence, Some(b"1")).await,
            Fenced::Applied
        );
        let Claim::Completed {
            completed_at: first,
            ..
        } = claim(&*store, &k, LONG_LEASE).await
        else {
            panic!("completed");
        };
        assert_eq!(
            complete(&*store, &k, fence, Some(b"1")).await,
            Fenced::Applied
        );
        let Claim::Completed {
            completed_at: second,
            ..
        } = claim(&*store, &k, LONG_LEASE).await
        else {
            panic!("completed");
        };
        assert_eq!(first, second);
    }

    /// Outputs come back exactly, including empty ones and ones that look "falsy".
    pub async fn outputs_round_trip_byte_for_byte(h: &impl Harness) {
        let store = h.store();
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let cases: [(&str, &[u8]); 7] = [
            ("empty", b""),
            ("null", b"null"),
            ("zero", b"0"),
            ("false", b"false"),
            ("nul-byte", b"\0"),
            ("non-utf8", &[0xff, 0xfe, 0x00, 0x80]),
            ("big", &big),
        ];
        for (name, bytes) in cases {
            let k = key(&format!("bytes-{name}"));
            let fence = acquire(&*store, &k, LONG_LEASE).await;
            assert_eq!(
                complete(&*store, &k, fence, Some(bytes)).await,
                Fenced::Applied
            );
            match claim(&*store, &k, LONG_LEASE).await {
                Claim::Completed { output, .. } => {
                    assert_eq!(output.as_deref(), Some(bytes), "output {name} round-trips")
                }
                other => panic!("expected completed, got {other:?}"),
            }
        }
        let k = key("bytes-none");
        let fence = acquire(&*store, &k, LONG_LEASE).await;
        assert_eq!(complete(&*store, &k, fence, None).await, Fenced::Applied);
        assert!(matches!(
            claim(&*store, &k, LONG_LEASE).await,
            Claim::Completed { output: None, .. }
        ));
    }

    /// Replay through the store hands duplicates the very value, including `()`, `0`, `""`,
    /// `None`, `false` and empty collections (the values an earlier tool replayed as null).
    pub async fn replay_round_trips_edge_values(h: &impl Harness) {
        let store = h.store();
        let store = &*store;
        replay_twice(store, "unit", ()).await;
        replay_twice(store, "zero", 0u64).await;
        replay_twice(store, "negative", -1i64).await;
        replay_twice(store, "max", u64::MAX).await;
        replay_twice(store, "empty-string", String::new()).await;
        replay_twice(store, "none", None::<u32>).await;
        replay_twice(store, "some-zero", Some(0u32)).await;
        replay_twice(store, "false", false).await;
        replay_twice(store, "empty-vec", Vec::<u8>::new()).await;
        replay_twice(store, "empty-map", BTreeMap::<String, u32>::new()).await;
        replay_twice(store, "float", 0.1f64 + 0.2).await;
        replay_twice(store, "unicode", "é\u{1F600}\0".to_owned()).await;
        replay_twice(store, "tuple", (0u8, String::new(), false)).await;
        replay_twice(store, "result-err", Err::<u8, String>(String::new())).await;
    }

    /// `get` reads a record's fence, fingerprint and state.
    pub async fn get_reads_the_record(h: &impl Harness) {
        let store = h.store();
        let k = key("get");
        assert_eq!(store.get(&k).await.unwrap(), None);
        let one = fp(1);
        let Claim::Acquired { fence, .. } = claim_fp(&*store, &k, LONG_LEASE, Some(&one)).await else {
            panic!("acquire");
        };
        let record = store.get(&k).await.unwrap().expect("record");
        assert_eq!(record.key, k);
        assert_eq!(record.fence, fence);
        assert_eq!(record.fingerprint, Some(one));
        assert!(matches!(record.state, RecordState::InProgress { .. }));
        assert_eq!(
            complete(&*store, &k, fence, Some(b"x")).await,
            Fenced::Applied
        );
        match store.get(&k).await.unwrap().expect("record").state {
            RecordState::Completed {
                completed_at,
                expires_at,
                output,
            } => {
                assert_eq!(output.as_deref(), Some(&b"x"[..]));
                let kept = expires_at.duration_since(completed_at).unwrap();
                assert!(
                    kept.abs_diff(KEEP) < Duration::from_millis(10),
                    "kept {kept:?}"
                );
            }
            other => panic!("expected completed, got {other:?}"),
        }
    }

    /// Purge deletes lapsed claims and completions past `keep`, and nothing live.
    pub async fn purge_removes_only_expired_records(h: &impl Harness) {
        let store = h.store();
        let short = h.short_lease();
        let lapsed = key("purge-lapsed");
        let live = key("purge-live");
        let done_old = key("purge-done-old");
        let done_new = key("purge-done-new");
        let _ = acquire(&*store, &lapsed, short).await;
        let _ = acquire(&*store, &live, LONG_LEASE).await;
        let f = acquire(&*store, &done_old, LONG_LEASE).await;
        let _ = store
            .complete(
                &done_old,
                f,
                Completion {
                    output: None,
                    keep: short,
                },
            )
            .await
            .unwrap();
        let f = acquire(&*store, &done_new, LONG_LEASE).await;
        let _ = complete(&*store, &done_new, f, None).await;
        h.advance(past(short)).await;
        let purged = store.purge_expired(10_000).await.unwrap();
        assert!(purged >= 2, "purged {purged}");
        assert_eq!(store.get(&lapsed).await.unwrap(), None);
        assert_eq!(store.get(&done_old).await.unwrap(), None);
        assert!(store.get(&live).await.unwrap().is_some());
        assert!(store.get(&done_new).await.unwrap().is_some());
    }

    /// Purge deletes an expired record and nothing else of its key: the same key's record in
    /// another scope, still live, stays (deleting it would make a completed call new work).
    pub async fn purge_leaves_the_same_key_in_another_scope(h: &impl Harness) {
        let store = h.store();
        let short = h.short_lease();
        let lapsed = key("purge-scoped").with_scope("lapsing").unwrap();
        let done = key("purge-scoped").with_scope("kept").unwrap();
        let _ = acquire(&*store, &lapsed, short).await;
        let f = acquire(&*store, &done, LONG_LEASE).await;
        let _ = complete(&*store, &done, f, None).await;
        h.advance(past(short)).await;
        let purged = store.purge_expired(10_000).await.unwrap();
        assert!(purged >= 1, "purged {purged}");
        assert_eq!(store.get(&lapsed).await.unwrap(), None);
        assert!(
            matches!(
                store.get(&done).await.unwrap().map(|r| r.state),
                Some(RecordState::Completed { .. })
            ),
            "purging the lapsed record of one scope deleted the completed record of another"
        );
    }

    /// Purge deletes at most `limit` records per call.
    pub async fn purge_respects_its_limit(h: &impl Harness) {
        let store = h.store();
        let short = h.short_lease();
        for i in 0..10 {
            let _ = acquire(&*store, &key(&format!("purge-limit-{i}")), short).await;
        }
        h.advance(past(short)).await;
        assert_eq!(store.purge_expired(4).await.unwrap(), 4);
        let mut left = 0;
        for i in 0..10 {
            if store
                .get(&key(&format!("purge-limit-{i}")))
                .await
                .unwrap()
                .is_some()
            {
                left += 1;
            }
        }
        assert_eq!(left, 6);
    }

    /// A drain deletes every expired record in bounded batches, and reports each batch that
    /// deleted something as it goes (`idem purge` prints them): the reports add up to what it
    /// returns.
    pub async fn a_drain_reports_each_batch(h: &impl Harness) {
        let store = h.store();
        let short = h.short_lease();
        let keys: Vec<Key> = (0..10).map(|i| key(&format!("drain-{i}"))).collect();
        for k in &keys {
            let _ = acquire(&*store, k, short).await;
        }
        h.advance(past(short)).await;
        let mut batches = Vec::new();
        let total = store
            .purge_all_expired_reporting(4, &mut |n| batches.push(n))
            .await
            .unwrap();
        assert_eq!(batches.iter().sum::<u64>(), total, "{batches:?}");
        assert!(total >= 10, "purged {total}");
        // At most 4 records and 4 journal entries a batch.
        assert!(
            batches.len() >= 3 && batches.iter().all(|&n| (1..=8).contains(&n)),
            "{batches:?}"
        );
        for k in &keys {
            assert_eq!(store.get(k).await.unwrap(), None, "{k} was not purged");
        }
    }

    /// An abandoned claim (its caller went away) is freed without waiting for its lease.
    pub async fn abandon_frees_the_key(h: &impl Harness) {
        let store = h.store();
        let k = key("abandon");
        let fence = acquire(&*store, &k, LONG_LEASE).await;
        store.abandon(&k, fence);
        for _ in 0..200 {
            if store.get(&k).await.unwrap().is_none() {
                assert!(matches!(
                    claim(&*store, &k, LONG_LEASE).await,
                    Claim::Acquired { .. }
                ));
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("an abandoned claim must be freed promptly, not after its {LONG_LEASE:?} lease");
    }

    /// A call whose body succeeded is dropped (its task aborted, as a caller's timeout or a
    /// client that went away drops it) while its completion is on its way: the completion
    /// still goes through, so the next delivery is a duplicate and the work ran once.
    pub async fn a_call_dropped_during_its_completion_still_completes(h: &impl Harness) {
        let gated = Gated::new(h.store(), Step::Complete);
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let call = {
            let (store, runs) = (gated.clone(), runs.clone());
            tokio::spawn(async move {
                Call::new(&store, key("dropped-completing").as_str())
                    .run(async move {
                        runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        Ok::<_, std::io::Error>(())
                    })
                    .await
            })
        };
        gated.entered.notified().await; // the body returned; its completion waits at the gate
        call.abort();
        assert!(call.await.unwrap_err().is_cancelled());
        gated.open.add_permits(Semaphore::MAX_PERMITS / 2);
        let k = key("dropped-completing");
        let mut completed = false;
        for _ in 0..500 {
            if let Some(record) = gated.inner.get(&k).await.unwrap() {
                if matches!(record.state, RecordState::Completed { .. }) {
                    completed = true;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(completed, "the dropped call's completion must still be recorded");
        let again = Call::new(&gated, k.as_str())
            .run(async { Ok::<_, std::io::Error>(()) })
            .await
            .unwrap();
        assert!(again.is_duplicate(), "the next delivery is a duplicate: {again:?}");
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A call is dropped while its claim's answer is on its way back (the store applied it):
    /// the claim is undone, so the next delivery runs at once instead of finding the key held
    /// for nobody until the lease lapses. The answer is held by a wrapper (`Gated`), which
    /// undoes it as any wrapper must (see its `abandon_claim`): this checks that the store
    /// answers a claim sent again with its token as the first, and releases it. A claim
    /// dropped inside the store itself is `a_call_dropped_anywhere_in_its_claim_holds_no_key`.
    pub async fn a_call_dropped_while_its_claim_is_answered_holds_no_key(h: &impl Harness) {
        let gated = Gated::new(h.store(), Step::Claim);
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let call = {
            let (store, runs) = (gated.clone(), runs.clone());
            tokio::spawn(async move {
                Call::new(&store, key("dropped-claiming").as_str())
                    .lease(LONG_LEASE)
                    .run(async move {
                        runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        Ok::<_, std::io::Error>(())
                    })
                    .await
            })
        };
        gated.entered.notified().await; // claimed in the store; the answer waits at the gate
        call.abort();
        assert!(call.await.unwrap_err().is_cancelled());
        gated.open.add_permits(Semaphore::MAX_PERMITS / 2);
        let k = key("dropped-claiming");
        let mut freed = false;
        for _ in 0..500 {
            if gated.inner.get(&k).await.unwrap().is_none() {
                freed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(freed, "a claim whose caller went away must be undone, not held for a lease");
        let again = Call::new(&gated, k.as_str())
            .run(async { Ok::<_, std::io::Error>(()) })
            .await
            .unwrap();
        assert_eq!(again, Outcome::Executed(()));
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    /// A call is dropped inside the store's own claim, at each point where it waits in turn
    /// (after its first poll, after its first wake-up, and so on until its body has started):
    /// whatever the store had sent or applied by then, the key is free again within seconds
    /// while the claim's lease is ten minutes, by the store's own `abandon_claim` (or, once
    /// the claim was answered, its `abandon`). A store whose undo is missing or misses a point
    /// leaves the key held for nobody and fails here. A drop lands only where the call is
    /// polled: a store whose answer can be lost between its send and its caller's next poll
    /// (PostgreSQL's batches) tests that window itself
    /// (`a_claim_acquired_for_a_caller_that_left_is_released`).
    pub async fn a_call_dropped_anywhere_in_its_claim_holds_no_key(h: &impl Harness) {
        let store = h.store();
        for point in 1..=64usize {
            let k = key(&format!("dropped-inside-{point}"));
            let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let call = {
                let (store, k, started) = (store.clone(), k.clone(), started.clone());
                async move {
                    Call::new(&*store, k.as_str())
                        .lease(LONG_LEASE)
                        .run(async move {
                            started.store(true, std::sync::atomic::Ordering::SeqCst);
                            // Never ends, and wakes itself: the drop lands in the body if
                            // its poll comes after the claim's.
                            loop {
                                tokio::task::yield_now().await;
                            }
                            #[allow(unreachable_code)]
                            Ok::<(), std::io::Error>(())
                        })
                        .await
                }
            };
            let finished = crate::drop_at_poll(call, point).await;
            assert!(finished.is_none(), "the body never ends, so the call cannot: {finished:?}");
            let reached_body = started.load(std::sync::atomic::Ordering::SeqCst);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let again = Call::new(&*store, k.as_str())
                    .lease(LONG_LEASE)
                    .run(async { Ok::<_, std::io::Error>(()) })
                    .await
                    .unwrap_or_else(|e| {
                        panic!("after a call dropped at poll {point} of its claim: {e}")
                    });
                match again {
                    Outcome::Executed(()) => break,
                    Outcome::InProgress { .. } if tokio::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(10)).await
                    }
                    other => panic!(
                        "a call dropped at poll {point} of its claim left {k} held for nobody \
                         (its lease is {LONG_LEASE:?}): {other:?}"
                    ),
                }
            }
            if reached_body {
                return;
            }
        }
        panic!("a call's claim that waits more than 64 times never reached its body");
    }

    /// 64 concurrent claims of one key: exactly one acquires, the rest see it in progress.
    pub async fn concurrent_claims_acquire_exactly_once(h: &impl Harness) {
        let store: Arc<dyn Store> = h.store();
        for round in 0..5 {
            let k = key(&format!("race-{round}"));
            let barrier = Arc::new(tokio::sync::Barrier::new(64));
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let (store, k, barrier) = (store.clone(), k.clone(), barrier.clone());
                    tokio::spawn(async move {
                        barrier.wait().await;
                        claim(&*store, &k, LONG_LEASE).await
                    })
                })
                .collect();
            let mut fences = HashSet::new();
            let mut in_progress = 0;
            for task in tasks {
                match task.await.expect("task") {
                    Claim::Acquired { fence, .. } => {
                        fences.insert(fence);
                    }
                    Claim::InProgress { .. } => in_progress += 1,
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(fences.len(), 1, "exactly one of 64 claims acquires");
            assert_eq!(in_progress, 63);
        }
    }

    /// Many concurrent claims and completions over many keys (a store may send them together,
    /// as `PgStore` batches them): each is answered as if it had been alone. Every fresh key is
    /// acquired exactly once, each duplicate gets its own key's output (never another's), a
    /// reused key with another fingerprint is a mismatch, and every completion applies under its
    /// own fence only.
    pub async fn concurrent_calls_on_many_keys_each_get_their_own_answer(h: &impl Harness) {
        const KEYS: usize = 60;
        let store: Arc<dyn Store> = h.store();
        // Keys `done-i` completed beforehand with output `i`; keys `fp-i` held with fingerprint 1.
        for i in 0..KEYS {
            let done = key(&format!("many-done-{i}"));
            let fence = acquire(&*store, &done, LONG_LEASE).await;
            let output = i.to_string();
            assert_eq!(
                complete(&*store, &done, fence, Some(output.as_bytes())).await,
                Fenced::Applied
            );
            let held = key(&format!("many-fp-{i}"));
            assert!(matches!(
                claim_fp(&*store, &held, LONG_LEASE, Some(&fp(1))).await,
                Claim::Acquired { .. }
            ));
        }
        #[derive(Debug)]
        enum Asked {
            Fresh(usize),
            Done(usize),
            OtherFingerprint(usize),
        }
        let mut asks = Vec::new();
        for i in 0..KEYS {
            asks.extend([Asked::Fresh(i), Asked::Fresh(i), Asked::Done(i)]);
            asks.extend([Asked::OtherFingerprint(i), Asked::Fresh(i)]);
        }
        let barrier = Arc::new(tokio::sync::Barrier::new(asks.len()));
        let tasks: Vec<_> = asks
            .into_iter()
            .map(|asked| {
                let (store, barrier) = (store.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    let (k, fingerprint) = match asked {
                        Asked::Fresh(i) => (key(&format!("many-fresh-{i}")), None),
                        Asked::Done(i) => (key(&format!("many-done-{i}")), None),
                        Asked::OtherFingerprint(i) => (key(&format!("many-fp-{i}")), Some(fp(2))),
                    };
                    let claimed = claim_fp(&*store, &k, LONG_LEASE, fingerprint.as_ref()).await;
                    // A fresh key's winner completes at once, with its key's name as output,
                    // while other claims are still in flight.
                    let completed = match (&asked, &claimed) {
                        (Asked::Fresh(i), Claim::Acquired { fence, .. }) => {
                            let output = format!("fresh-{i}");
                            Some(complete(&*store, &k, *fence, Some(output.as_bytes())).await)
                        }
                        _ => None,
                    };
                    (asked, claimed, completed)
                })
            })
            .collect();
        let mut acquired = vec![0; KEYS];
        for task in tasks {
            let (asked, claimed, completed) = task.await.expect("task");
            match (&asked, &claimed) {
                (Asked::Fresh(i), Claim::Acquired { .. }) => {
                    acquired[*i] += 1;
                    assert_eq!(completed, Some(Fenced::Applied), "{asked:?}");
                }
                (Asked::Fresh(_), Claim::InProgress { .. }) => {}
                (Asked::Fresh(i), Claim::Completed { output, .. }) => {
                    assert_eq!(output.as_deref(), Some(format!("fresh-{i}").as_bytes()));
                }
                (Asked::Done(i), Claim::Completed { output, .. }) => assert_eq!(
                    output.as_deref(),
                    Some(i.to_string().as_bytes()),
                    "a duplicate gets its own key's output"
                ),
                (Asked::OtherFingerprint(_), Claim::Mismatch) => {}
                _ => panic!("{asked:?} was answered {claimed:?}"),
            }
        }
        assert!(
            acquired.iter().all(|&n| n == 1),
            "each fresh key is acquired exactly once: {acquired:?}"
        );
        for i in 0..KEYS {
            let record = store
                .get(&key(&format!("many-fresh-{i}")))
                .await
                .unwrap()
                .expect("the fresh key has a record");
            assert!(
                matches!(&record.state, RecordState::Completed { output: Some(o), .. } if o == format!("fresh-{i}").as_bytes()),
                "fresh-{i}: {record:?}"
            );
        }
    }

    /// The journal stores an intent, then the completion with its output, per named effect.
    pub async fn effect_journal_records_intent_then_completion(h: &impl Harness) {
        let store = h.store();
        let k = key("journal");
        let fence = acquire(&*store, &k, LONG_LEASE).await;
        assert_eq!(store.effect(&k, "send").await.unwrap(), None);
        let started = record(&*store, &k, fence, "send", EffectState::Started, None, KEEP).await;
        assert_eq!(started, Fenced::Applied);
        let entry = store.effect(&k, "send").await.unwrap().expect("entry");
        assert_eq!((entry.state, entry.fence), (EffectState::Started, fence));
        let done = record_done(&*store, &k, fence, "send", b"\"ok\"").await;
        assert_eq!(done, Fenced::Applied);
        let entry = store.effect(&k, "send").await.unwrap().expect("entry");
        assert_eq!(entry.state, EffectState::Done);
        assert_eq!(entry.output.as_deref(), Some(&b"\"ok\""[..]));
        assert_eq!(
            store.effect(&k, "other").await.unwrap(),
            None,
            "entries are per effect"
        );
    }

    /// A done entry is final: nothing overwrites it.
    pub async fn a_done_effect_is_final(h: &impl Harness) {
        let store = h.store();
        let k = key("journal-final");
        let fence = acquire(&*store, &k, LONG_LEASE).await;
        let _ = record_done(&*store, &k, fence, "send", b"1").await;
        let again = record(&*store, &k, fence, "send", EffectState::Started, None, KEEP).await;
        assert_eq!(again, Fenced::Lost);
        let entry = store.effect(&k, "send").await.unwrap().unwrap();
        assert_eq!(
            (entry.state, entry.output.as_deref()),
            (EffectState::Done, Some(&b"1"[..]))
        );
    }

    /// A run that lost its claim cannot write to the journal; the newer run can.
    pub async fn effect_records_are_fenced(h: &impl Harness) {
        let store = h.store();
        let k = key("journal-fence");
        let lease = h.short_lease();
        let stale = acquire(&*store, &k, lease).await;
        h.advance(past(lease)).await;
        let fresh = acquire(&*store, &k, LONG_LEASE).await;
        let late = record_done(&*store, &k, stale, "send", b"1").await;
        assert_eq!(
            late,
            Fenced::Lost,
            "a stale fence must not record an effect"
        );
        let now = record_done(&*store, &k, fresh, "send", b"2").await;
        assert_eq!(now, Fenced::Applied);
        assert_eq!(complete(&*store, &k, fresh, None).await, Fenced::Applied);
        let after = record(&*store, &k, fresh, "other", EffectState::Done, None, KEEP).await;
        assert_eq!(after, Fenced::Lost, "no journal writes after completion");
    }

    /// The journal outlives a release: the retry of failed work sees what the failed run did.
    pub async fn effects_outlive_a_release(h: &impl Harness) {
        let store = h.store();
        let k = key("journal-release");
        let fence = acquire(&*store, &k, LONG_LEASE).await;
        let _ = record_done(&*store, &k, fence, "send", b"1").await;
        assert_eq!(store.release(&k, fence).await.unwrap(), Fenced::Applied);
        let _ = acquire(&*store, &k, LONG_LEASE).await;
        let entry = store
            .effect(&k, "send")
            .await
            .unwrap()
            .expect("kept across the release");
        assert_eq!(entry.state, EffectState::Done);
    }

    /// Journal entries expire after their own `keep`, and purge deletes them.
    pub async fn expired_effects_are_purged(h: &impl Harness) {
        let store = h.store();
        let k = key("journal-expiry");
        let keep = h.short_lease();
        let fence = acquire(&*store, &k, LONG_LEASE).await;
        let _ = record(
            &*store,
            &k,
            fence,
            "send",
            EffectState::Done,
            Some(b"1"),
            keep,
        )
        .await;
        h.advance(past(keep)).await;
        assert_eq!(store.effect(&k, "send").await.unwrap(), None, "expired");
        assert!(store.purge_expired(100).await.unwrap() >= 1);
    }
}

/// The step a [`Gated`] store holds at its gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The first claim, after the store applied it (its answer on its way back).
    Claim,
    /// Every completion, before the store applies it.
    Complete,
}

/// A store that holds one step at a gate (`open`) after saying so (`entered`): a test can drop
/// a call at that step.
#[derive(Debug, Clone)]
struct Gated {
    inner: Arc<dyn idem_core::Purge>,
    step: Step,
    /// Whether the gate still holds a claim (only the first is held).
    claim_armed: Arc<std::sync::atomic::AtomicBool>,
    entered: Arc<tokio::sync::Notify>,
    open: Arc<Semaphore>,
}

impl Gated {
    fn new(inner: Arc<dyn idem_core::Purge>, step: Step) -> Gated {
        Gated {
            inner,
            step,
            claim_armed: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            entered: Arc::new(tokio::sync::Notify::new()),
            open: Arc::new(Semaphore::new(0)),
        }
    }

    async fn pass(&self) {
        self.entered.notify_one();
        let _open = self.open.acquire().await.expect("never closed");
    }
}

#[async_trait::async_trait]
impl Store for Gated {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, idem_core::StoreError> {
        let claim = self.inner.claim(request).await;
        let armed = self.step == Step::Claim
            && self
                .claim_armed
                .swap(false, std::sync::atomic::Ordering::SeqCst);
        if armed {
            self.pass().await;
        }
        claim
    }

    async fn complete(
        &self,
        key: &Key,
        fence: Fence,
        completion: Completion<'_>,
    ) -> Result<Fenced, idem_core::StoreError> {
        if self.step == Step::Complete {
            self.pass().await;
        }
        self.inner.complete(key, fence, completion).await
    }

    async fn release(&self, key: &Key, fence: Fence) -> Result<Fenced, idem_core::StoreError> {
        self.inner.release(key, fence).await
    }

    async fn renew(
        &self,
        key: &Key,
        fence: Fence,
        lease: Duration,
    ) -> Result<Fenced, idem_core::StoreError> {
        self.inner.renew(key, fence, lease).await
    }

    async fn get(&self, key: &Key) -> Result<Option<idem_core::Record>, idem_core::StoreError> {
        self.inner.get(key).await
    }

    fn shared(&self) -> Arc<dyn Store> {
        Arc::new(self.clone())
    }

    fn abandon(&self, key: &Key, fence: Fence) {
        self.inner.abandon(key, fence)
    }

    /// A wrapper with the inner store's answer in hand, its caller gone, frees the key itself:
    /// it sends the claim again with its token (answered as the first) and releases it, as
    /// `reclaim_and_release_in_background` does. It does not forward: the inner store answered
    /// the claim and may rightly do nothing (PostgreSQL's batches undo only claims whose
    /// answer never reached their caller), leaving the key held for nobody until its lease
    /// lapses.
    fn abandon_claim(&self, request: ClaimRequest<'_>) {
        idem_core::reclaim_and_release_in_background(self.shared(), request);
    }
}
