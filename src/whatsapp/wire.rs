//! The Cloud API's shapes, both ways: a template message (`POST /{version}/{phone_number_id}/
//! messages`), Meta's answer (`contacts`, `messages[].id`, the wamid) and its error body
//! (`{error: {message, type, code, fbtrace_id}}`), and the status webhook
//! (`entry[].changes[].value.statuses[]`). What Meta adds beyond these fields is ignored when
//! read, as Meta asks of receivers.

use serde::{Deserialize, Serialize};

/// `messaging_product` on every body.
pub const PRODUCT: &str = "whatsapp";

/// A template message to one recipient.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateMessage {
    pub messaging_product: String,
    /// The recipient's number, digits only (E.164 without its `+`).
    pub to: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub template: Template,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Template {
    pub name: String,
    pub language: Language,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<Component>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Language {
    pub code: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Component {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub parameters: Vec<Parameter>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parameter {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl TemplateMessage {
    /// Template `name` in `language` to `to` (E.164, with or without its `+`), its body's
    /// parameters `{{1}}`, `{{2}}`… in order.
    pub fn new(to: &str, name: &str, language: &str, body: Vec<String>) -> Self {
        Self {
            messaging_product: PRODUCT.to_owned(),
            to: to.trim_start_matches('+').to_owned(),
            kind: "template".to_owned(),
            template: Template {
                name: name.to_owned(),
                language: Language {
                    code: language.to_owned(),
                },
                components: vec![Component {
                    kind: "body".to_owned(),
                    parameters: body
                        .into_iter()
                        .map(|text| Parameter {
                            kind: "text".to_owned(),
                            text: Some(text),
                        })
                        .collect(),
                }],
            },
        }
    }

    /// The body's text parameters, in order.
    pub fn body_texts(&self) -> Vec<String> {
        self.template
            .components
            .iter()
            .filter(|component| component.kind == "body")
            .flat_map(|component| component.parameters.iter())
            .filter_map(|parameter| parameter.text.clone())
            .collect()
    }
}

/// Meta's 200 to a message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentOut {
    pub messaging_product: String,
    pub contacts: Vec<Contact>,
    pub messages: Vec<MessageRef>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contact {
    pub input: String,
    pub wa_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageRef {
    /// The wamid (`wamid.…`) every status of this message names.
    pub id: String,
}

/// Meta's error body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorOut {
    pub error: MetaError,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaError {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub code: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_subcode: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fbtrace_id: Option<String>,
}

/// A webhook Meta posts about a business account's messages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhook {
    pub object: String,
    #[serde(default)]
    pub entry: Vec<Entry>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The WhatsApp Business Account's id.
    pub id: String,
    #[serde(default)]
    pub changes: Vec<Change>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub field: String,
    pub value: ChangeValue,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeValue {
    pub messaging_product: String,
    pub metadata: Metadata,
    /// What became of messages we sent (a change may carry customers' messages instead).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub statuses: Vec<Status>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_phone_number: Option<String>,
    pub phone_number_id: String,
}

/// One message's new status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The wamid.
    pub id: String,
    /// `sent`, `delivered`, `read` or `failed`.
    pub status: String,
    /// Unix seconds, as a string (Meta's).
    pub timestamp: String,
    pub recipient_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<StatusError>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusError {
    pub code: i64,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Status {
    /// The instant it names, in milliseconds (none when it does not read).
    pub fn at_ms(&self) -> Option<i64> {
        self.timestamp.parse::<i64>().ok()?.checked_mul(1_000)
    }

    /// What a `failed` status says went wrong.
    pub fn error_text(&self) -> String {
        match self.errors.first() {
            Some(error) => match &error.message {
                Some(message) if *message != error.title => {
                    format!("{} ({}): {message}", error.title, error.code)
                }
                _ => format!("{} ({})", error.title, error.code),
            },
            None => "WhatsApp reported the message failed".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_template_message_is_the_cloud_apis_shape() {
        let message = TemplateMessage::new(
            "+573001234567",
            "receipt",
            "es",
            vec!["Ana".into(), "FE-12".into()],
        );
        assert_eq!(
            serde_json::to_value(&message).expect("json"),
            json!({"messaging_product": "whatsapp", "to": "573001234567", "type": "template",
                "template": {"name": "receipt", "language": {"code": "es"},
                    "components": [{"type": "body", "parameters": [
                        {"type": "text", "text": "Ana"}, {"type": "text", "text": "FE-12"}]}]}})
        );
        assert_eq!(message.body_texts(), ["Ana", "FE-12"]);
    }

    #[test]
    fn metas_answer_and_error_read_and_extra_fields_are_ignored() {
        let sent: SentOut = serde_json::from_value(json!({"messaging_product": "whatsapp",
            "contacts": [{"input": "573001234567", "wa_id": "573001234567"}],
            "messages": [{"id": "wamid.HBgM", "message_status": "accepted"}]}))
        .expect("an answer");
        assert_eq!(sent.messages[0].id, "wamid.HBgM");
        let error: ErrorOut = serde_json::from_value(json!({"error": {
            "message": "Invalid OAuth access token - Cannot parse access token",
            "type": "OAuthException", "code": 190, "fbtrace_id": "Azr3"}}))
        .expect("an error");
        assert_eq!(error.error.code, 190);
        assert_eq!(error.error.kind, "OAuthException");
    }

    #[test]
    fn a_status_webhook_reads_as_meta_posts_it() {
        let body = json!({"object": "whatsapp_business_account", "entry": [{"id": "1029",
            "changes": [{"field": "messages", "value": {"messaging_product": "whatsapp",
                "metadata": {"display_phone_number": "15550001111", "phone_number_id": "1055"},
                "statuses": [{"id": "wamid.X", "status": "failed", "timestamp": "1764600000",
                    "recipient_id": "573001234567", "conversation": {"id": "c"},
                    "errors": [{"code": 131026, "title": "Message undeliverable",
                        "error_data": {"details": "x"}}]}]}}]}]});
        let webhook: Webhook = serde_json::from_value(body).expect("a webhook");
        let status = &webhook.entry[0].changes[0].value.statuses[0];
        assert_eq!(status.at_ms(), Some(1_764_600_000_000));
        assert_eq!(status.error_text(), "Message undeliverable (131026)");
        assert_eq!(
            webhook.entry[0].changes[0].value.metadata.phone_number_id,
            "1055"
        );
    }
}
