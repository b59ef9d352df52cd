//! The console's words, Spanish first: each key with its Spanish and its English. Templates
//! ask `t.get("key")`; a key missing here shows as itself (a unit test finds every key the
//! templates and the code ask for).

use crate::checkout::i18n::Locale;

/// The words of one language.
#[derive(Clone, Copy)]
pub struct Tr(pub Locale);

impl Tr {
    pub fn code(self) -> &'static str {
        self.0.code()
    }

    /// The words of `key`, or the key itself.
    pub fn get(self, key: &str) -> &'static str {
        self.find(key).unwrap_or_else(|| {
            tracing::debug!(key, "a console word is missing");
            WORDS
                .iter()
                .find(|(k, _, _)| *k == "missing")
                .map_or("?", |(_, es, _)| es)
        })
    }

    /// The words of `key`, if there are any.
    pub fn find(self, key: &str) -> Option<&'static str> {
        WORDS
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, es, en)| if self.0 == Locale::En { *en } else { *es })
    }
}

/// Key, Spanish, English (a line each, however long).
#[rustfmt::skip]
const WORDS: &[(&str, &str, &str)] = &[
    ("missing", "—", "—"),
    ("console", "Consola", "Console"),
    ("skip", "Ir al contenido", "Skip to content"),
    ("nav", "Secciones", "Sections"),
    ("nav_home", "Inicio", "Home"),
    ("nav_customers", "Clientes", "Customers"),
    ("nav_invoices", "Facturas", "Invoices"),
    ("nav_exports", "Exportar", "Exports"),
    ("nav_settings", "Ajustes", "Settings"),
    ("sign_out", "Cerrar sesión", "Sign out"),
    ("sign_out_everywhere", "Cerrar todas mis sesiones", "Sign out everywhere"),
    ("signed_out", "Cerraste la sesión.", "You signed out."),
    ("role_admin", "Administración", "Admin"),
    ("role_support", "Soporte", "Support"),
    ("role_accountant", "Contabilidad", "Accountant"),
    ("role", "Rol", "Role"),
    ("login_title", "Entrar a la consola", "Sign in to the console"),
    ("email", "Correo electrónico", "E-mail"),
    ("password", "Contraseña", "Password"),
    ("sign_in", "Entrar", "Sign in"),
    ("other_language", "English", "Español"),
    ("wrong_login", "El correo o la contraseña no son correctos.", "The e-mail or the password is wrong."),
    ("stale_login", "El formulario caducó. Inténtalo de nuevo.", "The form expired. Try again."),
    ("too_many_logins", "Demasiados intentos. Espera un minuto e inténtalo de nuevo.", "Too many attempts. Wait a minute and try again."),
    ("invitation_title", "Crea tu contraseña", "Set your password"),
    ("invitation_for", "Invitación para", "Invitation for"),
    ("invitation_closed", "Esta invitación ya no sirve: se usó, venció o la retiraron. Pide una nueva a quien administra la cuenta.", "This invitation no longer opens: it was used, it expired or it was withdrawn. Ask the account's admin for a new one."),
    ("new_password", "Nueva contraseña", "New password"),
    ("password_again", "Repite la contraseña", "Repeat the password"),
    ("password_rule", "Al menos 12 caracteres.", "At least 12 characters."),
    ("set_password", "Guardar y entrar", "Save and sign in"),
    ("too_short", "La contraseña debe tener al menos 12 caracteres.", "The password needs at least 12 characters."),
    ("too_long", "La contraseña es demasiado larga.", "The password is too long."),
    ("passwords_differ", "Las dos contraseñas no coinciden.", "The two passwords differ."),
    ("back", "Volver", "Back"),
    ("go_back", "No, volver", "No, go back"),
    ("forbidden", "No permitido", "Not allowed"),
    ("not_found", "No encontrado", "Not found"),
    ("problem", "No se pudo", "It did not work"),
    ("no_such_customer", "No existe ese cliente.", "There is no such customer."),
    ("admins_only", "Solo quien administra la cuenta puede hacer esto.", "Only the account's admins may do this."),
    ("support_only", "Tu rol solo permite consultar.", "Your role may only read."),
    ("stale_form", "El formulario caducó o no vino de esta página. Vuelve a abrirla.", "The form expired or did not come from this page. Open it again."),
    ("home_title", "Resumen", "Overview"),
    ("figures", "Cifras", "Figures"),
    ("mrr", "Ingreso recurrente mensual (MRR)", "Monthly recurring revenue (MRR)"),
    ("active_subscriptions", "Suscripciones activas", "Active subscriptions"),
    ("fee_balance", "Saldo para comisiones", "Fee balance"),
    ("balance_low", "El saldo está bajo: recárgalo para que los cobros no se detengan.", "The balance is low: top it up so that charges do not stop."),
    ("range_near_end", "Rango de numeración DIAN por terminar:", "DIAN numbering range near its end:"),
    ("remaining", "quedan", "remaining"),
    ("valid_to", "vence", "valid to"),
    ("documents_waiting", "Documentos esperando a la DIAN", "Documents waiting for DIAN"),
    ("awaiting_range", "falta un rango de numeración vigente", "no numbering range valid today"),
    ("numbering_failed", "la numeración falló", "numbering failed"),
    ("invoice_rejected", "la DIAN rechazó la factura", "DIAN rejected the invoice"),
    ("settings", "revisa los ajustes de la DIAN", "check the DIAN settings"),
    ("mrr_months", "MRR de los últimos 12 meses", "MRR over the last 12 months"),
    ("month", "Mes", "Month"),
    ("movements", "Movimientos del mes", "This month's movements"),
    ("movement", "Movimiento", "Movement"),
    ("amount", "Valor", "Amount"),
    ("failed_this_week", "Pagos fallidos esta semana", "Failed payments this week"),
    ("none_failed", "Ningún pago falló esta semana.", "No payment failed this week."),
    ("date", "Fecha", "Date"),
    ("customer", "Cliente", "Customer"),
    ("reason", "Motivo", "Reason"),
    ("decline_insufficient_funds", "Fondos insuficientes", "Insufficient funds"),
    ("decline_expired_card", "Tarjeta vencida", "Expired card"),
    ("decline_stolen_card", "Tarjeta reportada como robada", "Card reported stolen"),
    ("decline_lost_card", "Tarjeta reportada como perdida", "Card reported lost"),
    ("decline_invalid_card", "Tarjeta inválida", "Invalid card"),
    ("decline_do_not_honor", "El banco no autorizó el pago", "The bank did not honour the payment"),
    ("decline_closed_account", "Cuenta cerrada", "Account closed"),
    ("decline_try_again_later", "El banco pidió intentar más tarde", "The bank asked to try later"),
    ("decline_network_limit", "Límite de reintentos de la red de la tarjeta", "The card network's reattempt limit"),
    ("decline_generic_decline", "Pago rechazado", "Payment declined"),
    ("search_label", "Buscar por correo, nombre o NIT", "Search by e-mail, name or NIT"),
    ("search", "Buscar", "Search"),
    ("no_customers", "Ningún cliente coincide.", "No customer matches."),
    ("name", "Nombre", "Name"),
    ("since", "Desde", "Since"),
    ("phone", "Teléfono", "Phone"),
    ("subscriptions", "Suscripciones", "Subscriptions"),
    ("subscription", "Suscripción", "Subscription"),
    ("plan", "Plan", "Plan"),
    ("status", "Estado", "Status"),
    ("next_charge", "Próximo cobro", "Next charge"),
    ("none", "Ninguno.", "None."),
    ("payment_methods", "Medios de pago", "Payment methods"),
    ("card", "Tarjeta", "Card"),
    ("nequi", "Nequi", "Nequi"),
    ("number", "Número", "Number"),
    ("total", "Total", "Total"),
    ("downloads", "Descargas", "Downloads"),
    ("notices_sent", "Avisos al cliente", "Notices to the customer"),
    ("kind", "Tipo", "Kind"),
    ("channel", "Canal", "Channel"),
    ("status_active", "Activa", "Active"),
    ("status_trialing", "En prueba", "Trialing"),
    ("status_past_due", "Pago pendiente", "Past due"),
    ("status_paused", "Pausada", "Paused"),
    ("status_canceled", "Cancelada", "Canceled"),
    ("status_paused_insufficient_balance", "Detenida: falta saldo", "Stopped: balance too low"),
    ("notice_receipt", "Recibo", "Receipt"),
    ("notice_payment_failed", "Pago fallido", "Payment failed"),
    ("notice_card_expiring", "Tarjeta por vencer", "Card expiring"),
    ("notice_renewal_upcoming", "Renovación próxima", "Renewal upcoming"),
    ("notice_trial_ending", "Fin de la prueba", "Trial ending"),
    ("notice_subscription_canceled", "Suscripción cancelada", "Subscription canceled"),
    ("notice_status_sent", "Enviado", "Sent"),
    ("notice_status_scheduled", "Programado", "Scheduled"),
    ("notice_status_failed", "Falló", "Failed"),
    ("notice_status_suppressed", "No enviado", "Suppressed"),
    ("credit_note", "Nota crédito", "Credit note"),
    ("dian_accepted", "Aceptada", "Accepted"),
    ("dian_rejected", "Rechazada", "Rejected"),
    ("dian_pending", "En trámite", "Pending"),
    ("dian_off", "Sin DIAN", "No DIAN"),
    ("dian_any", "Todas", "Any"),
    ("period", "Periodo", "Period"),
    ("ends", "Termina", "Ends"),
    ("failed_attempts", "Intentos fallidos", "Failed attempts"),
    ("actions", "Acciones", "Actions"),
    ("pause", "Pausar", "Pause"),
    ("resume", "Reanudar", "Resume"),
    ("charge_now", "Cobrar ahora", "Charge now"),
    ("portal_link", "Crear enlace del portal", "Make a portal link"),
    ("cancel", "Cancelar suscripción", "Cancel subscription"),
    ("change_plan_to", "Cambiar al plan", "Change to plan"),
    ("preview_change", "Ver qué cobra", "See what it charges"),
    ("choose_plan", "Elige un plan.", "Choose a plan."),
    ("charges", "Cobros", "Charges"),
    ("refunded", "Reembolsado", "Refunded"),
    ("refund", "Reembolsar", "Refund"),
    ("refund_amount", "Valor a reembolsar (vacío: todo)", "Amount to refund (empty: all)"),
    ("charge_approved", "Aprobado", "Approved"),
    ("charge_declined", "Rechazado", "Declined"),
    ("charge_pending", "En trámite", "Pending"),
    ("charge_voided", "Anulado", "Voided"),
    ("charge_error", "Error", "Error"),
    ("timeline", "Historia", "Timeline"),
    ("confirm", "Sí, hacerlo", "Yes, do it"),
    ("confirm_cancel", "¿Cancelar esta suscripción?", "Cancel this subscription?"),
    ("confirm_pause", "¿Pausar esta suscripción? No se cobrará mientras esté pausada.", "Pause this subscription? It is not charged while paused."),
    ("confirm_resume", "¿Reanudar esta suscripción?", "Resume this subscription?"),
    ("confirm_charge_now", "¿Cobrar ahora a esta suscripción?", "Charge this subscription now?"),
    ("confirm_change_plan", "¿Cambiar de plan?", "Change plan?"),
    ("confirm_refund", "¿Reembolsar este cobro?", "Refund this charge?"),
    ("period_ends_on", "El periodo pagado termina el", "The paid period ends on"),
    ("when", "Cuándo", "When"),
    ("at_period_end", "Al final del periodo pagado", "At the end of the paid period"),
    ("immediately", "Ahora mismo", "Right now"),
    ("charged_now", "Se cobra ahora:", "Charged now:"),
    ("credited_next", "Se abona al próximo cobro:", "Credited to the next charge:"),
    ("refund_of", "Se devuelve:", "Given back:"),
    ("charge_of", "Del cobro de", "Of the charge of"),
    ("bad_amount", "Escribe un valor en pesos, por ejemplo 10.000,00.", "Type an amount in pesos, such as 10,000.00."),
    ("action_done", "Hecho.", "Done."),
    ("refund_done", "Reembolso solicitado.", "Refund requested."),
    ("portal_link_made", "Enlace del portal para el cliente (vale una hora):", "Portal link for the customer (valid for an hour):"),
    ("done", "hecho", "done"),
    ("refused", "rechazado", "refused"),
    ("unanswered", "sin respuesta", "unanswered"),
    ("action_cancel", "Cancelación", "Cancellation"),
    ("action_pause", "Pausa", "Pause"),
    ("action_resume", "Reanudación", "Resumption"),
    ("action_charge_now", "Cobro inmediato", "Charge now"),
    ("action_change_plan", "Cambio de plan", "Plan change"),
    ("action_refund", "Reembolso", "Refund"),
    ("action_portal_link", "Enlace del portal", "Portal link"),
    ("event_subscription_created", "Suscripción creada", "Subscription created"),
    ("event_subscription_past_due", "Pago pendiente", "Past due"),
    ("event_subscription_canceled", "Cancelada", "Canceled"),
    ("event_subscription_paused", "Pausada", "Paused"),
    ("event_subscription_resumed", "Reanudada", "Resumed"),
    ("event_subscription_plan_changed", "Cambio de plan", "Plan changed"),
    ("event_charge_approved", "Cobro aprobado", "Charge approved"),
    ("event_charge_declined", "Cobro rechazado", "Charge declined"),
    ("event_charge_refunded", "Cobro reembolsado", "Charge refunded"),
    ("event_invoice_created", "Factura emitida", "Invoice issued"),
    ("event_invoice_dian_accepted", "La DIAN aceptó la factura", "DIAN accepted the invoice"),
    ("event_invoice_dian_rejected", "La DIAN rechazó la factura", "DIAN rejected the invoice"),
    ("event_credit_note_created", "Nota crédito emitida", "Credit note issued"),
    ("from_day", "Desde el día", "From"),
    ("to_day", "Hasta el día", "To"),
    ("document", "Documento", "Document"),
    ("invoices", "Facturas", "Invoices"),
    ("credit_notes", "Notas crédito", "Credit notes"),
    ("filter", "Filtrar", "Filter"),
    ("no_documents", "Ningún documento coincide.", "No document matches."),
    ("more", "Más", "More"),
    ("export_month", "Documentos de un mes", "A month's documents"),
    ("export_explain", "El CSV trae una fila por factura y nota crédito (para la contabilidad); el ZIP, sus PDF y XML.", "The CSV holds a row per invoice and credit note (for the books); the ZIP, their PDFs and XML."),
    ("format", "Formato", "Format"),
    ("format_csv", "CSV para la contabilidad", "CSV for the books"),
    ("format_zip", "ZIP con PDF y XML", "ZIP of PDFs and XML"),
    ("download", "Descargar", "Download"),
    ("bad_month", "Elige un mes.", "Choose a month."),
    ("bad_format", "Elige un formato.", "Choose a format."),
    ("invoicing_and_dian", "Facturación y DIAN", "Invoicing and DIAN"),
    ("legal_name", "Razón social", "Legal name"),
    ("tax_regime", "Régimen", "Tax regime"),
    ("environment", "Ambiente", "Environment"),
    ("certificate_expires", "El certificado vence", "The certificate expires"),
    ("numbering_range", "Rango de numeración", "Numbering range"),
    ("notices", "Avisos a clientes", "Notices to customers"),
    ("sender", "Remitente", "Sender"),
    ("language", "Idioma", "Language"),
    ("portal", "Portal del cliente", "Customer portal"),
    ("portal_cancel", "Cancelar", "Cancel"),
    ("portal_switch", "Cambiar de plan", "Switch plan"),
    ("portal_method", "Cambiar el medio de pago", "Replace the payment method"),
    ("portal_invoices", "Ver facturas", "See invoices"),
    ("people", "Personas con acceso", "People with access"),
    ("person_invited", "Invitada", "Invited"),
    ("person_active", "Activa", "Active"),
    ("person_removed", "Retirada", "Removed"),
    ("confirm_portal_link", "¿Enviar el enlace del portal a", "Send the portal link to"),
    ("portal_link_explain", "El enlace abre el portal del cliente durante una hora: puede cambiar su tarjeta, cancelar y ver sus facturas.", "The link opens the customer's portal for an hour: they may replace their card, cancel and see their invoices."),
    ("send", "Enviar", "Send"),
    ("mail_sent", "Correo enviado a", "E-mail sent to"),
    ("mail_refused", "El servidor de correo lo rechazó:", "The mail server refused it:"),
    ("mail_unknown", "No se sabe si el correo llegó: revisa antes de enviarlo otra vez", "It is not known whether the e-mail arrived: check before sending it again"),
    ("mail_off", "La cuenta no envía correos: actívalos en los avisos a clientes.", "The account sends no e-mail: turn it on in the notices to customers."),
    ("portal_mail_subject", "Tu acceso al portal de", "Your access to the portal of"),
    ("portal_mail_body", "Con este enlace puedes cambiar tu medio de pago, ver tus facturas o cancelar tu suscripción. Vale durante una hora.", "With this link you may replace your payment method, see your invoices or cancel your subscription. It is valid for an hour."),
    ("portal_mail_button", "Abrir mi portal", "Open my portal"),
    ("hello", "Hola", "Hello"),
    ("hello_plain", "Hola", "Hello"),
    ("test_mail_subject", "Mensaje de prueba de", "Test message from"),
    ("test_mail_body", "Si lees esto, los avisos por correo de la cuenta llegan.", "If you read this, the account's e-mail notices arrive."),
    ("test_mail_to", "Enviar un mensaje de prueba a", "Send a test message to"),
    ("send_test", "Enviar prueba", "Send a test"),
    ("action_test_email", "Mensaje de prueba", "Test message"),
    ("on", "Activado", "On"),
    ("off", "Desactivado", "Off"),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key a template or the console's code asks for by name has both languages, and
    /// no key is written twice.
    #[test]
    fn every_key_asked_for_has_its_words() {
        let mut seen = std::collections::HashSet::new();
        for (key, es, en) in WORDS {
            assert!(seen.insert(*key), "{key} twice");
            assert!(!es.is_empty() && !en.is_empty(), "{key}");
        }
        let sources = [
            include_str!("actions.rs"),
            include_str!("mail.rs"),
            include_str!("documents.rs"),
            include_str!("frame.rs"),
            include_str!("pages.rs"),
            include_str!("refund.rs"),
            include_str!("sign_in.rs"),
            include_str!("subscription.rs"),
            include_str!("templates/base.html"),
            include_str!("templates/confirm.html"),
            include_str!("templates/customer.html"),
            include_str!("templates/customers.html"),
            include_str!("templates/exports.html"),
            include_str!("templates/home.html"),
            include_str!("templates/invitation.html"),
            include_str!("templates/invoices.html"),
            include_str!("templates/login.html"),
            include_str!("templates/message.html"),
            include_str!("templates/settings.html"),
            include_str!("templates/subscription.html"),
        ];
        let pattern = "get(\"";
        for source in sources {
            for (at, _) in source.match_indices(pattern) {
                let rest = &source[at + pattern.len()..];
                let key = &rest[..rest.find('"').unwrap_or(0)];
                assert!(Tr(Locale::Es).find(key).is_some(), "no words for `{key}`");
            }
        }
        // The keys the code asks for through a variable.
        for key in [
            "role_admin",
            "role_support",
            "role_accountant",
            "forbidden",
            "problem",
            "stale_login",
            "wrong_login",
            "too_many_logins",
            "signed_out",
            "passwords_differ",
            "too_short",
            "too_long",
            "confirm_pause",
            "confirm_resume",
            "confirm_charge_now",
            "on",
            "off",
            "admins_only",
            "support_only",
            "awaiting_range",
            "numbering_failed",
            "invoice_rejected",
            "settings",
        ] {
            assert!(Tr(Locale::En).find(key).is_some(), "no words for `{key}`");
        }
    }
}
