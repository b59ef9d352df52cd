//! What a notice is about, read once from the rows when it is sent, for every channel: the
//! e-mail (`message`) and the WhatsApp template (`whatsapp`) say the same facts in their own
//! shape, and the preview (`sample`) says them about made-up data. Reading is the only step that
//! touches the database: it also writes the `/pay/<token>` link a failed payment or an expiring
//! card carries (only the token's hash is kept).

use crate::documents::sheet::Sheet;
use crate::documents::text::Locale;
use crate::domain::decline::Decline;
use crate::domain::notices::NoticeKind;
use crate::domain::subscription::Status;
use crate::store::notices::{Notice, PayLink};
use crate::store::{Store, StoreError, StoreResult};

/// A failed payment's link token: `pay_` and 43 random characters.
pub const PAY_TOKEN_PREFIX: &str = "pay_";
const PAY_TOKEN_LEN: usize = 43;

/// Who the notice is from and to.
pub struct Parties {
    pub merchant: String,
    pub customer: String,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub whatsapp_opt_in: bool,
    /// Whether the account is a sandbox one (which addresses its SMTP host may have).
    pub sandbox: bool,
}

/// What a notice tells, by kind.
pub enum Facts {
    Receipt(Receipt),
    PaymentFailed(Failed),
    Canceled {
        plan: String,
        why: Why,
    },
    Reminder(Reminder),
    /// A portal link a person of the merchant's sent: the portal's URL, made when it is sent
    /// (a session of an hour from then).
    PortalLink {
        url: String,
        expires_at: i64,
    },
}

/// An approved charge's invoice.
pub struct Receipt {
    /// Its DIAN number when DIAN numbered it, else its own.
    pub number: String,
    pub total_cents: i64,
    pub issued_at: i64,
    pub hosted_url: String,
    /// The invoice's sheet, to draw its PDF; none in a preview.
    pub sheet: Option<Box<Sheet>>,
    /// Its AttachedDocument (DIAN on and accepted): the receipt then carries one ZIP.
    pub attached: Option<String>,
}

/// A subscription's declined charge.
pub struct Failed {
    pub amount_cents: i64,
    pub reason: Option<Reason>,
    /// A hard decline (`Decline::is_hard`): the card is not tried again.
    pub hard: bool,
    /// While the subscription is past due: what comes next and the link to fix it.
    pub dunning: Option<Dunning>,
}

/// Why a charge was declined, in words the customer reads.
pub enum Reason {
    /// The card network's limit on reattempts stopped the retry (no processor's words).
    NetworkLimit,
    /// The processor's message.
    Processor(String),
}

/// A past-due subscription's next steps.
pub struct Dunning {
    /// The next attempt; none after a hard decline.
    pub next_try: Option<i64>,
    /// When it is canceled if it stays unpaid.
    pub ends: Option<i64>,
    /// `<public url>/pay/<token>`: the portal's card update for it.
    pub link: String,
}

/// Who canceled a subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    Unpaid,
    Customer,
    Merchant,
}

/// What a reminder announces, as it holds when it is sent.
pub struct Reminder {
    /// `card_expiring`, `renewal_upcoming` or `trial_ending`.
    pub kind: NoticeKind,
    pub plan: String,
    pub charge_at: i64,
    pub amount_cents: i64,
    /// The card as the customer knows it (`VISA ···· 4242`), or empty.
    pub card: String,
    /// An expiring card's `/pay/<token>` link.
    pub link: Option<String>,
}

/// What a channel carries beside the words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carried {
    /// A receipt's files: the invoice's sheet (for its PDF) and DIAN's AttachedDocument.
    Files,
    /// The words alone (a WhatsApp template).
    Words,
}

