//! The settings an admin edits in the console beyond the switches: the e-mail server and
//! sender, WhatsApp's Cloud API, and the seller's invoicing data. Each form is a table of
//! fields, each naming where its value is read in the API's answer and where it is written in
//! the body of the API's own PATCH, so the form and the request cannot disagree. A secret is
//! never shown (the page says whether one is kept) and an empty field changes nothing.
//!
//! Not here: DIAN's certificate and numbering ranges (a certificate is a file with its PIN,
//! which `PATCH /v1/account/invoicing` takes from an integrator; the console shows them), and
//! the handler that saves a form (`settings`).

use super::i18n::Tr;
use serde_json::{Map, Value};

/// How a field is typed in and sent.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Input {
    Text,
    Email,
    /// Sent as a JSON number when it reads as one.
    Number,
    /// Never shown; `kept` is where the API's answer says whether one is kept.
    Secret {
        kept: &'static str,
    },
    Choice(&'static [&'static str]),
}

/// One field of a form.
pub struct Field {
    /// The form field's name (and, with the form's id, its element id).
    pub name: &'static str,
    /// Its label's key in `i18n`.
    pub words: &'static str,
    /// Where its value is in the API's answer (`GET`).
    pub read: &'static str,
    /// Where it goes in the PATCH's body.
    pub write: &'static str,
    pub input: Input,
    /// The most characters it takes (the API's own limit).
    pub max: usize,
}

/// One settings form: what it reads, where it saves.
pub struct FormDef {
    pub id: &'static str,
    pub title: &'static str,
    pub path: &'static str,
    pub fields: &'static [Field],
}

const fn field(
    name: &'static str,
    words: &'static str,
    read: &'static str,
    write: &'static str,
    input: Input,
    max: usize,
) -> Field {
    Field {
        name,
        words,
        read,
        write,
        input,
        max,
    }
}

const EMAIL: &[Field] = &[
    field(
        "from_address",
        "from_address",
        "/email/from_address",
        "/email/from_address",
        Input::Email,
        254,
    ),
    field(
        "from_name",
        "from_name",
        "/email/from_name",
        "/email/from_name",
        Input::Text,
        200,
    ),
    field(
        "reply_to",
        "reply_to",
        "/email/reply_to",
        "/email/reply_to",
        Input::Email,
        254,
    ),
    field(
        "smtp_host",
        "smtp_host",
        "/email/smtp/host",
        "/email/smtp/host",
        Input::Text,
        253,
    ),
    field(
        "smtp_port",
        "smtp_port",
        "/email/smtp/port",
        "/email/smtp/port",
        Input::Number,
        5,
    ),
    field(
        "smtp_username",
        "smtp_username",
        "/email/smtp/username",
        "/email/smtp/username",
        Input::Text,
        320,
    ),
    field(
        "smtp_password",
        "smtp_password",
        "",
        "/email/smtp/password",
        Input::Secret {
            kept: "/email/smtp/password_set",
        },
        1024,
    ),
    field(
        "smtp_security",
        "smtp_security",
        "/email/smtp/security",
        "/email/smtp/security",
        Input::Choice(crate::domain::notices::SmtpSecurity::WORDS),
        16,
    ),
    field(
        "locale",
        "language",
        "/locale",
        "/locale",
        Input::Choice(crate::domain::notices::NoticeLocale::WORDS),
        2,
    ),
];

const WHATSAPP: &[Field] = &[
    field(
        "phone_number_id",
        "phone_number_id",
        "/whatsapp/phone_number_id",
        "/whatsapp/phone_number_id",
        Input::Text,
        32,
    ),
    field(
        "access_token",
        "access_token",
        "",
        "/whatsapp/access_token",
        Input::Secret {
            kept: "/whatsapp/access_token_set",
        },
        1024,
    ),
    field(
        "app_secret",
        "app_secret",
        "",
        "/whatsapp/app_secret",
        Input::Secret {
            kept: "/whatsapp/app_secret_set",
        },
        256,
    ),
    field(
        "verify_token",
        "verify_token",
        "",
        "/whatsapp/verify_token",
        Input::Secret {
            kept: "/whatsapp/verify_token_set",
        },
        256,
    ),
];

