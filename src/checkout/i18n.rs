//! The hosted page's two languages. The browser's `Accept-Language` chooses (by its q-values,
//! first of Spanish or English); `?lang=es|en` overrides it; Spanish is the default, the
//! language of the market the service sells in (COP).

use crate::domain::money::group_cents;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locale {
    Es,
    En,
}

impl Locale {
    /// The locale for an explicit `lang` choice, else for an `Accept-Language` header.
    pub fn choose(lang: Option<&str>, accept_language: Option<&str>) -> Self {
        if let Some(locale) = lang.and_then(Self::of_tag) {
            return locale;
        }
        let Some(header) = accept_language else {
            return Locale::Es;
        };
        let mut best: Option<(u32, usize, Locale)> = None;
        for (position, entry) in header.split(',').enumerate() {
            let mut parts = entry.split(';');
            let tag = parts.next().unwrap_or_default().trim();
            let quality = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .map_or(1000, parse_quality);
            let Some(locale) = Self::of_tag(tag) else {
                continue;
            };
            // Highest q wins; on a tie, the one the browser listed first.
            if quality > 0 && best.is_none_or(|(q, _, _)| quality > q) {
                best = Some((quality, position, locale));
            }
        }
        best.map_or(Locale::Es, |(_, _, locale)| locale)
    }

    fn of_tag(tag: &str) -> Option<Self> {
        let primary = tag.split(['-', '_']).next()?.to_ascii_lowercase();
        match primary.as_str() {
            "es" => Some(Locale::Es),
            "en" => Some(Locale::En),
            _ => None,
        }
    }

    pub fn code(self) -> &'static str {
        match self {
            Locale::Es => "es",
            Locale::En => "en",
        }
    }

    /// An amount of COP cents as people of this language write it: "$ 49.900,00 COP" or
    /// "COP 49,900.00".
    pub fn money(self, cents: i64) -> String {
        match self {
            Locale::Es => format!("$ {} COP", group_cents(cents, '.', ',')),
            Locale::En => format!("COP {}", group_cents(cents, ',', '.')),
        }
    }

    pub fn text(self) -> &'static Text {
        match self {
            Locale::Es => &ES,
            Locale::En => &EN,
        }
    }
}

/// "q=0.8" → 800 (thousandths, so no floats).
fn parse_quality(raw: &str) -> u32 {
    let (whole, fraction) = raw.trim().split_once('.').unwrap_or((raw.trim(), ""));
    let whole: u32 = whole.parse().unwrap_or(0);
    let fraction: String = fraction.chars().take(3).collect();
    let thousandths = format!("{fraction:0<3}").parse::<u32>().unwrap_or(0);
    (whole * 1000 + thousandths).min(1000)
}

/// Every string the page shows, in one language.
pub struct Text {
    pub title: &'static str,
    pub subscribe_to: &'static str,
    pub monthly: &'static str,
    pub annual: &'static str,
    pub per_month: &'static str,
    pub per_year: &'static str,
    pub due_today: &'static str,
    pub renews_monthly: &'static str,
    pub renews_annual: &'static str,
    pub your_details: &'static str,
    pub name: &'static str,
    pub email: &'static str,
    pub card: &'static str,
    pub card_number: &'static str,
    pub expiry: &'static str,
    pub expiry_placeholder: &'static str,
    pub cvc: &'static str,
    pub holder: &'static str,
    pub pay_with: &'static str,
    pub nequi: &'static str,
    pub nequi_phone: &'static str,
    pub nequi_hint: &'static str,
    pub nequi_waiting_title: &'static str,
    pub nequi_waiting_body: &'static str,
    pub nequi_waiting_note: &'static str,
    pub nequi_cancel: &'static str,
    pub subtotal: &'static str,
    pub discount: &'static str,
    pub promotion_code: &'static str,
    pub apply: &'static str,
    pub err_code: &'static str,
    pub documents: &'static str,
    pub accept_terms_prefix: &'static str,
    pub accept_terms_link: &'static str,
    pub accept_terms_suffix: &'static str,
    pub accept_personal_prefix: &'static str,
    pub accept_personal_link: &'static str,
    pub accept_personal_suffix: &'static str,
    pub accept_hint: &'static str,
    pub pay: &'static str,
    pub paying: &'static str,
    pub cancel: &'static str,
    pub secure_note: &'static str,
    pub err_name: &'static str,
    pub err_email: &'static str,
    pub err_card: &'static str,
    pub err_expiry: &'static str,
    pub err_cvc: &'static str,
    pub err_holder: &'static str,
    pub err_phone: &'static str,
    pub err_nequi_declined: &'static str,
    pub err_nequi_timeout: &'static str,
    pub err_declined: &'static str,
    pub err_processor: &'static str,
    pub err_network: &'static str,
    pub err_unavailable: &'static str,
    pub err_terms: &'static str,
    pub success: &'static str,
    pub success_body: &'static str,
    pub amount: &'static str,
    pub plan: &'static str,
    pub payment_method: &'static str,
    pub subscription: &'static str,
    pub continue_to_store: &'static str,
    pub complete_title: &'static str,
    pub complete_body: &'static str,
    pub expired_title: &'static str,
    pub expired_body: &'static str,
    pub not_found_title: &'static str,
    pub not_found_body: &'static str,
}