/// The facts of `notice`, or `None` when what it is about is gone or no longer holds (a
/// reminder whose subscription changed): the notice is then suppressed.
pub async fn read(
    store: &Store,
    notice: &Notice,
    kind: NoticeKind,
    (locale, carried): (Locale, Carried),
    (public_url, now): (&str, i64),
) -> StoreResult<Option<(Parties, Facts)>> {
    let account_id = &notice.account_id;
    let (Some(account), Some(customer)) = (
        store.account(account_id).await?,
        store.customer(account_id, &notice.customer_id).await?,
    ) else {
        return Ok(None);
    };
    let parties = Parties {
        merchant: account.name.clone(),
        customer: customer.name,
        email: Some(customer.email).filter(|email| !email.is_empty()),
        phone: customer.phone.filter(|phone| !phone.is_empty()),
        whatsapp_opt_in: customer.whatsapp_opt_in,
        sandbox: account.sandbox,
    };
    let facts = match kind {
        NoticeKind::Receipt => {
            let Some(invoice_id) = &notice.invoice_id else {
                return Ok(None);
            };
            let Some(invoice) = store.invoice(account_id, invoice_id).await? else {
                return Ok(None);
            };
            let hosted_url = format!("{public_url}/invoices/{}", invoice.hosted_token);
            if carried == Carried::Words {
                // The number as lists show it (DIAN's, when DIAN numbered it), nothing drawn.
                let id = crate::ids::DocumentId::from(invoice.id.clone());
                let docs = store
                    .dian_documents(account_id, std::slice::from_ref(&id))
                    .await?;
                let number = crate::documents::electronic::listed_number(
                    &invoice.number,
                    docs.get(&id),
                    locale,
                );
                return Ok(Some((
                    parties,
                    Facts::Receipt(Receipt {
                        number,
                        total_cents: invoice.total_cents,
                        issued_at: invoice.issued_at,
                        hosted_url,
                        sheet: None,
                        attached: None,
                    }),
                )));
            }
            let sheet =
                crate::documents::electronic::invoice_sheet(store, &invoice, &account, locale)
                    .await
                    .map_err(|err| StoreError::invariant(format!("invoice sheet: {err}")))?;
            let attached =
                crate::documents::electronic::attached_document(store, account_id, &invoice.id)
                    .await?
                    .ok();
            Facts::Receipt(Receipt {
                number: sheet.number.clone(),
                total_cents: invoice.total_cents,
                issued_at: invoice.issued_at,
                hosted_url,
                sheet: Some(Box::new(sheet)),
                attached,
            })
        }
        NoticeKind::PaymentFailed => {
            let (Some(charge_id), Some(sub_id)) = (&notice.charge_id, &notice.subscription_id)
            else {
                return Ok(None);
            };
            let (Some(charge), Some(sub)) = (
                store.charge(account_id, charge_id).await?,
                store.subscription(account_id, sub_id).await?,
            ) else {
                return Ok(None);
            };
            let hard = charge.decline_code.is_some_and(Decline::is_hard);
            let reason = match charge.decline_code {
                Some(Decline::NetworkLimit) => Some(Reason::NetworkLimit),
                _ => charge
                    .processor_message
                    .filter(|r| !r.trim().is_empty())
                    .map(Reason::Processor),
            };
            let dunning = if sub.status == Status::PastDue {
                let retry_days =
                    crate::domain::subscription::parse_retry_days(&account.dunning_retry_days);
                let link = pay_link(store, notice, &sub.id, None, public_url).await?;
                Some(Dunning {
                    next_try: (!hard).then_some(sub.next_charge_date),
                    ends: sub.first_failure_at.and_then(|first| {
                        crate::domain::subscription::cancel_at(first, &retry_days)
                    }),
                    link,
                })
            } else {
                None
            };
            Facts::PaymentFailed(Failed {
                amount_cents: charge.amount_cents,
                reason,
                hard,
                dunning,
            })
        }
        NoticeKind::SubscriptionCanceled => {
            let Some(sub_id) = &notice.subscription_id else {
                return Ok(None);
            };
            let Some(sub) = store.subscription(account_id, sub_id).await? else {
                return Ok(None);
            };
            let plan = store
                .plan(account_id, &sub.plan_id)
                .await?
                .map(|plan| plan.name)
                .unwrap_or_default();
            let why = if sub.failed_attempts > 0 {
                Why::Unpaid
            } else if store.canceled_in_portal(account_id, sub_id).await? {
                Why::Customer
            } else {
                Why::Merchant
            };
            Facts::Canceled { plan, why }
        }
        NoticeKind::CardExpiring | NoticeKind::RenewalUpcoming | NoticeKind::TrialEnding => {
            let Some(mut reminder) = remind(store, notice, kind).await? else {
                return Ok(None);
            };
            if kind == NoticeKind::CardExpiring {
                let (sub, card) = &reminder.about;
                reminder.facts.link =
                    Some(pay_link(store, notice, sub, Some(card.clone()), public_url).await?);
            }
            Facts::Reminder(reminder.facts)
        }
        NoticeKind::PortalLink => {
            let (url, expires_at) = portal_link(store, notice, public_url, now).await?;
            Facts::PortalLink { url, expires_at }
        }
    };
    Ok(Some((parties, facts)))
}

