//! Delivering notices to customers (CONTRACT §15). Notices are written by the events that cause
//! them (`store::notices::notices_for`, in the event's transaction); here a loop on every node
//! takes those whose time has come by their account's clock, one claim at a time (a claim is a
//! conditional update that also moves `due_at` a lease ahead, so an attempt cut off by a crash
//! is taken again), and sends each:
//!
//! 1. The account's settings as they are now: a channel or a kind turned off since the notice was
//!    written suppresses it; so does a customer without an address.
//! 2. A collection message (`payment_failed`) keeps Ley 2300 de 2023: outside the allowed hours,
//!    or when the customer already had one today, it waits for the next allowed instant (not an
//!    attempt); when the customer had one through the other channel this calendar week, it is
//!    suppressed (one channel a week).
//! 3. The message is rendered (`message`) and sent (`smtp`) with the notice's own `Message-ID`,
//!    the same on every attempt. SMTP's 250 is `sent`; a 5xx reply is `failed` with the reply;
//!    anything else (a 4xx, a refused connection, a timeout: the message may or may not have
//!    arrived) is tried again with backoff, at least 5 attempts over at least an hour, then
//!    `failed`. A rare duplicate after an unknown outcome carries the same `Message-ID`.
//!
//! WhatsApp notices (`whatsapp`) go the same way through the Cloud API: a 2xx with the
//! message's wamid is `sent` (its status webhooks later record `delivered`, `read` or
//! `failed`), Meta's final refusal is `failed` with its message, a 429, a 5xx, a timeout or a
//! broken connection is tried again with the same backoff.

pub mod facts;
pub mod message;
mod reminders;
pub mod smtp;
pub mod whatsapp;

use crate::clock::Clock;
use crate::config::Config;
use crate::domain::notices::{Channel, NoticeKind, NoticeSettings};
use crate::ids::AccountId;
use crate::store::notices::{Notice, NoticeEnd};
use crate::store::{Store, StoreResult};
use std::sync::Arc;
use std::time::Duration;

/// Notices taken per pass.
const BATCH: u64 = 50;
/// How long a claim holds a notice before another worker may take it again.
const LEASE_MS: i64 = 120_000;
/// The waits between attempts whose outcome was unknown (the last repeats): six attempts
/// span an hour and a half.
const BACKOFF_MS: [i64; 5] = [60_000, 300_000, 900_000, 1_800_000, 3_600_000];
/// After this many unknown outcomes a notice is `failed`.
pub const MAX_ATTEMPTS: i32 = 6;
/// While the scheduler holds this many renewals armed (a burst), the worker's passes wait
/// (decision 0084): each send is three write transactions beside the renewals' batches.
const HOLD_ABOVE: usize = 1_000;
/// The longest the passes wait in a row: then one runs, so that a burst that never ends still
/// lets notices through, a batch at a time.
const MAX_HOLD: Duration = Duration::from_secs(60);

#[derive(Clone)]
pub struct Notices(Arc<Inner>);

struct Inner {
    store: Store,
    clock: Clock,
    config: Arc<Config>,
    /// This worker's name in claims.
    claim: String,
    /// SMTP's timeout for one message.
    timeout: Duration,
    /// How far each account's reminders have been written (`reminders`).
    marks: reminders::Marks,
    /// How WhatsApp messages leave.
    whatsapp: whatsapp::Reach,
    /// The renewals this node's scheduler holds (`None`: nothing holds the passes back).
    backlog: Option<crate::actors::Backlog>,
}

impl Notices {
    /// The worker; `sandbox`, the in-process sandbox WhatsApp that sandbox accounts send
    /// through when the operator names no other.
    pub fn new(
        store: Store,
        clock: Clock,
        config: Arc<Config>,
        sandbox: Option<Arc<crate::whatsapp::sandbox::SandboxWhatsapp>>,
        backlog: Option<crate::actors::Backlog>,
    ) -> reqwest::Result<Self> {
        let timeout = Duration::from_millis(config.smtp_timeout_ms.max(100));
        let whatsapp = whatsapp::Reach::new(&config, sandbox)?;
        Ok(Self(Arc::new(Inner {
            store,
            clock,
            config,
            claim: format!("ntcw_{}", uuid::Uuid::new_v4().simple()),
            timeout,
            marks: reminders::Marks::default(),
            whatsapp,
            backlog,
        })))
    }