pub static ES: Text = Text {
    title: "Pago seguro",
    subscribe_to: "Suscripción a",
    monthly: "Mensual",
    annual: "Anual",
    per_month: "al mes",
    per_year: "al año",
    due_today: "Total a pagar hoy",
    renews_monthly: "Se renueva automáticamente cada mes. Puedes cancelar cuando quieras.",
    renews_annual: "Se renueva automáticamente cada año. Puedes cancelar cuando quieras.",
    your_details: "Tus datos",
    name: "Nombre completo",
    email: "Correo electrónico",
    card: "Tarjeta",
    card_number: "Número de tarjeta",
    expiry: "Vencimiento (MM/AA)",
    expiry_placeholder: "MM/AA",
    cvc: "CVC",
    holder: "Titular de la tarjeta",
    pay_with: "Medio de pago",
    nequi: "Nequi",
    nequi_phone: "Celular registrado en Nequi",
    nequi_hint: "Te llegará una notificación a la app Nequi para aprobar el pago.",
    nequi_waiting_title: "Aprueba el pago en tu app Nequi",
    nequi_waiting_body: "Enviamos la solicitud de pago al celular",
    nequi_waiting_note: "Abre Nequi y acepta la notificación. Esta página continúa sola cuando la apruebes.",
    nequi_cancel: "Usar otro número o medio de pago",
    subtotal: "Subtotal",
    discount: "Descuento",
    promotion_code: "Código promocional",
    apply: "Aplicar",
    err_code: "Este código no es válido para esta compra.",
    documents: "Autorizaciones",
    accept_terms_prefix: "Acepto los",
    accept_terms_link: "términos y condiciones del procesador de pagos",
    accept_terms_suffix: ".",
    accept_personal_prefix: "Autorizo el",
    accept_personal_link: "tratamiento de mis datos personales",
    accept_personal_suffix: " (Ley 1581 de 2012).",
    accept_hint: "Marca las dos casillas para poder pagar.",
    pay: "Pagar",
    paying: "Procesando pago…",
    cancel: "Cancelar y volver a la tienda",
    secure_note: "Los datos de tu tarjeta van directamente al procesador de pagos; este sitio nunca los ve.",
    err_name: "Escribe tu nombre.",
    err_email: "Escribe un correo electrónico válido.",
    err_card: "El número de tarjeta no es válido.",
    err_expiry: "La fecha de vencimiento no es válida o ya pasó.",
    err_cvc: "El CVC debe tener 3 o 4 dígitos.",
    err_holder: "Escribe el nombre como aparece en la tarjeta (mínimo 5 caracteres).",
    err_phone: "Escribe un celular de 10 dígitos que empiece por 3.",
    err_nequi_declined: "El pago con Nequi fue rechazado. Intenta con otro número o paga con tarjeta.",
    err_nequi_timeout: "No recibimos tu aprobación en Nequi a tiempo. Intenta de nuevo.",
    err_declined: "Tu tarjeta fue rechazada. Intenta con otra tarjeta.",
    err_processor: "No pudimos procesar la tarjeta. Revisa los datos o intenta con otra.",
    err_network: "No pudimos comunicarnos con el servidor. Intenta de nuevo.",
    err_unavailable: "Este comercio no puede recibir pagos en este momento.",
    err_terms: "No pudimos cargar los documentos del procesador de pagos. Recarga la página.",
    success: "¡Pago aprobado!",
    success_body: "Tu suscripción está activa. Guarda este resumen.",
    amount: "Monto",
    plan: "Plan",
    payment_method: "Medio de pago",
    subscription: "Suscripción",
    continue_to_store: "Volver a la tienda",
    complete_title: "Este pago ya fue completado",
    complete_body: "Tu suscripción está activa. No necesitas pagar de nuevo.",
    expired_title: "Esta sesión de pago expiró",
    expired_body: "Vuelve a la tienda para empezar de nuevo.",
    not_found_title: "Sesión de pago no encontrada",
    not_found_body: "Revisa el enlace que te enviaron.",
};