/// A new portal session for the notice's customer, of an hour from `now` (the account's
/// clock when it is sent), and its URL; only the token's hash is kept. A notice tried again
/// makes another: each link it carried opens the portal for its hour.
async fn portal_link(
    store: &Store,
    notice: &Notice,
    public_url: &str,
    now: i64,
) -> StoreResult<(String, i64)> {
    use crate::store::portal::{PortalSession, SESSION_TTL_MS, TOKEN_LEN, TOKEN_PREFIX};
    let token = crate::secrets::random_token(TOKEN_PREFIX, TOKEN_LEN);
    let expires_at = now + SESSION_TTL_MS;
    store
        .insert_portal_session(PortalSession {
            id: crate::ids::PortalSessionId::generate(),
            account_id: notice.account_id.clone(),
            customer_id: notice.customer_id.clone(),
            token_hash: crate::secrets::sha256_hex(&token),
            return_url: None,
            locale: None,
            flow_type: None,
            flow_subscription_id: None,
            expires_at,
            created_at: now,
        })
        .await?;
    Ok((format!("{public_url}/portal/{token}"), expires_at))
}

/// A new `/pay/<token>` link for the subscription `sub`: it opens the portal's card update while
/// the subscription is past due or, for an expiring `card`, while that card is the one charged
/// (`api::portal::pay`); only the token's hash is kept.
async fn pay_link(
    store: &Store,
    notice: &Notice,
    sub: &crate::ids::SubscriptionId,
    card: Option<crate::ids::PaymentMethodId>,
    public_url: &str,
) -> StoreResult<String> {
    let token = crate::secrets::random_token(PAY_TOKEN_PREFIX, PAY_TOKEN_LEN);
    store
        .insert_pay_link(PayLink {
            token_hash: crate::secrets::sha256_hex(&token),
            account_id: notice.account_id.clone(),
            subscription_id: sub.clone(),
            customer_id: notice.customer_id.clone(),
            created_at: notice.scheduled_for,
            payment_method_id: card,
        })
        .await?;
    Ok(format!("{public_url}/pay/{token}"))
}

/// A reminder's facts, with what its link needs.
struct Reminded {
    facts: Reminder,
    about: (crate::ids::SubscriptionId, crate::ids::PaymentMethodId),
}

/// What a reminder announces, read when it is sent: `None` when it no longer holds (the
/// subscription canceled or changed its date, the card replaced).
async fn remind(store: &Store, notice: &Notice, kind: NoticeKind) -> StoreResult<Option<Reminded>> {
    use crate::domain::time::Cycle;
    let account_id = &notice.account_id;
    let (Some(sub_id), Some(at)) = (
        &notice.subscription_id,
        crate::store::reminders::announced_at(&notice.cause),
    ) else {
        return Ok(None);
    };
    let Some(sub) = store.subscription(account_id, sub_id).await? else {
        return Ok(None);
    };
    let holds = sub.due_at == Some(at)
        && !sub.cancel_at_period_end
        && match kind {
            NoticeKind::RenewalUpcoming => {
                sub.status == Status::Active && sub.cycle == Cycle::Annual
            }
            NoticeKind::TrialEnding => sub.status == Status::Trialing,
            _ => matches!(sub.status, Status::Active | Status::Trialing),
        };
    if !holds {
        return Ok(None);
    }
    let Some(card) = store
        .payment_method(account_id, &sub.default_payment_method_id)
        .await?
    else {
        return Ok(None);
    };
    if kind == NoticeKind::CardExpiring && card.expires_at.is_none_or(|end| end > at) {
        return Ok(None);
    }
    let Some(plan) = store.plan(account_id, &sub.plan_id).await? else {
        return Ok(None);
    };
    let mut addons = Vec::new();
    for attached in store.subscription_addons(&sub.id).await? {
        if attached.detach_at_period_end {
            continue;
        }
        if let Some(addon) = store.addon(account_id, &attached.addon_id).await? {
            addons.push(addon);
        }
    }
    let start = crate::domain::time::from_millis(at);
    let end = crate::domain::time::period_boundary(start, sub.cycle, 1).timestamp_millis();
    let lines = crate::store::catalog::period_lines(
        &plan,
        &addons,
        sub.cycle,
        sub.quantity,
        (at, end),
        sub.discount().as_ref(),
    );
    Ok(Some(Reminded {
        facts: Reminder {
            kind,
            plan: plan.name.clone(),
            charge_at: at,
            amount_cents: lines.iter().map(|line| line.amount_cents).sum(),
            card: card_words(card.brand.as_deref(), card.last4.as_deref()),
            link: None,
        },
        about: (sub.id.clone(), card.id.clone()),
    }))
}