const SELLER: &[Field] = &[
    field(
        "legal_name",
        "legal_name",
        "/legal_name",
        "/legal_name",
        Input::Text,
        200,
    ),
    field("nit", "nit", "/nit/number", "/nit", Input::Text, 12),
    field(
        "address_line",
        "address",
        "/address/line",
        "/address/line",
        Input::Text,
        200,
    ),
    field(
        "city_code",
        "city_code",
        "/address/city_code",
        "/address/city_code",
        Input::Text,
        5,
    ),
    field(
        "country",
        "country",
        "/address/country",
        "/address/country",
        Input::Text,
        2,
    ),
    field(
        "tax_regime",
        "tax_regime",
        "/tax_regime",
        "/tax_regime",
        Input::Choice(crate::domain::tax::TaxRegime::WORDS),
        40,
    ),
    field(
        "default_tax_code",
        "default_tax_code",
        "/default_tax_code",
        "/default_tax_code",
        Input::Choice(crate::domain::tax::TaxCode::WORDS),
        40,
    ),
];

/// The forms, in the page's order.
pub const FORMS: &[FormDef] = &[
    FormDef {
        id: "email",
        title: "email_server",
        path: "/v1/account/notices",
        fields: EMAIL,
    },
    FormDef {
        id: "whatsapp",
        title: "whatsapp_settings",
        path: "/v1/account/notices",
        fields: WHATSAPP,
    },
    FormDef {
        id: "seller",
        title: "seller",
        path: "/v1/account/invoicing",
        fields: SELLER,
    },
];

/// The form `id`.
pub fn form(id: &str) -> Option<&'static FormDef> {
    FORMS.iter().find(|form| form.id == id)
}

/// A field as the page shows it.
pub struct Shown {
    pub id: String,
    pub name: &'static str,
    pub label: &'static str,
    /// `text`, `email`, `number`, `password`, or `select`.
    pub kind: &'static str,
    pub value: String,
    pub max: usize,
    /// A select's options: (value, its words, whether chosen).
    pub options: Vec<(&'static str, &'static str, bool)>,
    /// Under a secret: whether one is kept (an empty field keeps it).
    pub hint: Option<&'static str>,
}

/// A form as the page shows it.
pub struct ShownForm {
    pub id: &'static str,
    pub title: &'static str,
    pub fields: Vec<Shown>,
}

/// The form `def` filled in from `answer`, the API's `GET` of its path.
pub fn shown(def: &FormDef, answer: &Value, t: Tr) -> ShownForm {
    let fields = def
        .fields
        .iter()
        .map(|f| {
            let current = match answer.pointer(f.read) {
                Some(Value::String(text)) => text.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            };
            let (kind, value, options, hint) = match f.input {
                Input::Text => ("text", current, Vec::new(), None),
                Input::Email => ("email", current, Vec::new(), None),
                Input::Number => ("number", current, Vec::new(), None),
                Input::Secret { kept } => {
                    let kept = answer.pointer(kept).and_then(Value::as_bool) == Some(true);
                    let hint = t.get(if kept { "secret_kept" } else { "secret_none" });
                    ("password", String::new(), Vec::new(), Some(hint))
                }
                Input::Choice(words) => {
                    let options = words
                        .iter()
                        .map(|w| {
                            (
                                *w,
                                t.find(&format!("option_{w}")).unwrap_or(w),
                                *w == current,
                            )
                        })
                        .collect();
                    ("select", current, options, None)
                }
            };
            Shown {
                id: format!("{}-{}", def.id, f.name),
                name: f.name,
                label: t.get(f.words),
                kind,
                value,
                max: f.max,
                options,
                hint,
            }
        })
        .collect();
    ShownForm {
        id: def.id,
        title: t.get(def.title),
        fields,
    }
}

