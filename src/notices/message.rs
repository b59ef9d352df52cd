//! What a notice says by e-mail: its subject, a plain-text and an HTML body (askama, in the
//! hosted checkout's look), in the account's language, and what it carries, from the facts
//! `facts::read` gathered (or `facts::sample`'s, for a preview). A receipt carries the
//! invoice's PDF; with DIAN on, one ZIP with the PDF and the AttachedDocument (CONTRACT §12a),
//! which is how DIAN's annex has the buyer receive it.

use super::facts::{self, Facts, Parties, Reason, Why};
use crate::documents::text::Locale;
use crate::domain::notices::{NoticeKind, NoticeLocale, NoticeSettings};
use crate::store::notices::Notice;
use crate::store::{Store, StoreError, StoreResult};
use askama::Template;

pub use super::facts::PAY_TOKEN_PREFIX;

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
    open_portal: &'static str,
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
    open_portal: "Abrir mi portal",
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
    open_portal: "Open my portal",
    no_retry: "None: we will not try this card again; we need a new one",
    network_limit: "Your card network's limit on repeated attempts was reached",
    footer: "You receive this message because you have a subscription with this merchant.",
};

/// The language notices of `settings` are written in.
pub fn locale_of(settings: &NoticeSettings) -> Locale {
    locale_for(settings.locale)
}

/// The documents' language of a notices' locale.
pub fn locale_for(locale: NoticeLocale) -> Locale {
    match locale {
        NoticeLocale::Es => Locale::Es,
        NoticeLocale::En => Locale::En,
    }
}

/// The notice's message, or `None` when what it is about is gone; `at` is the public URL and
/// the account's clock now.
pub async fn compose(
    store: &Store,
    notice: &Notice,
    kind: NoticeKind,
    settings: &NoticeSettings,
    at: (&str, i64),
) -> StoreResult<Option<Message>> {
    let locale = locale_of(settings);
    let carried = (locale, facts::Carried::Files);
    let Some((parties, mut facts)) = facts::read(store, notice, kind, carried, at).await? else {
        return Ok(None);
    };
    let attachments = match &mut facts {
        Facts::Receipt(receipt) => attachments(receipt).await?,
        _ => Vec::new(),
    };
    let mut message = render(&parties, &facts, locale)?;
    message.attachments = attachments;
    Ok(Some(message))
}

/// What a receipt carries: the invoice's PDF, or with DIAN's AttachedDocument one ZIP of both.
/// The PDF is drawn off the async workers.
async fn attachments(receipt: &mut facts::Receipt) -> StoreResult<Vec<File>> {
    let Some(sheet) = receipt.sheet.take() else {
        return Ok(Vec::new());
    };
    let stem = sheet.file_stem.clone();
    let pdf = tokio::task::spawn_blocking(move || crate::documents::pdf::render(&sheet))
        .await
        .map_err(|err| StoreError::invariant(format!("drawing the PDF: {err}")))?
        .map_err(|err| StoreError::invariant(format!("drawing the PDF: {err}")))?;
    Ok(vec![match &receipt.attached {
        Some(xml) => {
            let pdf_name = format!("{stem}.pdf");
            let xml_name = format!("{stem}.xml");
            let files: [(&str, &[u8]); 2] = [(&pdf_name, &pdf), (&xml_name, xml.as_bytes())];
            let zip = crate::dian::soap::zip::zip_files(&files)
                .map_err(|err| StoreError::invariant(format!("zipping: {err}")))?;
            File {
                name: format!("{stem}.zip"),
                content_type: "application/zip",
                bytes: zip,
            }
        }
        None => File {
            name: format!("{stem}.pdf"),
            content_type: "application/pdf",
            bytes: pdf,
        },
    }])
}