/// A card as its customer knows it: `VISA ···· 4242`, `···· 4242`, or nothing.
fn card_words(brand: Option<&str>, last4: Option<&str>) -> String {
    match (brand, last4) {
        (Some(brand), Some(last4)) => format!("{brand} ···· {last4}"),
        (None, Some(last4)) => format!("···· {last4}"),
        _ => String::new(),
    }
}

/// Made-up facts of `kind` for a preview (`GET /v1/notices/preview`): a customer "Ana María
/// Pérez", 49.900 pesos, dates counted from `now`, links to `public_url` that open nothing.
/// Nothing is read or written.
pub fn sample(kind: NoticeKind, merchant: &str, public_url: &str, now: i64) -> (Parties, Facts) {
    const DAY: i64 = 86_400_000;
    let parties = Parties {
        merchant: merchant.to_owned(),
        customer: "Ana María Pérez".to_owned(),
        email: Some("ana.perez@example.com".to_owned()),
        phone: Some("+573001234567".to_owned()),
        whatsapp_opt_in: true,
        sandbox: true,
    };
    let amount_cents = 4_990_000;
    let link = format!("{public_url}/pay/{PAY_TOKEN_PREFIX}preview");
    let reminder = |days: i64, link: Option<String>| Reminder {
        kind,
        plan: "Plan Pro".to_owned(),
        charge_at: now + days * DAY,
        amount_cents,
        card: card_words(Some("VISA"), Some("4242")),
        link,
    };
    let facts = match kind {
        NoticeKind::Receipt => Facts::Receipt(Receipt {
            number: "SETP990000123".to_owned(),
            total_cents: amount_cents,
            issued_at: now,
            hosted_url: format!("{public_url}/invoices/preview"),
            sheet: None,
            attached: None,
        }),
        NoticeKind::PaymentFailed => Facts::PaymentFailed(Failed {
            amount_cents,
            reason: Some(Reason::Processor("Fondos insuficientes".to_owned())),
            hard: false,
            dunning: Some(Dunning {
                next_try: Some(now + 2 * DAY),
                ends: Some(now + 7 * DAY),
                link,
            }),
        }),
        NoticeKind::SubscriptionCanceled => Facts::Canceled {
            plan: "Plan Pro".to_owned(),
            why: Why::Unpaid,
        },
        NoticeKind::CardExpiring => Facts::Reminder(reminder(14, Some(link))),
        NoticeKind::RenewalUpcoming | NoticeKind::TrialEnding => Facts::Reminder(reminder(7, None)),
        NoticeKind::PortalLink => Facts::PortalLink {
            url: format!("{public_url}/portal/bpt_preview"),
            expires_at: now + crate::store::portal::SESSION_TTL_MS,
        },
    };
    (parties, facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_reads_as_its_brand_and_last_digits() {
        assert_eq!(card_words(Some("VISA"), Some("4242")), "VISA ···· 4242");
        assert_eq!(card_words(None, Some("4242")), "···· 4242");
        assert_eq!(card_words(Some("VISA"), None), "");
    }

    #[test]
    fn every_kind_has_a_sample() {
        for kind in NoticeKind::ALL {
            let (parties, facts) = sample(*kind, "Tienda", "https://pay.example", 0);
            assert_eq!(parties.merchant, "Tienda");
            let reminder = matches!(facts, Facts::Reminder(_));
            assert_eq!(
                reminder,
                matches!(
                    kind,
                    NoticeKind::CardExpiring
                        | NoticeKind::RenewalUpcoming
                        | NoticeKind::TrialEnding
                )
            );
        }
    }
}
