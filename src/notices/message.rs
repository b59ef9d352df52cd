//! What a notice says: its subject, a plain-text and an HTML body (askama, in the hosted
//! checkout's look), in the account's language, and what it carries. A receipt carries the
//! invoice's PDF; with DIAN on, one ZIP with the PDF and the AttachedDocument (CONTRACT §12a),
//! which is how DIAN's annex has the buyer receive it. Read when the notice is sent, from the
//! rows as they are then.

use crate::documents::text::Locale;
use crate::domain::decline::Decline;
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
    /// What "next attempt" says after a hard decline: none, the card is not tried again.
    no_retry: &'static str,
    /// The reason of a retry the card network's limit stopped (no processor's words).
    network_limit: &'static str,
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
    no_retry: "Ninguno: no volveremos a intentar con esta tarjeta; necesitamos una nueva",
    network_limit: "Se alcanzó el límite de reintentos de la red de tu tarjeta",
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
    no_retry: "None: we will not try this card again; we need a new one",
    network_limit: "Your card network's limit on repeated attempts was reached",
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
            payment_method_id: None,
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
            // A hard decline (`Decline::is_hard`) is not retried: the customer is asked for a
            // new card at once, and no next attempt is promised.
            let decline = charge.decline_code;
            let hard = decline.is_some_and(Decline::is_hard);
            paragraphs.push(match (es, hard) {
                (true, false) => "Tu banco no aprobó el cobro. Actualiza tu medio de pago para \
                                  mantener tu suscripción activa."
                    .to_owned(),
                (false, false) => "Your bank did not approve the charge. Update your payment \
                                   method to keep your subscription active."
                    .to_owned(),
                (true, true) => "Tu banco rechazó la tarjeta y no volveremos a intentar con \
                                 ella. Agrega una tarjeta nueva para mantener tu suscripción \
                                 activa: la cobraremos en cuanto la agregues."
                    .to_owned(),
                (false, true) => "Your bank refused the card, and we will not try it again. Add \
                                  a new card to keep your subscription active: we will charge \
                                  it as soon as you add it."
                    .to_owned(),
            });
            facts.push(Fact {
                label: words.amount,
                value: money(charge.amount_cents),
            });
            let reason = match decline {
                Some(Decline::NetworkLimit) => Some(words.network_limit),
                _ => charge
                    .processor_message
                    .as_deref()
                    .filter(|r| !r.is_empty()),
            };
            if let Some(reason) = reason {
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
                    value: if hard {
                        words.no_retry.to_owned()
                    } else {
                        date(sub.next_charge_date)
                    },
                });
                let retry_days =
                    crate::domain::subscription::parse_retry_days(&account.dunning_retry_days);
                let ends = sub
                    .first_failure_at
                    .and_then(|first| crate::domain::subscription::cancel_at(first, &retry_days));
                if let Some(ends) = ends {
                    facts.push(Fact {
                        label: words.ends_on,
                        value: date(ends),
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
            let Some(reminder) = remind(store, notice, kind).await? else {
                return Ok(None);
            };
            let when = date(reminder.charge_at);
            let amount = money(reminder.amount_cents);
            let card = match (&reminder.card.brand, &reminder.card.last4) {
                (Some(brand), Some(last4)) => format!("{brand} ···· {last4}"),
                (None, Some(last4)) => format!("···· {last4}"),
                _ => String::new(),
            };
            let plan = &reminder.plan;
            match kind {
                NoticeKind::RenewalUpcoming => {
                    subject = if es {
                        format!("Tu suscripción anual a {plan} se renueva el {when}")
                    } else {
                        format!("Your annual {plan} subscription renews on {when}")
                    };
                    paragraphs.push(if es {
                        format!(
                            "El {when} cobraremos {amount} por un año más de {plan} con {merchant}. \
                             Si quieres cambiar o cancelar tu plan, hazlo antes de esa fecha."
                        )
                    } else {
                        format!(
                            "On {when} we will charge {amount} for another year of {plan} with \
                             {merchant}. To change or cancel your plan, do so before then."
                        )
                    });
                }
                NoticeKind::TrialEnding => {
                    subject = if es {
                        format!("Tu periodo de prueba de {plan} termina el {when}")
                    } else {
                        format!("Your {plan} trial ends on {when}")
                    };
                    paragraphs.push(if es {
                        format!(
                            "Tu prueba gratuita de {plan} con {merchant} termina el {when}; ese \
                             día cobraremos {amount}. Si no quieres continuar, cancela antes."
                        )
                    } else {
                        format!(
                            "Your free trial of {plan} with {merchant} ends on {when}; that day \
                             we will charge {amount}. If you do not want to go on, cancel before."
                        )
                    });
                }
                _ => {
                    subject = if es {
                        format!("Tu tarjeta vence antes de tu próximo pago a {merchant}")
                    } else {
                        format!("Your card expires before your next payment to {merchant}")
                    };
                    paragraphs.push(if es {
                        format!(
                            "Tu tarjeta {card} vence antes del {when}, cuando cobraremos \
                             {amount}. Actualízala para que tu suscripción a {plan} siga activa."
                        )
                    } else {
                        format!(
                            "Your card {card} expires before {when}, when we will charge \
                             {amount}. Update it to keep your {plan} subscription active."
                        )
                    });
                    let token = crate::secrets::random_token(PAY_TOKEN_PREFIX, PAY_TOKEN_LEN);
                    store
                        .insert_pay_link(crate::store::notices::PayLink {
                            token_hash: crate::secrets::sha256_hex(&token),
                            account_id: account_id.clone(),
                            subscription_id: reminder.subscription_id.clone(),
                            customer_id: notice.customer_id.clone(),
                            created_at: notice.scheduled_for,
                            payment_method_id: Some(reminder.card.id.clone()),
                        })
                        .await?;
                    button = Some((words.update_card, format!("{public_url}/pay/{token}")));
                }
            }
            title = subject.clone();
            facts.push(Fact {
                label: words.amount,
                value: amount,
            });
            facts.push(Fact {
                label: words.date,
                value: when,
            });
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

/// What a reminder announces, read when it is sent: `None` when it no longer holds (the
/// subscription canceled or changed its date, the card replaced), and the notice is then
/// suppressed.
struct Reminder {
    subscription_id: crate::ids::SubscriptionId,
    plan: String,
    charge_at: i64,
    amount_cents: i64,
    card: crate::store::charges::PaymentMethod,
}

async fn remind(store: &Store, notice: &Notice, kind: NoticeKind) -> StoreResult<Option<Reminder>> {
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
    Ok(Some(Reminder {
        subscription_id: sub.id.clone(),
        plan: plan.name.clone(),
        charge_at: at,
        amount_cents: lines.iter().map(|line| line.amount_cents).sum(),
        card,
    }))
}