pub static EN: Text = Text {
    title: "Secure checkout",
    subscribe_to: "Subscribe to",
    monthly: "Monthly",
    annual: "Annual",
    per_month: "per month",
    per_year: "per year",
    due_today: "Due today",
    renews_monthly: "Renews automatically every month. Cancel any time.",
    renews_annual: "Renews automatically every year. Cancel any time.",
    your_details: "Your details",
    name: "Full name",
    email: "Email",
    card: "Card",
    card_number: "Card number",
    expiry: "Expiry (MM/YY)",
    expiry_placeholder: "MM/YY",
    cvc: "CVC",
    holder: "Cardholder name",
    pay_with: "Payment method",
    nequi: "Nequi",
    nequi_phone: "Phone number registered with Nequi",
    nequi_hint: "You will get a notification in the Nequi app to approve the payment.",
    nequi_waiting_title: "Approve the payment in your Nequi app",
    nequi_waiting_body: "We sent the payment request to",
    nequi_waiting_note: "Open Nequi and accept the notification. This page continues by itself once you approve.",
    nequi_cancel: "Use another number or payment method",
    subtotal: "Subtotal",
    discount: "Discount",
    promotion_code: "Promotion code",
    apply: "Apply",
    err_code: "This code is not valid for this purchase.",
    documents: "Authorizations",
    accept_terms_prefix: "I accept the",
    accept_terms_link: "payment processor's terms and conditions",
    accept_terms_suffix: ".",
    accept_personal_prefix: "I authorize the",
    accept_personal_link: "processing of my personal data",
    accept_personal_suffix: " (Colombian Law 1581 of 2012).",
    accept_hint: "Check both boxes to pay.",
    pay: "Pay",
    paying: "Processing payment…",
    cancel: "Cancel and return to the store",
    secure_note: "Your card details go straight to the payment processor; this site never sees them.",
    err_name: "Enter your name.",
    err_email: "Enter a valid email address.",
    err_card: "The card number is not valid.",
    err_expiry: "The expiry date is not valid or has passed.",
    err_cvc: "The CVC must be 3 or 4 digits.",
    err_holder: "Enter the name as printed on the card (at least 5 characters).",
    err_phone: "Enter a 10-digit mobile number starting with 3.",
    err_nequi_declined: "The Nequi payment was declined. Try another number or pay by card.",
    err_nequi_timeout: "We did not get your approval in Nequi in time. Try again.",
    err_declined: "Your card was declined. Try another card.",
    err_processor: "We could not process the card. Check the details or try another card.",
    err_network: "We could not reach the server. Try again.",
    err_unavailable: "This merchant cannot accept payments right now.",
    err_terms: "We could not load the payment processor's documents. Reload the page.",
    success: "Payment approved!",
    success_body: "Your subscription is active. Keep this summary for your records.",
    amount: "Amount",
    plan: "Plan",
    payment_method: "Payment method",
    subscription: "Subscription",
    continue_to_store: "Return to the store",
    complete_title: "This payment is already complete",
    complete_body: "Your subscription is active. There is nothing more to pay.",
    expired_title: "This checkout session has expired",
    expired_body: "Return to the store to start again.",
    not_found_title: "Checkout session not found",
    not_found_body: "Check the link you were sent.",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_browsers_preferred_language_wins_by_q_value() {
        assert_eq!(
            Locale::choose(None, Some("en-US,en;q=0.9,es;q=0.8")),
            Locale::En
        );
        assert_eq!(
            Locale::choose(None, Some("es-CO,es;q=0.9,en;q=0.8")),
            Locale::Es
        );
        assert_eq!(
            Locale::choose(None, Some("fr-FR,en;q=0.5,es;q=0.7")),
            Locale::Es
        );
        assert_eq!(Locale::choose(None, Some("de,en;q=0.1")), Locale::En);
        assert_eq!(Locale::choose(None, Some("de")), Locale::Es);
        assert_eq!(Locale::choose(None, None), Locale::Es);
        assert_eq!(Locale::choose(Some("en"), Some("es")), Locale::En);
    }

    #[test]
    fn money_is_written_as_each_language_writes_it() {
        assert_eq!(Locale::Es.money(4_990_000), "$ 49.900,00 COP");
        assert_eq!(Locale::En.money(4_990_000), "COP 49,900.00");
    }
}
