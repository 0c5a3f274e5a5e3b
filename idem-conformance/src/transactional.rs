//! The rules of [`TransactionalStore`], one function each, declared once in the
//! [`declare_cases!`](crate::declare_cases) block below: the claim, the completion and the
//! roll-back of transactional mode, checked on the store's own records.

use std::time::Duration;

use idem_core::{
    Claim, ClaimRequest, Completion, Fence, Fenced, Key, Store, TransactionalStore, TxClaim,
};

use crate::TransactionalHarness;

const LEASE: Duration = Duration::from_secs(600);
const KEEP: Duration = Duration::from_secs(3600);

fn key(name: &str) -> Key {
    Key::new(format!("tx-conformance:{name}")).expect("valid key")
}

fn request(key: &Key) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        fingerprint: None,
        lease: LEASE,
        token: None,
    }
}

fn completion(output: Option<&[u8]>) -> Completion<'_> {
    Completion { output, keep: KEEP }
}

async fn claim_in_tx<S: TransactionalStore>(store: &S, key: &Key) -> TxClaim<S::Transaction> {
    store
        .claim_in_transaction(request(key), KEEP)
        .await
        .expect("claim in a transaction succeeds")
}

/// The open transaction and fence of an acquired claim.
async fn acquire_in_tx<S: TransactionalStore>(store: &S, key: &Key) -> (S::Transaction, Fence) {
    match claim_in_tx(store, key).await {
        TxClaim {
            claim: Claim::Acquired { fence, .. },
            transaction: Some(tx),
        } => (tx, fence),
        TxClaim { claim, transaction } => panic!(
            "a fresh key must be acquired with an open transaction, got {claim:?} (transaction: {})",
            transaction.is_some()
        ),
    }
}

async fn lease_claim<S: Store>(store: &S, key: &Key) -> Claim {
    store.claim(request(key)).await.expect("claim succeeds")
}

crate::declare_cases! { $ __transactional_cases:
    /// A committed completion is what later claims see, with its output.
    pub async fn committed_completion_is_a_duplicate(h: &impl TransactionalHarness) {
        let store = h.store();
        let k = key("commit");
        let (tx, fence) = acquire_in_tx(&store, &k).await;
        let committed = store
            .commit_completion(tx, &k, fence, completion(Some(b"7")))
            .await
            .expect("commit succeeds");
        assert_eq!(committed, Fenced::Applied);
        match lease_claim(&store, &k).await {
            Claim::Completed { output, .. } => assert_eq!(output.as_deref(), Some(&b"7"[..])),
            other => panic!("a committed completion must be a duplicate, got {other:?}"),
        }
    }

    /// Rolling back undoes the claim: the key is free at once.
    pub async fn roll_back_frees_the_key(h: &impl TransactionalHarness) {
        let store = h.store();
        let k = key("roll-back");
        let (tx, _) = acquire_in_tx(&store, &k).await;
        store.roll_back(tx).await.expect("roll back succeeds");
        assert!(
            matches!(lease_claim(&store, &k).await, Claim::Acquired { .. }),
            "a rolled-back claim leaves the key free"
        );
    }

    /// A transaction dropped without a commit (a panicking body, a dropped call) rolls back.
    pub async fn dropped_transaction_rolls_back(h: &impl TransactionalHarness) {
        let store = h.store();
        let k = key("dropped");
        let (tx, _) = acquire_in_tx(&store, &k).await;
        drop(tx);
        assert!(
            matches!(lease_claim(&store, &k).await, Claim::Acquired { .. }),
            "a dropped transaction leaves the key free"
        );
    }

    /// A completed key is answered as a duplicate, with no transaction left open.
    pub async fn duplicate_is_answered_without_a_transaction(h: &impl TransactionalHarness) {
        let store = h.store();
        let k = key("duplicate");
        let Claim::Acquired { fence, .. } = lease_claim(&store, &k).await else {
            panic!("a fresh key must be acquired");
        };
        let _ = store.complete(&k, fence, completion(None)).await.unwrap();
        let TxClaim { claim, transaction } = claim_in_tx(&store, &k).await;
        assert!(matches!(claim, Claim::Completed { .. }), "got {claim:?}");
        assert!(transaction.is_none(), "no transaction stays open for a duplicate");
    }

    /// A key held by a live run elsewhere is in progress, with no transaction left open.
    pub async fn live_claim_is_in_progress_without_a_transaction(
        h: &impl TransactionalHarness
    ) {
        let store = h.store();
        let k = key("busy");
        assert!(matches!(lease_claim(&store, &k).await, Claim::Acquired { .. }));
        let TxClaim { claim, transaction } = claim_in_tx(&store, &k).await;
        assert!(matches!(claim, Claim::InProgress { .. }), "got {claim:?}");
        assert!(transaction.is_none(), "no transaction stays open for a run in progress");
    }

    /// A commit under a fence the record does not hold applies nothing and rolls back.
    pub async fn stale_commit_is_fenced_out(h: &impl TransactionalHarness) {
        let store = h.store();
        let k = key("stale");
        let (tx, fence) = acquire_in_tx(&store, &k).await;
        let stale = Fence(fence.0 + 1_000_000);
        let committed = store
            .commit_completion(tx, &k, stale, completion(None))
            .await
            .expect("commit succeeds");
        assert_eq!(committed, Fenced::Lost);
        assert!(
            matches!(lease_claim(&store, &k).await, Claim::Acquired { .. }),
            "a fenced-out commit rolls the claim back"
        );
    }

    /// A claim in a second transaction waits for the first and then sees its outcome: of two
    /// concurrent transactional calls, one runs and the other is a duplicate.
    pub async fn concurrent_transactional_claims_run_once(h: &impl TransactionalHarness) {
        let store = h.store();
        let k = key("race");
        let (tx, fence) = acquire_in_tx(&store, &k).await;
        let second = {
            let (store, k) = (store.clone(), k.clone());
            tokio::spawn(async move {
                let TxClaim { claim, transaction } = claim_in_tx(&store, &k).await;
                if let Some(tx) = transaction {
                    store.roll_back(tx).await.unwrap();
                }
                claim
            })
        };
        let committed = store
            .commit_completion(tx, &k, fence, completion(None))
            .await
            .unwrap();
        assert_eq!(committed, Fenced::Applied);
        let claim = second.await.expect("second claim");
        assert!(
            matches!(claim, Claim::Completed { .. } | Claim::InProgress { .. }),
            "the second claim must not acquire a key the first holds or completed, got {claim:?}"
        );
    }
}
