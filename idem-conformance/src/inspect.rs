//! The rules of [`Inspect`](idem_core::Inspect), one function each, declared once in the
//! [`declare_cases!`](crate::declare_cases) block below: what a store tells its operator agrees
//! with what its runtime wrote.

use std::time::{Duration, SystemTime};

use idem_core::{
    Claim, ClaimRequest, ClaimToken, Completion, EffectRecord, EffectState, Fence, Key,
    RecordCursor, RecordFilter, RecordStatus, Store,
};

use crate::InspectHarness;

const LONG_LEASE: Duration = Duration::from_secs(600);
const KEEP: Duration = Duration::from_secs(3600);

fn key(name: &str, scope: &str) -> Key {
    Key::new(format!("inspect:{name}"))
        .and_then(|k| k.with_scope(scope.to_owned()))
        .expect("valid key")
}

async fn acquire(store: &dyn Store, key: &Key, lease: Duration) -> Fence {
    match store
        .claim(ClaimRequest {
            key,
            fingerprint: None,
            lease,
            token: Some(ClaimToken::random()),
        })
        .await
        .expect("claim succeeds")
    {
        Claim::Acquired { fence, .. } => fence,
        other => panic!("a fresh key must be acquired, got {other:?}"),
    }
}

async fn completed(store: &dyn Store, key: &Key, output: &[u8]) -> Fence {
    let fence = acquire(store, key, LONG_LEASE).await;
    let done = store
        .complete(
            key,
            fence,
            Completion {
                output: Some(output),
                keep: KEEP,
            },
        )
        .await
        .expect("complete succeeds");
    assert_eq!(done, idem_core::Fenced::Applied);
    fence
}