    /// Sends what falls due, every `interval`, until `stop` changes.
    async fn run(self, interval: Duration, mut stop: tokio::sync::watch::Receiver<()>) {
        let mut reminded_at: Option<tokio::time::Instant> = None;
        let mut held_since = None;
        loop {
            let backlog = self
                .0
                .backlog
                .as_ref()
                .map_or(0, crate::actors::Backlog::get);
            if holds(backlog, &mut held_since, tokio::time::Instant::now()) {
                tokio::select! {
                    _ = tokio::time::sleep(interval) => continue,
                    _ = stop.changed() => return,
                }
            }
            if reminded_at.is_none_or(|at| at.elapsed() >= reminders::EVERY) {
                reminded_at = Some(tokio::time::Instant::now());
                if let Err(err) = self.remind(None).await {
                    tracing::warn!(error = ?err, "writing reminders failed");
                }
            }
            let now = chrono::Utc::now().timestamp_millis();
            if let Err(err) = self.pass(None, now).await {
                tracing::warn!(error = ?err, "a notices pass failed");
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// Sends every notice of `account` due by its clock's now (a test-clock advance's promise).
    pub async fn flush_account(&self, account: &AccountId) -> StoreResult<()> {
        self.remind(Some(account)).await?;
        // An attempt another worker (this node's loop, or another node) has under way is
        // waited for, within a bound: the advance answers once what fell due was tried.
        let deadline = tokio::time::Instant::now() + self.0.timeout + Duration::from_secs(2);
        for _ in 0..200 {
            let now = chrono::Utc::now().timestamp_millis();
            if self.pass(Some(account), now).await? > 0 {
                continue;
            }
            if self.0.store.notices_in_flight(account, None).await? == 0
                || tokio::time::Instant::now() >= deadline
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// One pass: takes and sends what is due; how many it took.
    async fn pass(&self, account: Option<&AccountId>, real_now: i64) -> StoreResult<usize> {
        let due = self.0.store.due_notices(account, real_now, BATCH).await?;
        let mut taken = 0;
        for notice in due {
            if self.try_notice(&notice).await? {
                taken += 1;
            }
        }
        Ok(taken)
    }

    /// Claims `notice` and makes one attempt at it; whether it was claimed.
    async fn try_notice(&self, notice: &Notice) -> StoreResult<bool> {
        let now = self.0.clock.fresh_now_ms(&notice.account_id).await?;
        if !self
            .0
            .store
            .claim_notice(notice, &self.0.claim, now + LEASE_MS)
            .await?
        {
            return Ok(false);
        }
        let end = match self.attempt(notice, now).await {
            Ok(end) => end,
            Err(err) => NoticeEnd::Retry {
                at: now + BACKOFF_MS[0],
                error: format!("reading what the notice is about failed: {err}"),
            },
        };
        let status = end_status(&end);
        metrics::counter!("notices_total", "kind" => notice.kind.clone(),
            "channel" => notice.channel.clone(), "status" => status)
        .increment(1);
        self.0
            .store
            .finish_notice(notice, &self.0.claim, end, now)
            .await?;
        Ok(true)
    }

    /// What one attempt at `notice` comes to, at `now` on its account's clock.
    async fn attempt(&self, notice: &Notice, now: i64) -> StoreResult<NoticeEnd> {
        let store = &self.0.store;
        let Some(kind) = NoticeKind::parse(&notice.kind) else {
            return Ok(suppressed("the kind is unknown to this build", None));
        };
        let settings: NoticeSettings = store.notice_settings(&notice.account_id).await?;
        let channel = Channel::parse(&notice.channel);
        let on = match channel {
            Some(Channel::Email) => settings.email.enabled,
            Some(Channel::Whatsapp) => settings.whatsapp.enabled,
            None => false,
        };
        if !on {
            return Ok(suppressed("the channel is turned off", None));
        }
        if !settings.kinds.on(kind) {
            return Ok(suppressed("the kind is turned off", None));
        }
        if kind.is_collection() {
            match self.held_back(notice, now).await? {
                Some(Held::Later(at)) => return Ok(NoticeEnd::Later { at }),
                Some(Held::Suppressed(reason)) => return Ok(suppressed(reason, None)),
                None => {}
            }
        }
        match channel {
            Some(Channel::Whatsapp) => self.attempt_whatsapp(notice, kind, &settings, now).await,
            _ => self.attempt_email(notice, kind, &settings, now).await,
        }
    }

    async fn attempt_email(
        &self,
        notice: &Notice,
        kind: NoticeKind,
        settings: &NoticeSettings,
        now: i64,
    ) -> StoreResult<NoticeEnd> {
        let store = &self.0.store;
        let public_url = self.0.config.public_url();
        let Some(message) =
            message::compose(store, notice, kind, settings, (&public_url, now)).await?
        else {
            return Ok(suppressed("what it is about is gone", None));
        };
        let Some(recipient) = message.to.clone() else {
            return Ok(suppressed("the customer has no e-mail address", None));
        };
        let message_id = match &notice.message_id {
            Some(id) => id.clone(),
            None => {
                let id = smtp::message_id(&notice.id, &self.0.config.public_url());
                store.set_notice_message_id(&notice.id, &id).await?;
                id
            }
        };
        let Some(server) = settings.email.smtp.as_ref() else {
            return Ok(suppressed("the channel has no SMTP server", None));
        };
        let sent = smtp::send(
            server,
            &settings.email,
            &message,
            &message_id,
            &smtp::Reach {
                policy: self.0.config.webhook_policy(message.sandbox),
                resolver: self.0.config.host_resolver(),
                timeout: self.0.timeout,
            },
        )
        .await;
        Ok(match sent {
            smtp::Outcome::Sent => NoticeEnd::Sent {
                at: now,
                recipient,
                subject: Some(message.subject),
                wamid: None,
            },
            smtp::Outcome::Refused(reply) => NoticeEnd::Failed {
                error: reply,
                recipient: Some(recipient),
                surely_unsent: true,
            },
            smtp::Outcome::Unknown(why) => unknown(notice, now, why, recipient),
        })
    }

    async fn attempt_whatsapp(
        &self,
        notice: &Notice,
        kind: NoticeKind,
        settings: &NoticeSettings,
        now: i64,
    ) -> StoreResult<NoticeEnd> {
        let sent = whatsapp::send(
            &self.0.store,
            &self.0.config,
            &self.0.whatsapp,
            notice,
            kind,
            (settings, now),
        )
        .await?;
        let sent = match sent {
            Ok(sent) => sent,
            Err(whatsapp::Unsent::Suppressed(reason)) => return Ok(suppressed(reason, None)),
        };
        let recipient = sent.recipient;
        Ok(match sent.outcome {
            crate::whatsapp::client::Outcome::Sent { wamid } => NoticeEnd::Sent {
                at: now,
                recipient,
                subject: None,
                wamid: Some(wamid),
            },
            crate::whatsapp::client::Outcome::Refused(said) => NoticeEnd::Failed {
                error: said,
                recipient: Some(recipient),
                surely_unsent: true,
            },
            crate::whatsapp::client::Outcome::Unknown(why) => unknown(notice, now, why, recipient),
        })
    }

    /// Whether Ley 2300 holds a collection message back: outside its hours, until the next
    /// allowed instant; after another one to the customer today, until tomorrow's first; after
    /// one through the other channel this calendar week (Monday to Sunday, Colombian time),
    /// for good: one channel a week.
    async fn held_back(&self, notice: &Notice, now: i64) -> StoreResult<Option<Held>> {
        use crate::domain::collection_hours::{
            colombian_day_start, colombian_week_start, next_allowed,
        };
        use crate::domain::time::from_millis;
        let at = from_millis(now);
        let allowed = next_allowed(at);
        if allowed > at {
            return Ok(Some(Held::Later(allowed.timestamp_millis())));
        }
        // The week's channel, then the day's one message, each a slot the first notice takes
        // (`take_collection_slot`): two notices attempted at once cannot both win it. A slot
        // stays taken once tried, unless the notice ends having surely reached nobody (refused,
        // or suppressed: `Store::finish_notice` gives its slots back): never two in a day.
        let store = &self.0.store;
        let week = colombian_week_start(at).timestamp_millis();
        let week = store
            .take_collection_slot(notice, format!("week:{week}"), now)
            .await?;
        if week.channel != notice.channel {
            return Ok(Some(Held::Suppressed(ONE_CHANNEL_A_WEEK)));
        }
        let day_start = colombian_day_start(at);
        let today = store
            .take_collection_slot(notice, format!("day:{}", day_start.timestamp_millis()), now)
            .await?;
        if today.notice_id == notice.id {
            return Ok(None);
        }
        let tomorrow = day_start + chrono::Duration::days(1);
        Ok(Some(Held::Later(next_allowed(tomorrow).timestamp_millis())))
    }
}

/// Why a collection message is held back.
enum Held {
    /// Until then, not an attempt.
    Later(i64),
    /// For good.
    Suppressed(&'static str),
}

/// The reason of a collection message suppressed by Ley 2300's one channel a week.
pub const ONE_CHANNEL_A_WEEK: &str =
    "Ley 2300: the customer had a collection message through another channel this week";

/// Whether the worker's pass waits for a burst of `backlog` renewals to drain: from the first
/// pass that sees `HOLD_ABOVE` of them (`held_since`), for at most `MAX_HOLD` in a row.
fn holds(
    backlog: usize,
    held_since: &mut Option<tokio::time::Instant>,
    now: tokio::time::Instant,
) -> bool {
    if backlog < HOLD_ABOVE {
        *held_since = None;
        return false;
    }
    let since = *held_since.get_or_insert(now);
    if now.duration_since(since) >= MAX_HOLD {
        // One pass now; the wait starts again after it.
        *held_since = None;
        return false;
    }
    true
}

/// An attempt whose outcome is unknown: tried again after the backoff, `failed` once out of
/// attempts.
fn unknown(notice: &Notice, now: i64, why: String, recipient: String) -> NoticeEnd {
    if notice.attempts >= MAX_ATTEMPTS {
        return NoticeEnd::Failed {
            error: format!("{why} (after {} attempts)", notice.attempts),
            recipient: Some(recipient),
            // One of the unknown attempts may have reached the customer.
            surely_unsent: false,
        };
    }
    let step = usize::try_from(notice.attempts.max(1) - 1).unwrap_or(0);
    NoticeEnd::Retry {
        at: now + BACKOFF_MS[step.min(BACKOFF_MS.len() - 1)],
        error: why,
    }
}

impl crate::background::Loop for Notices {
    fn run(
        self: Arc<Self>,
        stop: tokio::sync::watch::Receiver<()>,
    ) -> crate::background::BoxFuture<'static, ()> {
        let notices = (*self).clone();
        let interval = Duration::from_millis(notices.0.config.notices_interval_ms.max(10));
        Box::pin(notices.run(interval, stop))
    }

    fn flush<'a>(
        &'a self,
        account: &'a AccountId,
    ) -> crate::background::BoxFuture<'a, StoreResult<()>> {
        Box::pin(self.flush_account(account))
    }
}

fn suppressed(reason: &'static str, recipient: Option<String>) -> NoticeEnd {
    NoticeEnd::Suppressed { reason, recipient }
}

fn end_status(end: &NoticeEnd) -> &'static str {
    match end {
        NoticeEnd::Sent { .. } => "sent",
        NoticeEnd::Failed { .. } => "failed",
        NoticeEnd::Suppressed { .. } => "suppressed",
        NoticeEnd::Retry { .. } | NoticeEnd::Later { .. } => "scheduled",
    }
}

/// A notice tried now, as a pass would (claimed first: if another worker holds it, this does
/// nothing), answered as it stands after: sent, failed, suppressed, or scheduled again for
/// its next attempt (an unknown outcome, which the loop resolves by trying again with the
/// same `Message-ID`).
impl crate::store::asked_notices::SendNow for Notices {
    fn send_now<'a>(
        &'a self,
        notice: &'a Notice,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = StoreResult<Option<Notice>>> + Send + 'a>>
    {
        Box::pin(async move {
            self.try_notice(notice).await?;
            self.0.store.notice(&notice.account_id, &notice.id).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ChargeAttemptId, CustomerId, NoticeId};

    /// Wednesday 2 December 2026, 10:00 in Bogotá: within Ley 2300's hours.
    const WEDNESDAY_10AM: i64 = 1_796_223_600_000;
    /// Thursday 3 December 2026, 07:00 in Bogotá: the next day's first allowed instant.
    const THURSDAY_7AM: i64 = 1_796_299_200_000;

    fn failed_payment(account: &AccountId, customer: &CustomerId, channel: &str) -> Notice {
        let charge = ChargeAttemptId::generate();
        Notice {
            id: NoticeId::generate(),
            account_id: account.clone(),
            kind: NoticeKind::PaymentFailed.as_str().to_owned(),
            channel: channel.to_owned(),
            cause: format!("payment_failed:{charge}"),
            customer_id: customer.clone(),
            subscription_id: None,
            invoice_id: None,
            charge_id: Some(charge),
            recipient: None,
            subject: None,
            status: "scheduled".to_owned(),
            scheduled_for: WEDNESDAY_10AM,
            sent_at: None,
            attempts: 0,
            last_error: None,
            suppressed_reason: None,
            message_id: None,
            due_at: Some(WEDNESDAY_10AM),
            claim: None,
            created_at: WEDNESDAY_10AM,
            delivered_at: None,
            read_at: None,
        }
    }

    /// A burst holds the passes back, never for longer than `MAX_HOLD` in a row; a small
    /// backlog (a day's ordinary renewals) never does.
    #[test]
    fn a_burst_holds_the_passes_for_at_most_max_hold_at_a_time() {
        let start = tokio::time::Instant::now();
        let mut since = None;
        assert!(!holds(HOLD_ABOVE - 1, &mut since, start));
        assert!(holds(HOLD_ABOVE, &mut since, start));
        let almost = start + MAX_HOLD - Duration::from_millis(1);
        assert!(holds(100_000, &mut since, almost));
        // The bound: one pass runs, then the wait starts again.
        assert!(!holds(100_000, &mut since, start + MAX_HOLD));
        assert!(holds(100_000, &mut since, start + MAX_HOLD));
        assert!(holds(
            100_000,
            &mut since,
            start + MAX_HOLD * 2 - Duration::from_millis(1)
        ));
        assert!(!holds(100_000, &mut since, start + MAX_HOLD * 2));
        // The burst drained: passes run at once, and a new burst waits from its own start.
        assert!(!holds(0, &mut since, start + MAX_HOLD * 2));
        let later = start + MAX_HOLD * 5;
        assert!(holds(HOLD_ABOVE, &mut since, later));
        assert!(holds(HOLD_ABOVE, &mut since, later + MAX_HOLD / 2));
    }

    /// Two collection messages to one customer attempted at once (two workers, two declines
    /// due at one instant): before either is sent, only one may go that day, and the week
    /// keeps its first channel. Deciding by the notices already `sent` let both go.
    #[tokio::test]
    async fn two_collection_messages_attempted_at_once_to_one_customer_send_one_that_day() {
        let store = crate::store::idempotency::test_store().await;
        let account = AccountId::generate();
        store
            .create_account(crate::store::accounts::NewAccount {
                id: account.clone(),
                name: "Tienda".into(),
                sandbox: true,
                api_key_hash: "hash".into(),
                processor_base_url: None,
                processor_public_key: "pub_test_x".into(),
                processor_private_key: "prv_test_x".into(),
                processor_events_secret: "test_events_x".into(),
                processor_integrity_secret: "test_integrity_x".into(),
                fee_percent_bps: 150,
                fee_fixed_cents: 0,
                rate_limit_per_minute: 100,
                status_rate_limit_per_minute: 20,
                dunning_retry_days: "1,3,5,7".into(),
                created_at: 0,
            })
            .await
            .expect("account");
        let config = Arc::new(Config::new("sqlite::memory:"));
        let notices = Notices::new(store.clone(), Clock::new(store.clone()), config, None, None)
            .expect("notices");
        let customer = CustomerId::generate();
        let first = failed_payment(&account, &customer, "email");
        let second = failed_payment(&account, &customer, "email");
        let held = |held: Option<Held>| match held {
            None => "goes".to_owned(),
            Some(Held::Later(at)) => format!("later {at}"),
            Some(Held::Suppressed(why)) => format!("suppressed: {why}"),
        };
        let first_now = notices
            .held_back(&first, WEDNESDAY_10AM)
            .await
            .expect("first");
        let second_now = notices
            .held_back(&second, WEDNESDAY_10AM)
            .await
            .expect("second");
        assert_eq!(held(first_now), "goes");
        assert_eq!(held(second_now), format!("later {THURSDAY_7AM}"));
        // The first one's retry the same day still holds the day.
        let retry = notices
            .held_back(&first, WEDNESDAY_10AM + 60_000)
            .await
            .expect("retry");
        assert_eq!(held(retry), "goes");
        // The next day the second goes; WhatsApp that week is another channel.
        let next_day = notices
            .held_back(&second, THURSDAY_7AM)
            .await
            .expect("next day");
        assert_eq!(held(next_day), "goes");
        let whatsapp = failed_payment(&account, &customer, "whatsapp");
        let other = notices
            .held_back(&whatsapp, THURSDAY_7AM + 3_600_000)
            .await
            .expect("whatsapp");
        assert_eq!(held(other), format!("suppressed: {ONE_CHANNEL_A_WEEK}"));

        // A message the server refused reached nobody: its day goes to the next one, and its
        // week's channel is free again.
        let customer = CustomerId::generate();
        let refused = failed_payment(&account, &customer, "whatsapp");
        let after = failed_payment(&account, &customer, "email");
        let taken = notices.held_back(&refused, WEDNESDAY_10AM).await;
        assert_eq!(held(taken.expect("refused")), "goes");
        store
            .release_collection_slots(&refused)
            .await
            .expect("release");
        let then = notices.held_back(&after, WEDNESDAY_10AM + 60_000).await;
        assert_eq!(held(then.expect("after")), "goes");
    }
}
