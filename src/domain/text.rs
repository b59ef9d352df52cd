//! Small validated strings: names and e-mail addresses. Built only by parsing.
//!
//! What a person types here ends up in a signed DIAN document, whose XML 1.0 forbids most
//! control characters: a name, legal name, address line or description holds none but tab
//! and newline (CONTRACT §12a), and `has_control` is that rule for every such field.

use serde::Serialize;

/// Why a text with a control character is refused, as a field's message ends.
pub const CONTROL: &str = "must not contain control characters other than tab and newline";

/// Whether `text` holds a C0 or C1 control character (or DEL) other than tab and newline.
/// XML 1.0 refuses most of C0 outright and C1 and DEL are never meant as text: none of them
/// may reach a document.
pub fn has_control(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_control() && c != '\t' && c != '\n')
}

/// A display name: 1 to 200 characters after trimming, no control character but tab and
/// newline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Name(String);

impl Name {
    pub fn parse(raw: &str) -> Result<Self, &'static str> {
        // Looked for before trimming: a control character is refused wherever it stands,
        // as the OpenAPI document's pattern says.
        if has_control(raw) {
            return Err(CONTROL);
        }
        let trimmed = raw.trim();
        match trimmed.chars().count() {
            0 => Err("must not be empty"),
            1..=200 => Ok(Self(trimmed.to_owned())),
            _ => Err("must be at most 200 characters"),
        }
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// An e-mail address: one `@` with text on both sides, no spaces, at most 254 characters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Email(String);

impl Email {
    pub fn parse(raw: &str) -> Result<Self, &'static str> {
        let trimmed = raw.trim();
        let valid = trimmed.len() <= 254
            && !trimmed.chars().any(|c| c.is_whitespace() || c.is_control())
            && matches!(trimmed.split_once('@'), Some((local, domain))
                if !local.is_empty() && domain.contains('.') && !domain.contains('@')
                    && !domain.starts_with('.') && !domain.ends_with('.'));
        if valid {
            Ok(Self(trimmed.to_owned()))
        } else {
            Err("must be a valid e-mail address")
        }
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_need_a_local_part_and_a_dotted_domain() {
        assert!(Email::parse("ana@example.co").is_ok());
        for bad in [
            "",
            "ana",
            "@example.co",
            "ana@example",
            "ana @example.co",
            "a@b@c.co",
        ] {
            assert!(Email::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn names_are_trimmed_and_bounded() {
        assert_eq!(
            Name::parse("  Pro  ").map(Name::into_string),
            Ok("Pro".to_owned())
        );
        assert!(Name::parse("   ").is_err());
        assert!(Name::parse(&"x".repeat(201)).is_err());
    }

    #[test]
    fn names_refuse_control_characters_but_tab_and_newline() {
        for bad in [
            "a\u{0}b",
            "a\u{1}",
            "a\rb",
            "a\u{1b}[0m",
            "a\u{7f}",
            "a\u{85}b",
            "a\u{9f}",
        ] {
            assert_eq!(Name::parse(bad), Err(CONTROL), "{bad:?} accepted");
        }
        assert!(Name::parse("Calle 93\tApto\n201").is_ok());
        assert!(Email::parse("an\u{1}a@example.co").is_err());
    }
}
