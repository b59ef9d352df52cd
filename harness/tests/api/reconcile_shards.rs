//! Issue 46, N7: when a node gains shards, the reconciler asks about the pending charges of
//! those shards, not of every shard it holds (whose charges keep their own recheck schedule).
//! The query it runs (`Store::stale_pending_charges` with the gained shards) finds a charge by
//! its owner's shard: its subscription's, or its own id's when it has none.

use crate::common::TestApp;
use crate::common::proxied_shop::{APPROVED_CARD, Shop};
use billing::store::ownership::shard_of;

crate::db_tests!(a_gained_shards_pending_charges_are_found_by_their_owners_shard);

async fn a_gained_shards_pending_charges_are_found_by_their_owners_shard(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    // Subscriptions that do not exist: their charges stay pending whatever the reconciler does.
    let in_10 = shop.unposted_charge(Some("sub_shardtest0a")).await;
    let in_11 = shop.unposted_charge(Some("sub_shardtest0b")).await;
    let own = shop.unposted_charge(None).await;
    assert_eq!(shard_of("sub_shardtest0a"), 10);
    assert_eq!(shard_of("sub_shardtest0b"), 11);
    let found = |shards: Vec<u16>| {
        let store = shop.store.clone();
        async move {
            let now = chrono::Utc::now().timestamp_millis();
            store
                .stale_pending_charges(now + 1_000, Some(&shards), 100)
                .await
                .expect("db")
                .into_iter()
                .map(|charge| charge.id)
                .collect::<Vec<_>>()
        }
    };
    let tenth = found(vec![10]).await;
    assert!(tenth.contains(&in_10.id), "{tenth:?}");
    assert!(!tenth.contains(&in_11.id), "{tenth:?}");
    let own_shard = shard_of(own.id.as_str());
    let by_itself = found(vec![own_shard]).await;
    assert!(by_itself.contains(&own.id), "{by_itself:?}");
    let elsewhere: Vec<u16> = (0..256)
        .filter(|&s| s != 10 && s != 11 && s != own_shard)
        .collect();
    let none = found(elsewhere).await;
    assert!(
        [&in_10.id, &in_11.id, &own.id]
            .iter()
            .all(|id| !none.contains(id)),
        "{none:?}"
    );
}