crate::declare_cases! { $ __inspect_cases:
    /// A key's records in every scope, by scope: a claim with its holder, a completion with its
    /// output's size; and in one scope only when asked.
    pub async fn find_reads_a_keys_records_by_scope(h: &impl InspectHarness) {
        let (store, inspector) = (h.store(), h.inspector());
        let claimed = key("find", "a-scope");
        let done = key("find", "b-scope");
        let fence = acquire(&*store, &claimed, LONG_LEASE).await;
        completed(&*store, &done, b"12345").await;
        let now = SystemTime::now();
        let found = inspector.find(claimed.as_str(), None).await.unwrap();
        let scopes: Vec<&str> = found.iter().map(|r| r.record.key.scope()).collect();
        assert_eq!(scopes, ["a-scope", "b-scope"], "every scope, in order");
        assert_eq!(found[0].status(now), RecordStatus::Claimed);
        assert_eq!(found[0].record.fence, fence);
        assert_eq!(found[0].holder.as_deref(), Some(idem_core::holder()));
        assert_eq!(found[1].status(now), RecordStatus::Completed);
        assert_eq!(found[1].output_bytes, Some(5));
        let one = inspector.find(claimed.as_str(), Some("b-scope")).await.unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].record.key, done);
        assert!(inspector.find("inspect:none", None).await.unwrap().is_empty());
    }

    /// A listing filters by status, scope and key prefix, newest first, up to its limit.
    pub async fn list_filters_and_orders_newest_first(h: &impl InspectHarness) {
        let (store, inspector) = (h.store(), h.inspector());
        for i in 0..3 {
            completed(&*store, &key(&format!("list-done-{i}"), "list"), b"").await;
        }
        acquire(&*store, &key("list-claimed", "list"), LONG_LEASE).await;
        acquire(&*store, &key("list-other", "elsewhere"), LONG_LEASE).await;
        let listed = |filter: RecordFilter| {
            let inspector = inspector.clone();
            async move {
                inspector
                    .list(&filter)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|r| r.record.key.as_str().to_owned())
                    .collect::<Vec<_>>()
            }
        };
        let in_scope = |status| RecordFilter {
            status,
            scope: Some("list".into()),
            key_prefix: Some("inspect:list-".into()),
            limit: 10,
            ..RecordFilter::default()
        };
        let done = listed(in_scope(Some(RecordStatus::Completed))).await;
        assert_eq!(done.len(), 3);
        assert!(done.iter().all(|k| k.starts_with("inspect:list-done-")));
        assert_eq!(
            listed(in_scope(Some(RecordStatus::Claimed))).await,
            ["inspect:list-claimed"]
        );
        let all = listed(in_scope(None)).await;
        assert_eq!(all.len(), 4, "the other scope is left out: {all:?}");
        assert_eq!(all[0], "inspect:list-claimed", "a live lease ends after every completion");
        let limited = RecordFilter {
            limit: 2,
            ..in_scope(None)
        };
        assert_eq!(listed(limited).await.len(), 2);
    }

    /// Pages walk the records in (key, scope) order: each starts just after the last record
    /// of the one before, so together they hold every record once; filters apply to each page.
    pub async fn pages_walk_records_in_key_order_from_a_cursor(h: &impl InspectHarness) {
        let (store, inspector) = (h.store(), h.inspector());
        for name in ["page-c", "page-a", "page-e", "page-b"] {
            completed(&*store, &key(name, "page"), b"").await;
        }
        completed(&*store, &key("page-c", "page-other"), b"").await;
        acquire(&*store, &key("page-d", "page"), LONG_LEASE).await;
        let filter = RecordFilter {
            key_prefix: Some("inspect:page-".into()),
            limit: 2,
            ..RecordFilter::default()
        };
        let mut seen = Vec::new();
        let mut after: Option<RecordCursor> = None;
        loop {
            let page = inspector.page(&filter, after.as_ref()).await.unwrap();
            assert!(page.records.len() <= 2);
            seen.extend(page.records.iter().map(|r| {
                format!("{}/{}", r.record.key.as_str(), r.record.key.scope())
            }));
            assert!(seen.len() <= 6, "pages repeat: {seen:?}");
            let Some(next) = page.next else { break };
            assert_eq!(
                page.records.last().map(|r| r.record.key.as_str().to_owned()),
                Some(next.key.clone()),
                "a full page ends at its last record"
            );
            after = Some(next);
        }
        assert_eq!(
            seen,
            [
                "inspect:page-a/page",
                "inspect:page-b/page",
                "inspect:page-c/page",
                "inspect:page-c/page-other",
                "inspect:page-d/page",
                "inspect:page-e/page",
            ]
        );
        let claimed = RecordFilter {
            status: Some(RecordStatus::Claimed),
            limit: 10,
            ..filter.clone()
        };
        let page = inspector.page(&claimed, None).await.unwrap();
        assert_eq!(page.records.len(), 1);
        assert_eq!(page.records[0].record.key, key("page-d", "page"));
        assert_eq!(page.next, None, "a page that is not full reached the end");
        let other = RecordFilter {
            scope: Some("page-other".into()),
            limit: 10,
            ..filter
        };
        assert_eq!(inspector.page(&other, None).await.unwrap().records.len(), 1);
    }

    /// A page reads at most its filter's `scan` records: a filter of rare matches stops there
    /// before the page is full, and the next page goes on from the last record read, so that
    /// walking the pages still finds every match once.
    pub async fn a_page_stops_reading_at_its_scan_and_the_next_goes_on(h: &impl InspectHarness) {
        let (store, inspector) = (h.store(), h.inspector());
        for name in ["scan-a", "scan-b", "scan-c", "scan-d", "scan-e", "scan-f", "scan-g"] {
            completed(&*store, &key(name, "scan"), b"").await;
        }
        acquire(&*store, &key("scan-h", "scan"), LONG_LEASE).await;
        acquire(&*store, &key("scan-e2", "scan"), LONG_LEASE).await;
        let claimed = RecordFilter {
            status: Some(RecordStatus::Claimed),
            key_prefix: Some("inspect:scan-".into()),
            limit: 10,
            scan: 3,
            ..RecordFilter::default()
        };
        let first = inspector.page(&claimed, None).await.unwrap();
        if h.pages_stop_at_their_scan() {
            assert!(first.records.is_empty(), "read past its scan: {first:?}");
            assert_eq!(
                first.next.as_ref().map(|c| c.key.as_str()),
                Some("inspect:scan-c"),
                "the next page starts after the last record read"
            );
        }
        let (mut found, mut after, mut pages) = (Vec::new(), None, 0);
        loop {
            let page = inspector.page(&claimed, after.as_ref()).await.unwrap();
            found.extend(page.records.iter().map(|r| r.record.key.as_str().to_owned()));
            pages += 1;
            assert!(pages <= 10, "the pages never end");
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(found, ["inspect:scan-e2", "inspect:scan-h"]);
    }

    /// A summary counts each scope's records by status, and the completions of each minute
    /// since the time asked about.
    pub async fn summary_counts_by_scope_status_and_minute(h: &impl InspectHarness) {
        let (store, inspector) = (h.store(), h.inspector());
        let before = SystemTime::now() - Duration::from_secs(120);
        completed(&*store, &key("sum-1", "sum-a"), b"").await;
        completed(&*store, &key("sum-2", "sum-a"), b"").await;
        acquire(&*store, &key("sum-3", "sum-a"), LONG_LEASE).await;
        completed(&*store, &key("sum-4", "sum-b"), b"").await;
        let summary = inspector.summary(before).await.unwrap();
        let scope = |name: &str| {
            summary
                .scopes
                .iter()
                .find(|s| s.scope == name)
                .cloned()
                .unwrap_or_else(|| panic!("no counts for {name}: {summary:?}"))
        };
        let a = scope("sum-a");
        assert_eq!((a.claimed, a.stale, a.completed, a.expired), (1, 0, 2, 0));
        assert_eq!(scope("sum-b").completed, 1);
        let minutes = &summary.completed_per_minute;
        assert!(minutes.iter().all(|(at, _)| *at + Duration::from_secs(60) > before));
        assert!(minutes.windows(2).all(|w| w[0].0 < w[1].0), "oldest first");
        assert!(minutes.iter().map(|(_, n)| n).sum::<u64>() >= 3, "{minutes:?}");
        let later = inspector.summary(SystemTime::now() + KEEP).await.unwrap();
        assert!(later.completed_per_minute.is_empty());
    }

    /// Forgetting deletes a completed record (its key is new work) and leaves a claim alone.
    pub async fn forget_deletes_completed_records_only(h: &impl InspectHarness) {
        let (store, inspector) = (h.store(), h.inspector());
        let done = key("forget-done", "forget");
        let claimed = key("forget-claimed", "forget");
        completed(&*store, &done, b"x").await;
        acquire(&*store, &claimed, LONG_LEASE).await;
        assert!(inspector.forget(&done).await.unwrap());
        assert!(store.get(&done).await.unwrap().is_none());
        assert!(!inspector.forget(&claimed).await.unwrap(), "a claim is released, not forgotten");
        assert!(store.get(&claimed).await.unwrap().is_some());
        assert!(!inspector.forget(&done).await.unwrap(), "nothing left to forget");
    }

    /// A key's journal lists each effect with its state and fence.
    pub async fn journal_lists_a_keys_effects(h: &impl InspectHarness) {
        let (store, inspector) = (h.store(), h.inspector());
        let k = key("journal", "journal");
        let fence = acquire(&*store, &k, LONG_LEASE).await;
        for (effect, state) in [("charge", EffectState::Done), ("email", EffectState::Started)] {
            let written = store
                .record_effect(
                    &k,
                    fence,
                    EffectRecord {
                        effect,
                        state,
                        output: Some(b"ok"),
                        keep: KEEP,
                    },
                )
                .await
                .unwrap();
            assert_eq!(written, idem_core::Fenced::Applied);
        }
        let mut entries = inspector.journal(k.as_str(), Some("journal")).await.unwrap();
        entries.sort_by(|a, b| a.effect.cmp(&b.effect));
        let seen: Vec<(&str, EffectState, Fence)> = entries
            .iter()
            .map(|e| (e.effect.as_str(), e.entry.state, e.entry.fence))
            .collect();
        assert_eq!(
            seen,
            [("charge", EffectState::Done, fence), ("email", EffectState::Started, fence)]
        );
        assert!(entries.iter().all(|e| e.scope == "journal"));
        assert_eq!(inspector.journal(k.as_str(), None).await.unwrap().len(), 2);
    }

    /// A claim whose lease lapsed is stale, and counted as due for a purge.
    pub async fn a_lapsed_claim_is_stale_and_counted_expired(h: &impl InspectHarness) {
        let (store, inspector) = (h.store(), h.inspector());
        let before = inspector.count_expired().await.unwrap().records;
        let k = key("lapsed", "lapsed");
        acquire(&*store, &k, h.short_lease()).await;
        h.advance(h.short_lease() + Duration::from_millis(200)).await;
        let found = inspector.find(k.as_str(), Some("lapsed")).await.unwrap();
        assert_eq!(found[0].status(SystemTime::now()), RecordStatus::Stale);
        let stale = RecordFilter {
            status: Some(RecordStatus::Stale),
            scope: Some("lapsed".into()),
            ..RecordFilter::default()
        };
        assert_eq!(inspector.list(&stale).await.unwrap().len(), 1);
        assert_eq!(inspector.count_expired().await.unwrap().records, before + 1);
    }

    /// Releasing a lapsed claim deletes it only while it holds the fence, is unfinished and
    /// its lease has lapsed: a live lease (one renewed since, say) and a completed record stay.
    /// `release_claim` without force goes through it.
    pub async fn release_lapsed_takes_only_a_lapsed_claim(h: &impl InspectHarness) {
        let (store, inspector) = (h.store(), h.inspector());
        let live = key("release-live", "release");
        let fence = acquire(&*store, &live, LONG_LEASE).await;
        assert_eq!(
            inspector.release_lapsed(&live, fence).await.unwrap(),
            idem_core::Fenced::Lost
        );
        assert!(store.get(&live).await.unwrap().is_some(), "a live lease stays");
        let done = key("release-done", "release");
        let done_fence = completed(&*store, &done, b"").await;
        assert_eq!(
            inspector.release_lapsed(&done, done_fence).await.unwrap(),
            idem_core::Fenced::Lost
        );
        let lapsed = key("release-lapsed", "release");
        let fence = acquire(&*store, &lapsed, h.short_lease()).await;
        h.advance(h.short_lease() + Duration::from_millis(200)).await;
        assert_eq!(
            inspector.release_lapsed(&lapsed, Fence(fence.0 + 1_000)).await.unwrap(),
            idem_core::Fenced::Lost,
            "another fence"
        );
        assert_eq!(
            idem_core::release_claim(&*inspector, &lapsed, fence, false).await.unwrap(),
            idem_core::Released::Released
        );
        assert!(store.get(&lapsed).await.unwrap().is_none());
        // Without force a live claim is refused, naming its holder; forced, it goes.
        let fence = store.get(&live).await.unwrap().expect("the live claim").fence;
        match idem_core::release_claim(&*inspector, &live, fence, false).await.unwrap() {
            idem_core::Released::Live { holder, left } => {
                assert_eq!(holder.as_deref(), Some(idem_core::holder()));
                assert!(left > Duration::ZERO);
            }
            other => panic!("a live claim must be refused, got {other:?}"),
        }
        assert_eq!(
            idem_core::release_claim(&*inspector, &live, fence, true).await.unwrap(),
            idem_core::Released::Released
        );
    }
}
