//! A fault run's notices (`billing chaos --notices`): the account sends its notices by e-mail
//! to the run's SMTP sink through the SMTP fault proxy (`smtp`), and the judge reads them back
//! once the faults are off:
//! 1. one notice per cause and channel: one receipt per invoice, one `payment_failed` per
//!    declined subscription charge, one `subscription_canceled` per canceled subscription,
//!    and no two rows for one cause;
//! 2. every notice due by the account's clock has ended (`sent`, `failed` or `suppressed`);
//! 3. every `sent` notice's message is at the sink (nothing sent is lost); every message at the
//!    sink is a `sent` notice's, or a notice that ran out of attempts (the last attempt's
//!    answer lost, which the service cannot tell from a message not delivered); copies of
//!    one message (an answer lost, then sent again) carry one `Message-ID`, and are counted;
//! 4. Ley 2300: no collection message sent outside the hours it allows, no two to one
//!    customer in one Colombian day, and a scheduled one waits for an allowed instant.

use super::shop::Shop;
use super::smtp::{SmtpProxy, SmtpSink};
use crate::audit::queries::Breach;
use billing::domain::collection_hours::{allowed, colombian_day_start};
use billing::domain::notices::{NoticeKind, NoticeStatus};
use billing::store::Scoped;
use billing::store::entities::{charge_attempt, invoice, notice, subscription};
use chrono::DateTime;
use sea_orm::{ColumnTrait, QueryFilter};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// What a run's notices came to.
#[derive(Debug, Default)]
pub struct NoticeTally {
    pub notices: usize,
    pub sent: usize,
    pub failed: usize,
    pub scheduled: usize,
    pub suppressed: usize,
    /// Collection messages (`payment_failed`) sent, each judged against Ley 2300's hours.
    pub collection_sent: usize,
    /// Messages the sink received more than once (one `Message-ID`, several copies).
    pub duplicates: usize,
    /// SMTP connections faulted, by fault.
    pub faults: BTreeMap<&'static str, usize>,
}

impl std::fmt::Display for NoticeTally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        write!(
            f,
            "{} notices ({} sent, {} of them collection messages, {} failed, {} scheduled, {} \
             suppressed), {} received twice, {} SMTP faults ({})",
            self.notices,
            self.sent,
            self.collection_sent,
            self.failed,
            self.scheduled,
            self.suppressed,
            self.duplicates,
            self.faults.values().sum::<usize>(),
            faults.join(", ")
        )
    }
}

/// The run's mail: the sink and the proxy in front of it.
pub struct Mail {
    pub sink: SmtpSink,
    pub proxy: SmtpProxy,
}

impl Mail {
    pub async fn start() -> anyhow::Result<Self> {
        let sink = SmtpSink::start()?;
        let proxy = SmtpProxy::start(sink.port).await?;
        Ok(Self { sink, proxy })
    }
}

/// Turns the shop's e-mail notices on, through the proxy.
pub async fn turn_on(shop: &Shop, mail: &Mail) -> anyhow::Result<()> {
    shop.call(
        reqwest::Method::PATCH,
        "/v1/account/notices",
        json!({"email": {"enabled": true, "from_address": "cobros@chaos.example",
            "from_name": "Chaos", "smtp": {"host": "127.0.0.1", "port": mail.proxy.port,
            "security": "none"}}}),
    )
    .await
    .map(drop)
}

/// The account's clock, as its server tells it.
pub async fn account_now(shop: &Shop) -> anyhow::Result<i64> {
    let clock = shop
        .call(reqwest::Method::GET, "/v1/test-helpers/clock", json!({}))
        .await?;
    let now = clock["now"].as_str().unwrap_or_default();
    Ok(DateTime::parse_from_rfc3339(now)?.timestamp_millis())
}

/// Once the faults are off: moves the account's clock past every backoff (an hour, twice), then
/// to the first instant a collection message waits for (Ley 2300's next allowed hour, within
/// three days), so that some are sent and judged; and waits (bounded) until no notice due by
/// it is still scheduled.
pub async fn settle(
    store: &billing::store::Store,
    shop: &Shop,
    bound: Duration,
) -> anyhow::Result<()> {
    for _ in 0..2 {
        shop.advance_clock(61 * 60).await?;
    }
    let now = account_now(shop).await?;
    let first_held = notices(store, shop)
        .await?
        .iter()
        .filter(|n| n.status == NoticeStatus::Scheduled.as_str())
        .filter(|n| NoticeKind::parse(&n.kind).is_some_and(NoticeKind::is_collection))
        .map(|n| n.scheduled_for)
        .min();
    if let Some(at) = first_held.filter(|at| *at > now && *at - now <= 3 * 86_400_000) {
        shop.advance_clock((at - now) / 1000 + 1).await?;
    }
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let now = account_now(shop).await?;
        let waiting = notices(store, shop)
            .await?
            .iter()
            .filter(|n| n.status == NoticeStatus::Scheduled.as_str())
            .filter(|n| n.due_at.is_some_and(|due| due <= now))
            .count();
        if waiting == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{waiting} notices due by the account's clock still scheduled after {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn notices(store: &billing::store::Store, shop: &Shop) -> anyhow::Result<Vec<notice::Model>> {
    Ok(notice::Entity::scoped(&shop.account)
        .all(crate::Raw(store).conn())
        .await?)
}

