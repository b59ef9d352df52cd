//! List queries: the query string as `ApiQuery` parses it (`billing::http::extract::parse_query`)
//! into each list's query type, then `limit` and `cursor` as the store receives them.
//!
//! Properties: no panic on any query string; an accepted page has 1 ≤ limit ≤ 100 and no empty
//! cursor.
#![no_main]

use billing::http::error::ApiError;
use billing::api::events::EventListQuery;
use billing::http::extract::parse_query;
use billing::http::list::{ListQuery, MAX_LIMIT, page_request};
use billing::api::subscriptions::SubscriptionListQuery;
use billing::store::PageRequest;
use libfuzzer_sys::fuzz_target;

fn check(page: Result<PageRequest, ApiError>) {
    if let Ok(page) = page {
        assert!((1..=MAX_LIMIT).contains(&page.limit), "{page:?}");
        assert!(
            page.cursor.as_ref().is_none_or(|c| !c.is_empty()),
            "{page:?}"
        );
    }
}

fuzz_target!(|query: &str| {
    if let Ok(q) = parse_query::<ListQuery>(query) {
        check(q.page());
    }
    if let Ok(q) = parse_query::<SubscriptionListQuery>(query) {
        check(page_request(q.limit, q.cursor));
    }
    if let Ok(q) = parse_query::<EventListQuery>(query) {
        check(page_request(q.limit, q.cursor));
    }
});