/// The e-mail that says `facts` from `parties.merchant` to `parties.customer`, without
/// attachments. Pure: a preview renders made-up facts through it.
pub fn render(parties: &Parties, facts: &Facts, locale: Locale) -> StoreResult<Message> {
    let es = locale == Locale::Es;
    let words = if es { &ES } else { &EN };
    let money = |cents: i64| crate::documents::sheet::money(cents, locale);
    let date = |ms: i64| crate::documents::sheet::date(ms, locale);
    let merchant = parties.merchant.as_str();
    let mut paragraphs = Vec::new();
    let mut facts_listed = Vec::new();
    let mut button = None;
    let subject;
    let mut title = None;
    match facts {
        Facts::Receipt(receipt) => {
            let number = &receipt.number;
            subject = if es {
                format!("Recibo de {merchant}: factura {number}")
            } else {
                format!("Receipt from {merchant}: invoice {number}")
            };
            title = Some(if es {
                "Gracias por tu pago".to_owned()
            } else {
                "Thank you for your payment".to_owned()
            });
            paragraphs.push(if es {
                format!("Recibimos tu pago a {merchant}. Adjuntamos tu factura.")
            } else {
                format!("We received your payment to {merchant}. Your invoice is attached.")
            });
            facts_listed.push(Fact {
                label: words.invoice,
                value: number.clone(),
            });
            facts_listed.push(Fact {
                label: words.amount,
                value: money(receipt.total_cents),
            });
            facts_listed.push(Fact {
                label: words.date,
                value: date(receipt.issued_at),
            });
            button = Some((words.view_invoice, receipt.hosted_url.clone()));
        }
        Facts::PaymentFailed(failed) => {
            subject = if es {
                format!("No pudimos cobrar tu pago a {merchant}")
            } else {
                format!("We could not take your payment to {merchant}")
            };
            // A hard decline is not retried: the customer is asked for a new card at once,
            // and no next attempt is promised.
            paragraphs.push(match (es, failed.hard) {
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
            facts_listed.push(Fact {
                label: words.amount,
                value: money(failed.amount_cents),
            });
            if let Some(reason) = &failed.reason {
                facts_listed.push(Fact {
                    label: words.reason,
                    value: reason_words(reason, locale).to_owned(),
                });
            }
            if let Some(dunning) = &failed.dunning {
                button = Some((words.update_card, dunning.link.clone()));
                facts_listed.push(Fact {
                    label: words.next_try,
                    value: match dunning.next_try {
                        Some(at) => date(at),
                        None => words.no_retry.to_owned(),
                    },
                });
                if let Some(ends) = dunning.ends {
                    facts_listed.push(Fact {
                        label: words.ends_on,
                        value: date(ends),
                    });
                }
            }
        }
        Facts::Canceled { plan, why } => {
            subject = if es {
                format!("Tu suscripción a {plan} de {merchant} fue cancelada")
            } else {
                format!("Your {plan} subscription with {merchant} was canceled")
            };
            paragraphs.push(match (es, why) {
                (true, Why::Unpaid) => {
                    "La cancelamos porque no pudimos cobrar sus pagos.".to_owned()
                }
                (false, Why::Unpaid) => {
                    "We canceled it because its payments could not be taken.".to_owned()
                }
                (true, Why::Customer) => "La cancelaste desde tu portal de cliente.".to_owned(),
                (false, Why::Customer) => "You canceled it from your customer portal.".to_owned(),
                (true, Why::Merchant) => format!("{merchant} la canceló."),
                (false, Why::Merchant) => format!("{merchant} canceled it."),
            });
        }
        Facts::Reminder(reminder) => {
            let when = date(reminder.charge_at);
            let amount = money(reminder.amount_cents);
            let (plan, card) = (&reminder.plan, &reminder.card);
            match (reminder.kind, &reminder.link) {
                (NoticeKind::TrialEnding, _) => {
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
                (NoticeKind::RenewalUpcoming, _) | (_, None) => {
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
                (_, Some(link)) => {
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
                    button = Some((words.update_card, link.clone()));
                }
            }
            facts_listed.push(Fact {
                label: words.amount,
                value: amount,
            });
            facts_listed.push(Fact {
                label: words.date,
                value: when,
            });
        }
        Facts::PortalLink { url, expires_at } => {
            let until = crate::documents::sheet::date_time(*expires_at, locale);
            subject = if es {
                format!("Tu acceso al portal de {merchant}")
            } else {
                format!("Your access to {merchant}'s portal")
            };
            paragraphs.push(if es {
                format!(
                    "{merchant} te envía este enlace a tu portal de cliente: allí ves tus \
                     suscripciones y facturas, cambias tu tarjeta o cancelas. El enlace abre \
                     el portal hasta el {until}; después pide otro."
                )
            } else {
                format!(
                    "{merchant} sends you this link to your customer portal: see your \
                     subscriptions and invoices, replace your card or cancel. The link opens \
                     the portal until {until}; after that, ask for another."
                )
            });
            button = Some((words.open_portal, url.clone()));
        }
    }
    let title = title.unwrap_or_else(|| subject.clone());
    let greeting = format!("{} {},", words.hello, parties.customer);
    let page = Page {
        lang: locale.code(),
        merchant,
        title: &title,
        greeting: &greeting,
        paragraphs: &paragraphs,
        facts: &facts_listed,
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
    for fact in &facts_listed {
        text.push_str(&format!("{}: {}\n", fact.label, fact.value));
    }
    if let Some((label, url)) = &button {
        text.push_str(&format!("\n{label}: {url}\n"));
    }
    text.push_str(&format!("\n-- \n{merchant}\n{}\n", words.footer));
    Ok(Message {
        to: parties.email.clone(),
        to_name: Some(parties.customer.clone()),
        subject,
        text,
        html,
        attachments: Vec::new(),
        sandbox: parties.sandbox,
    })
}

/// A decline's reason as the customer reads it.
pub fn reason_words(reason: &Reason, locale: Locale) -> &str {
    let words = if locale == Locale::Es { &ES } else { &EN };
    match reason {
        Reason::NetworkLimit => words.network_limit,
        Reason::Processor(message) => message,
    }
}