/// The PATCH's body from a posted form: every field typed in, at its place; an empty one is
/// left out (it changes nothing). `None` when nothing was typed.
pub fn body(def: &FormDef, posted: &std::collections::HashMap<String, String>) -> Option<Value> {
    let mut body = Value::Object(Map::new());
    let mut any = false;
    for f in def.fields {
        let Some(typed) = posted.get(f.name) else {
            continue;
        };
        let raw = typed.trim();
        if raw.is_empty() {
            continue;
        }
        let value = match f.input {
            Input::Number => raw
                .parse::<i64>()
                .map_or_else(|_| Value::String(raw.to_owned()), Value::from),
            // A secret as typed: spaces may be part of it.
            Input::Secret { .. } => Value::String(typed.clone()),
            _ => Value::String(raw.to_owned()),
        };
        set(&mut body, f.write, value);
        any = true;
    }
    any.then_some(body)
}

/// Puts `value` at the JSON pointer `at` of `body`, making the objects on its way.
fn set(body: &mut Value, at: &str, value: Value) {
    let mut here = body;
    let mut parts = at.trim_start_matches('/').split('/').peekable();
    while let Some(part) = parts.next() {
        if !here.is_object() {
            *here = Value::Object(Map::new());
        }
        let Value::Object(map) = here else { return };
        if parts.peek().is_none() {
            map.insert(part.to_owned(), value);
            return;
        }
        here = map
            .entry(part.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkout::i18n::Locale;
    use serde_json::json;
    use std::collections::HashMap;

    fn posted(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_form_becomes_the_patch_it_names_and_empty_fields_change_nothing() {
        let def = form("email").expect("the e-mail form");
        let body = body(
            def,
            &posted(&[
                ("smtp_host", " smtp.tienda.example.co "),
                ("smtp_port", "587"),
                ("smtp_password", " secreto "),
                ("reply_to", ""),
                ("locale", "en"),
                ("unknown", "ignored"),
            ]),
        );
        assert_eq!(
            body,
            Some(json!({
                "email": {"smtp": {"host": "smtp.tienda.example.co", "port": 587,
                    "password": " secreto "}},
                "locale": "en"
            }))
        );
        assert_eq!(super::body(def, &posted(&[("reply_to", "  ")])), None);
        let seller = form("seller").expect("the seller's form");
        assert_eq!(
            super::body(
                seller,
                &posted(&[("nit", "900123456-8"), ("smtp_port", "x")])
            ),
            Some(json!({"nit": "900123456-8"}))
        );
    }

    #[test]
    fn every_form_and_field_has_its_words() {
        for locale in [Locale::Es, Locale::En] {
            for def in FORMS {
                assert!(Tr(locale).find(def.title).is_some(), "{}", def.title);
                for f in def.fields {
                    assert!(Tr(locale).find(f.words).is_some(), "{}", f.words);
                }
            }
            for def in FORMS {
                for f in def.fields {
                    if let Input::Choice(words) = f.input {
                        for word in words {
                            let key = format!("option_{word}");
                            assert!(Tr(locale).find(&key).is_some(), "{key}");
                        }
                    }
                }
            }
            for key in ["secret_kept", "secret_none"] {
                assert!(Tr(locale).find(key).is_some(), "{key}");
            }
        }
    }

    #[test]
    fn a_secret_is_never_shown_only_whether_one_is_kept() {
        let def = form("email").expect("the e-mail form");
        let answer = json!({"email": {"from_address": "cobros@tienda.example.co",
            "smtp": {"host": "smtp.tienda.example.co", "port": 587, "password_set": true,
                "security": "starttls"}}, "locale": "es"});
        let shown = shown(def, &answer, Tr(Locale::Es));
        let by_name = |name: &str| {
            shown
                .fields
                .iter()
                .find(|f| f.name == name)
                .expect("the field")
        };
        assert_eq!(by_name("smtp_port").value, "587");
        assert_eq!(by_name("from_address").value, "cobros@tienda.example.co");
        let password = by_name("smtp_password");
        assert_eq!((password.kind, password.value.as_str()), ("password", ""));
        assert_eq!(password.hint, Some(Tr(Locale::Es).get("secret_kept")));
        let security = by_name("smtp_security");
        assert!(security.options.contains(&("starttls", "STARTTLS", true)));
        assert!(security.options.contains(&("tls", "TLS", false)));
    }
}
