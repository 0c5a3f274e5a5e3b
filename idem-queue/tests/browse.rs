//! Browsing the queue against a real PostgreSQL: a page reads at most its query's `scan` jobs,
//! in key order and along the finished jobs' index, and the next page goes on from the last
//! job read, so walking the pages still finds every match once.

mod support;

use idem_queue::{JobFilter, JobsQuery, NewJob};
use idem_store_postgres::sqlx;
use serde_json::json;
use support::TestStore;

/// Walks every page of `query`; the keys found and the number of pages.
async fn walk(queue: &idem_queue::Queue, query: &JobsQuery) -> (Vec<String>, usize) {
    let (mut found, mut after, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let page = queue.jobs_page(query, after.as_deref()).await.unwrap();
        found.extend(page.jobs.iter().map(|job| job.key.clone()));
        pages += 1;
        assert!(pages <= 20, "the pages never end");
        match page.next {
            Some(next) => after = Some(next),
            None => return (found, pages),
        }
    }
}

#[tokio::test]
async fn a_page_of_jobs_stops_reading_at_its_scan_and_the_next_goes_on() {
    let test = TestStore::new("idem_t_browse", 4).await;
    let queue = support::queue(&test).await;
    for i in 0..9 {
        let name = if i == 4 || i == 7 { "rare" } else { "default" };
        let job = NewJob::new(format!("job:{i}"), &json!({}))
            .unwrap()
            .queue(name);
        let _ = queue.enqueue(job).await.unwrap();
    }
    let rare = JobsQuery {
        queue: Some("rare".into()),
        limit: 10,
        scan: 3,
        ..JobsQuery::default()
    };
    let first = queue.jobs_page(&rare, None).await.unwrap();
    assert!(first.jobs.is_empty(), "read past its scan: {first:?}");
    assert_eq!(first.next.as_deref(), Some("job:2"), "the last job read");
    assert_eq!(walk(&queue, &rare).await.0, ["job:4", "job:7"]);

    // Finished jobs, newest first along their index: the same.
    sqlx::raw_sql(&format!(
        "UPDATE \"{}\".idem_records_queue
         SET state = 'done', finished_at = now() - (substr(key, 5)::int * interval '1 minute')",
        test.schema
    ))
    .execute(test.store.pool())
    .await
    .unwrap();
    let done = JobsQuery {
        state: Some(JobFilter::Done),
        ..rare.clone()
    };
    let first = queue.jobs_page(&done, None).await.unwrap();
    assert!(first.jobs.is_empty(), "read past its scan: {first:?}");
    assert!(first.next.is_some_and(|n| n.ends_with(":job:2")));
    assert_eq!(walk(&queue, &done).await.0, ["job:4", "job:7"]);

    // Without a filter a page is full long before its scan, and the walk ends.
    let all = JobsQuery {
        limit: 4,
        ..JobsQuery::default()
    };
    let (found, pages) = walk(&queue, &all).await;
    assert_eq!(found.len(), 9);
    assert_eq!(pages, 3);
}

/// A page dropped at each point where it waits (the dashboard's browser went away, its
/// `BEGIN` on the way included) leaves no connection of the pool inside its read-only
/// snapshot, where every write of the application's that the connection carried next would
/// fail.
#[tokio::test]
async fn a_page_dropped_as_it_begins_leaves_no_pooled_connection_in_a_transaction() {
    let test = TestStore::through_pool("idem_t_browse_drop", 2).await;
    let queue = support::queue(&test).await;
    let probe =
        idem_store_postgres::testing::PoolProbe::create(test.store.pool(), 2, &test.schema).await;
    for point in 1..=64usize {
        let query = JobsQuery::default();
        let finished = idem_conformance::drop_at_poll(queue.jobs_page(&query, None), point).await;
        probe.assert_all_commit(point as i32).await;
        if let Some(page) = finished {
            page.expect("the page is read");
            return;
        }
    }
    panic!("a page that waits more than 64 times never finished");
}
