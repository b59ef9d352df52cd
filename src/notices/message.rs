//! What a notice says: its subject, a plain-text and an HTML body (askama, in the hosted
//! checkout's look), in the account's language, and what it carries. A receipt carries the
//! invoice's PDF; with DIAN on, one ZIP with the PDF and the AttachedDocument (CONTRACT §12a),
//! which is how DIAN's annex has the buyer receive it. Read when the notice is sent, from the
//! rows as they are then.

use crate::documents::text::Locale;
use crate::domain::notices::{NoticeKind, NoticeLocale, NoticeSettings};
use crate::domain::subscription::Status;
use crate::store::notices::Notice;
use crate::store::{Store, StoreError, StoreResult};
use askama::Template;

/// A failed payment's link token: `pay_` and 43 random characters.
pub const PAY_TOKEN_PREFIX: &str = "pay_";
const PAY_TOKEN_LEN: usize = 43;

/// A file a notice carries.
pub struct File {
    pub name: String,
    pub content_type: &'static str,
    pub bytes: Vec<u8>,
}

/// A notice as its customer reads it.
pub struct Message {
    pub to: Option<String>,
    pub to_name: Option<String>,
    pub subject: String,
    pub text: String,
    pub html: String,
    pub attachments: Vec<File>,
    /// Whether the account is a sandbox one (which addresses its SMTP host may have).
    pub sandbox: bool,
}

/// One line of the facts a notice lists (`Monto: $ 49.900,00 COP`).
struct Fact {
    label: &'static str,
    value: String,
}

#[derive(Template)]
#[template(path = "notices/templates/notice.html")]
struct Page<'a> {
    lang: &'static str,
    merchant: &'a str,
    title: &'a str,
    greeting: &'a str,
    paragraphs: &'a [String],
    facts: &'a [Fact],
    button: Option<(&'static str, &'a str)>,
    footer: &'a str,
}

/// The words of a notice in one language.
struct Words {
    hello: &'static str,
    amount: &'static str,
    date: &'static str,
    invoice: &'static str,
    reason: &'static str,
    next_try: &'static str,
    ends_on: &'static str,
    view_invoice: &'static str,
    update_card: &'static str,
    footer: &'static str,
}

const ES: Words = Words {
    hello: "Hola",
    amount: "Monto",
    date: "Fecha",
    invoice: "Factura",
    reason: "Motivo",
    next_try: "Próximo intento",
    ends_on: "Se cancela el",
    view_invoice: "Ver la factura",
    update_card: "Actualizar mi medio de pago",
    footer: "Recibes este mensaje porque tienes una suscripción con este comercio.",
};

const EN: Words = Words {
    hello: "Hello",
    amount: "Amount",
    date: "Date",
    invoice: "Invoice",
    reason: "Reason",
    next_try: "Next attempt",
    ends_on: "Canceled on",
    view_invoice: "View the invoice",
    update_card: "Update my payment method",
    footer: "You receive this message because you have a subscription with this merchant.",
};

/// A new `/pay/<token>` link for `sub` (past due): it opens the portal's card update for as
/// long as the subscription is past due (`api::portal::pay`); only the token's hash is kept.
pub(super) async fn pay_link(
    store: &Store,
    notice: &Notice,
    sub: &crate::store::subscriptions::Subscription,
    public_url: &str,
) -> StoreResult<String> {
    let token = crate::secrets::random_token(PAY_TOKEN_PREFIX, PAY_TOKEN_LEN);
    store
        .insert_pay_link(crate::store::notices::PayLink {
            token_hash: crate::secrets::sha256_hex(&token),
            account_id: notice.account_id.clone(),
            subscription_id: sub.id.clone(),
            customer_id: sub.customer_id.clone(),
            created_at: notice.scheduled_for,
        })
        .await?;
    Ok(format!("{public_url}/pay/{token}"))
}

