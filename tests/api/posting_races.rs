//! Issue 32, item 3: a charge whose post is still on its way to the processor is not asked
//! about (a lookup would find nothing yet under its reference, and the charge would be posted
//! a second time beside its first post). The processor's calls here may take 5 s, longer than
//! the reconciler's staleness (1.8 s at a recheck base of 300 ms), so a post held up for 3 s is
//! still under way when the reconciler first looks.

use crate::common::proxied_shop::{APPROVED_CARD, FEE, Shop, TOP_UP};
use crate::common::{TestApp, assert_invariants, eventually};
use billing::chaos::proxy::Fault;
use std::time::Duration;

crate::db_tests!(config = crate::posting_races::slow_posts;
    a_charge_being_posted_is_not_asked_about_nor_posted_again_beside_itself,
);

pub(crate) fn slow_posts(config: &mut billing::config::Config) {
    config.processor_timeout_ms = 5_000;
    config.reconcile_interval_ms = 100;
    config.processor_recheck_base_ms = 300;
}

async fn a_charge_being_posted_is_not_asked_about_nor_posted_again_beside_itself(app: TestApp) {
    let shop = Shop::open(&app, APPROVED_CARD).await;
    // The first post reaches the processor after 3 s, within the client's 5 s.
    shop.proxy.fail(
        "POST",
        "/transactions",
        Fault::DelayThenForward(Duration::from_secs(3)),
        1,
    );
    let id = shop.subscribe(&app).await;
    eventually(Duration::from_secs(30), || async {
        shop.event_types(&app, &id)
            .await
            .contains(&"charge.approved".to_owned())
    })
    .await;
    let references = shop.posted_references();
    assert_eq!(
        references.len(),
        1,
        "posted once, not again while its first post was under way: {references:?}"
    );
    assert!(
        shop.proxy.seen("GET", "/transactions").is_empty(),
        "not asked about while it was being posted"
    );
    assert_eq!(shop.charge(&references[0]).await.status, "approved");
    assert_eq!(shop.balance(&app).await, (TOP_UP - FEE, 0));
    assert_invariants(&app).await;
}