/// The judge (see the module's story): what broke, and the tally.
pub async fn judge(
    store: &billing::store::Store,
    shop: &Shop,
    mail: &Mail,
    dian: bool,
) -> anyhow::Result<(Vec<Breach>, NoticeTally)> {
    let max_attempts = billing::notices::MAX_ATTEMPTS;
    let raw = crate::Raw(store);
    let conn = raw.conn();
    let account = shop.account.clone();
    let rows = notices(store, shop).await?;
    let now = account_now(shop).await?;
    let accepted = mail.sink.accepted();
    let mut breaches = Vec::new();
    let mut breach = |invariant: &'static str, detail: String| {
        breaches.push(Breach { invariant, detail });
    };
    let mut tally = NoticeTally {
        notices: rows.len(),
        faults: mail.proxy.faulted(),
        duplicates: accepted.values().filter(|n| **n > 1).count(),
        ..NoticeTally::default()
    };

    // 1. Once per cause and channel, and one for each thing that causes one.
    let mut causes: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for n in &rows {
        *causes
            .entry((n.cause.as_str(), n.channel.as_str()))
            .or_insert(0) += 1;
    }
    for ((cause, channel), count) in &causes {
        if *count > 1 {
            breach(
                "a notice written twice for one cause",
                format!("{count} {channel} notices for {cause}"),
            );
        }
    }
    let of_kind = |kind: NoticeKind| -> BTreeSet<&str> {
        rows.iter()
            .filter(|n| n.kind == kind.as_str())
            .map(|n| n.cause.as_str())
            .collect()
    };
    let receipts = of_kind(NoticeKind::Receipt);
    let invoices = invoice::Entity::scoped(&account).all(conn).await?;
    // With DIAN on, a receipt waits for DIAN's acceptance (`chaos::dian` judges the filing).
    for invoice in invoices.iter().filter(|_| !dian) {
        if !receipts.contains(format!("receipt:{}", invoice.id).as_str()) {
            breach(
                "an invoice without its receipt",
                format!("invoice {} has no receipt notice", invoice.id),
            );
        }
    }
    let failures = of_kind(NoticeKind::PaymentFailed);
    let declined = charge_attempt::Entity::scoped(&account)
        .filter(
            charge_attempt::Column::Status
                .eq(billing::domain::charge_status::ChargeStatus::Declined),
        )
        .filter(charge_attempt::Column::SubscriptionId.is_not_null())
        .all(conn)
        .await?;
    for charge in &declined {
        if !failures.contains(format!("payment_failed:{}", charge.id).as_str()) {
            breach(
                "a declined charge without its notice",
                format!("charge {} has no payment_failed notice", charge.id),
            );
        }
    }
    let cancels = of_kind(NoticeKind::SubscriptionCanceled);
    let canceled = subscription::Entity::scoped(&account)
        .filter(subscription::Column::Status.eq(billing::domain::subscription::Status::Canceled))
        .all(conn)
        .await?;
    for sub in &canceled {
        if !cancels.contains(format!("subscription_canceled:{}", sub.id).as_str()) {
            breach(
                "a cancellation without its notice",
                format!(
                    "subscription {} has no subscription_canceled notice",
                    sub.id
                ),
            );
        }
    }

    // 2, 3 and 4, notice by notice.
    let mut collection_days: BTreeMap<(String, i64), usize> = BTreeMap::new();
    for n in &rows {
        let at = |ms: i64| DateTime::from_timestamp_millis(ms).unwrap_or_default();
        let status = NoticeStatus::parse(&n.status);
        let collection = NoticeKind::parse(&n.kind).is_some_and(NoticeKind::is_collection);
        match status {
            Some(NoticeStatus::Sent) => {
                tally.sent += 1;
                let id = n.message_id.clone().unwrap_or_default();
                if !accepted.contains_key(&id) {
                    breach(
                        "a notice sent that the customer's server never received",
                        format!("{} ({}) sent as {id:?}", n.id, n.kind),
                    );
                }
                if collection {
                    tally.collection_sent += 1;
                    let sent = n.sent_at.unwrap_or_default();
                    if !allowed(at(sent)) {
                        breach(
                            "a collection message sent outside the hours Ley 2300 allows",
                            format!("{} sent at {}", n.id, at(sent)),
                        );
                    }
                    let day = colombian_day_start(at(sent)).timestamp_millis();
                    *collection_days
                        .entry((n.customer_id.to_string(), day))
                        .or_insert(0) += 1;
                }
            }
            Some(NoticeStatus::Failed) => tally.failed += 1,
            Some(NoticeStatus::Suppressed) => tally.suppressed += 1,
            Some(NoticeStatus::Scheduled) => {
                tally.scheduled += 1;
                if n.due_at.is_some_and(|due| due <= now) {
                    breach(
                        "a notice due and never ended",
                        format!("{} ({}) due at {:?}", n.id, n.kind, n.due_at.map(at)),
                    );
                }
                if collection && !allowed(at(n.scheduled_for)) {
                    breach(
                        "a collection message scheduled outside the hours Ley 2300 allows",
                        format!("{} scheduled for {}", n.id, at(n.scheduled_for)),
                    );
                }
            }
            None => breach(
                "a notice in no known status",
                format!("{}: {}", n.id, n.status),
            ),
        }
        if let Some(id) = &n.message_id
            && accepted.contains_key(id)
            && status != Some(NoticeStatus::Sent)
            && !(status == Some(NoticeStatus::Failed) && n.attempts >= max_attempts)
        {
            breach(
                "a message the customer received whose notice says it was not sent",
                format!("{} is {} after {} attempts", n.id, n.status, n.attempts),
            );
        }
    }
    for ((customer, day), count) in collection_days {
        if count > 1 {
            breach(
                "two collection messages to one customer in one day",
                format!("{count} to {customer} on the day starting {}", day),
            );
        }
    }
    Ok((breaches, tally))
}