/// The notice's message, or `None` when what it is about is gone.
pub async fn compose(
    store: &Store,
    notice: &Notice,
    kind: NoticeKind,
    settings: &NoticeSettings,
    public_url: &str,
) -> StoreResult<Option<Message>> {
    let account_id = &notice.account_id;
    let (Some(account), Some(customer)) = (
        store.account(account_id).await?,
        store.customer(account_id, &notice.customer_id).await?,
    ) else {
        return Ok(None);
    };
    let locale = match settings.locale {
        NoticeLocale::Es => Locale::Es,
        NoticeLocale::En => Locale::En,
    };
    let es = locale == Locale::Es;
    let words = if es { &ES } else { &EN };
    let money = |cents: i64| crate::documents::sheet::money(cents, locale);
    let date = |ms: i64| crate::documents::sheet::date(ms, locale);
    let merchant = account.name.clone();
    let mut paragraphs = Vec::new();
    let mut facts = Vec::new();
    let mut attachments = Vec::new();
    let mut button = None;
    let subject;
    let title;
    match kind {
        NoticeKind::Receipt => {
            let Some(invoice_id) = &notice.invoice_id else {
                return Ok(None);
            };
            let Some(invoice) = store.invoice(account_id, invoice_id).await? else {
                return Ok(None);
            };
            let sheet =
                crate::documents::electronic::invoice_sheet(store, &invoice, &account, locale)
                    .await
                    .map_err(|err| StoreError::invariant(format!("invoice sheet: {err}")))?;
            let number = sheet.number.clone();
            let stem = sheet.file_stem.clone();
            subject = if es {
                format!("Recibo de {merchant}: factura {number}")
            } else {
                format!("Receipt from {merchant}: invoice {number}")
            };
            title = if es {
                "Gracias por tu pago".to_owned()
            } else {
                "Thank you for your payment".to_owned()
            };
            paragraphs.push(if es {
                format!("Recibimos tu pago a {merchant}. Adjuntamos tu factura.")
            } else {
                format!("We received your payment to {merchant}. Your invoice is attached.")
            });
            facts.push(Fact {
                label: words.invoice,
                value: number,
            });
            facts.push(Fact {
                label: words.amount,
                value: money(invoice.total_cents),
            });
            facts.push(Fact {
                label: words.date,
                value: date(invoice.issued_at),
            });
            let pdf = tokio::task::spawn_blocking(move || crate::documents::pdf::render(&sheet))
                .await
                .map_err(|err| StoreError::invariant(format!("drawing the PDF: {err}")))?
                .map_err(|err| StoreError::invariant(format!("drawing the PDF: {err}")))?;
            let attached =
                crate::documents::electronic::attached_document(store, account_id, &invoice.id)
                    .await?;
            match attached {
                Ok(xml) => {
                    let pdf_name = format!("{stem}.pdf");
                    let xml_name = format!("{stem}.xml");
                    let files: [(&str, &[u8]); 2] =
                        [(&pdf_name, &pdf), (&xml_name, xml.as_bytes())];
                    let zip = crate::dian::soap::zip::zip_files(&files)
                        .map_err(|err| StoreError::invariant(format!("zipping: {err}")))?;
                    attachments.push(File {
                        name: format!("{stem}.zip"),
                        content_type: "application/zip",
                        bytes: zip,
                    });
                }
                Err(_) => attachments.push(File {
                    name: format!("{stem}.pdf"),
                    content_type: "application/pdf",
                    bytes: pdf,
                }),
            }
            let hosted = format!("{public_url}/invoices/{}", invoice.hosted_token);
            button = Some((words.view_invoice, hosted));
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
            subject = if es {
                format!("No pudimos cobrar tu pago a {merchant}")
            } else {
                format!("We could not take your payment to {merchant}")
            };
            title = subject.clone();
            paragraphs.push(if es {
                "Tu banco no aprobó el cobro. Actualiza tu medio de pago para mantener tu \
                 suscripción activa."
                    .to_owned()
            } else {
                "Your bank did not approve the charge. Update your payment method to keep your \
                 subscription active."
                    .to_owned()
            });
            facts.push(Fact {
                label: words.amount,
                value: money(charge.amount_cents),
            });
            if let Some(reason) = charge
                .processor_message
                .as_deref()
                .filter(|r| !r.is_empty())
            {
                facts.push(Fact {
                    label: words.reason,
                    value: reason.to_owned(),
                });
            }
            if sub.status == Status::PastDue {
                // The link opens the portal's card update for this subscription for as long as
                // it is past due (`api::portal::pay`); only its hash is kept.
                let link = pay_link(store, notice, &sub, public_url).await?;
                button = Some((words.update_card, link));
                facts.push(Fact {
                    label: words.next_try,
                    value: date(sub.next_charge_date),
                });
                let retry_days =
                    crate::domain::subscription::parse_retry_days(&account.dunning_retry_days);
                if let (Some(first), Some(&last)) = (sub.first_failure_at, retry_days.last()) {
                    facts.push(Fact {
                        label: words.ends_on,
                        value: date(first + last * 86_400_000),
                    });
                }
            }
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
            subject = if es {
                format!("Tu suscripción a {plan} de {merchant} fue cancelada")
            } else {
                format!("Your {plan} subscription with {merchant} was canceled")
            };
            title = subject.clone();
            let unpaid = sub.failed_attempts > 0;
            let by_customer = store.canceled_in_portal(account_id, sub_id).await?;
            paragraphs.push(match (es, unpaid, by_customer) {
                (true, true, _) => "La cancelamos porque no pudimos cobrar sus pagos.".to_owned(),
                (false, true, _) => {
                    "We canceled it because its payments could not be taken.".to_owned()
                }
                (true, false, true) => "La cancelaste desde tu portal de cliente.".to_owned(),
                (false, false, true) => "You canceled it from your customer portal.".to_owned(),
                (true, false, false) => format!("{merchant} la canceló."),
                (false, false, false) => format!("{merchant} canceled it."),
            });
        }
        NoticeKind::CardExpiring | NoticeKind::RenewalUpcoming | NoticeKind::TrialEnding => {
            return Ok(None);
        }
    }
    let greeting = format!("{} {},", words.hello, customer.name);
    let page = Page {
        lang: locale.code(),
        merchant: &merchant,
        title: &title,
        greeting: &greeting,
        paragraphs: &paragraphs,
        facts: &facts,
        button: button.as_ref().map(|(label, url)| (*label, url.as_str())),
        footer: words.footer,
    };
    let html = page
        .render()
        .map_err(|err| StoreError::invariant(format!("notice template: {err}")))?;
    let mut text = format!("{greeting}\n\n{title}\n\n");
    for paragraph in &paragraphs {
        text.push_str(paragraph);
        text.push_str("\n\n");
    }
    for fact in &facts {
        text.push_str(&format!("{}: {}\n", fact.label, fact.value));
    }
    if let Some((label, url)) = &button {
        text.push_str(&format!("\n{label}: {url}\n"));
    }
    text.push_str(&format!("\n-- \n{merchant}\n{}\n", words.footer));
    Ok(Some(Message {
        to: Some(customer.email).filter(|email| !email.is_empty()),
        to_name: Some(customer.name),
        subject,
        text,
        html,
        attachments,
        sandbox: account.sandbox,
    }))
}
