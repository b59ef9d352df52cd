//! Small validated strings: names and e-mail addresses. Built only by parsing.

use serde::Serialize;

/// A display name: 1 to 200 characters after trimming.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Name(String);

impl Name {
    pub fn parse(raw: &str) -> Result<Self, &'static str> {
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
            && !trimmed.chars().any(char::is_whitespace)
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
}
