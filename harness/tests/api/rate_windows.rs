//! The shared sliding windows (`store::rate_windows`, PostgreSQL) on explicit instants: exact
//! up to `EXACT_UP_TO`, never over the limit above it, atomic across connection pools (as
//! nodes are), and swept once empty.

use crate::common::{Backend, database_url};
use billing::store::Store;
use billing::store::rate_windows::{EXACT_UP_TO, Take, Window};

const MINUTE: i64 = 60_000;
const T0: i64 = 1_800_000_000_000;

/// A migrated store on a fresh PostgreSQL schema, and its URL.
async fn store() -> Option<(Store, String)> {
    let url = database_url(Backend::Postgres).await?;
    let store = Store::connect(&url).await.expect("connect");
    store.migrate().await.expect("migrate");
    Some((store, url))
}

fn at(key: &str, limit: u64, at_ms: i64) -> Window<'_> {
    Window {
        key,
        limit,
        length_ms: MINUTE,
        at_ms: Some(at_ms),
    }
}

async fn take(store: &Store, key: &str, limit: u64, at_ms: i64) -> Take {
    store
        .take_rate_slot(at(key, limit, at_ms))
        .await
        .expect("take")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_admits_its_limit_and_frees_a_slot_when_the_oldest_leaves() {
    let Some((store, _)) = store().await else {
        return;
    };
    let taken = |at_ms| Take::Taken { at_ms };
    assert_eq!(take(&store, "k", 3, T0).await, taken(T0));
    assert_eq!(take(&store, "k", 3, T0 + 1000).await, taken(T0 + 1000));
    assert_eq!(take(&store, "k", 3, T0 + 1000).await, taken(T0 + 1000));
    assert_eq!(
        take(&store, "k", 3, T0 + 30_000).await,
        Take::Refused { wait_ms: 30_000 }
    );
    assert_eq!(
        take(&store, "k", 3, T0 + 59_999).await,
        Take::Refused { wait_ms: 1 }
    );
    // The first request leaves the window exactly a minute after it.
    assert_eq!(take(&store, "k", 3, T0 + MINUTE).await, taken(T0 + MINUTE));
    // The next two were at the same instant: both leave a second later.
    assert_eq!(
        take(&store, "k", 3, T0 + MINUTE + 500).await,
        Take::Refused { wait_ms: 500 }
    );
    // An operator lowering the limit is obeyed at once: with 3 in the window and a limit of
    // 2, a slot frees only once fewer than 2 are left (the two at T0 + 1 s leave together).
    assert_eq!(
        take(&store, "k", 2, T0 + MINUTE + 999).await,
        Take::Refused { wait_ms: 1 }
    );
    assert_eq!(
        take(&store, "k", 2, T0 + MINUTE + 1000).await,
        taken(T0 + MINUTE + 1000)
    );
    // Another key has its own window.
    assert_eq!(take(&store, "other", 1, T0).await, taken(T0));
}

/// Two stores are two connection pools, as two nodes have: their concurrent takes on one key
/// are serialized by the row, and exactly the limit gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_takes_from_two_nodes_admit_exactly_the_limit() {
    let Some((first, url)) = store().await else {
        return;
    };
    let second = Store::connect(&url).await.expect("connect");
    // Few enough that the two pools stay small: the machine's PostgreSQL takes 100 clients.
    let takes: Vec<_> = (0..30)
        .map(|i| {
            let store = if i % 2 == 0 {
                first.clone()
            } else {
                second.clone()
            };
            tokio::spawn(async move {
                let window = Window {
                    key: "busy",
                    limit: 10,
                    length_ms: MINUTE,
                    at_ms: None,
                };
                store.take_rate_slot(window).await.expect("take")
            })
        })
        .collect();
    let mut taken = 0;
    for take in takes {
        if let Take::Taken { .. } = take.await.expect("join") {
            taken += 1;
        }
    }
    assert_eq!(taken, 10);
}

/// Above `EXACT_UP_TO` instants are kept at `length / EXACT_UP_TO` resolution: the window
/// never admits more than its limit in any minute, and refuses only when the limit is reached
/// counting at most one slice further back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_limit_never_admits_more_and_refuses_at_most_one_slice_early() {
    let Some((store, _)) = store().await else {
        return;
    };
    let limit = 1_000u64;
    let slice = MINUTE / EXACT_UP_TO as i64;
    let mut accepted: Vec<i64> = Vec::new();
    let mut refused = 0;
    // Bursts of 40 requests 7 ms apart every 1.3 s for three minutes: more than the limit.
    let mut instants = Vec::new();
    for burst in 0..140i64 {
        for i in 0..40i64 {
            instants.push(T0 + burst * 1_300 + i * 7);
        }
    }
    for &now in &instants {
        let in_window = |from: i64| {
            accepted
                .iter()
                .filter(|&&at| at > from && at <= now)
                .count() as u64
        };
        match take(&store, "big", limit, now).await {
            Take::Taken { .. } => {
                assert!(in_window(now - MINUTE) < limit, "over the limit at {now}");
                accepted.push(now);
            }
            Take::Refused { wait_ms } => {
                refused += 1;
                assert!(
                    in_window(now - MINUTE - slice) >= limit,
                    "refused early at {now}"
                );
                assert!((1..=MINUTE).contains(&wait_ms), "wait {wait_ms}");
            }
        }
    }
    assert!(refused > 0, "the load exceeded the limit");
    assert!(accepted.len() as u64 > 2 * limit, "windows passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_whose_requests_all_left_are_swept() {
    let Some((store, _)) = store().await else {
        return;
    };
    take(&store, "old", 5, T0).await;
    take(&store, "young", 5, T0 + 30_000).await;
    let purge = |now| store.purge_rate_windows(MINUTE, Some(now), 100);
    assert_eq!(purge(T0 + MINUTE - 1).await.expect("purge"), 0);
    assert_eq!(purge(T0 + MINUTE).await.expect("purge"), 1);
    assert_eq!(purge(T0 + MINUTE).await.expect("purge"), 0);
    // The swept key starts an empty window; the other kept its request.
    assert_eq!(
        take(&store, "old", 1, T0 + MINUTE).await,
        Take::Taken { at_ms: T0 + MINUTE }
    );
    assert!(matches!(
        take(&store, "young", 1, T0 + MINUTE).await,
        Take::Refused { .. }
    ));
}
