//! The roles of the console's people (CONTRACT §17): what each may do, ordered so that a role
//! may do all that the ones below it may.

/// What a person may do. An accountant reads and exports; support also acts on subscriptions
/// and customers; only an admin refunds and changes settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Accountant,
    Support,
    Admin,
}

impl Role {
    pub const WORDS: [&'static str; 3] = ["admin", "support", "accountant"];

    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "admin" => Some(Role::Admin),
            "support" => Some(Role::Support),
            "accountant" => Some(Role::Accountant),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Support => "support",
            Role::Accountant => "accountant",
        }
    }

    /// Whether this role may do what `needed` may.
    pub fn may(self, needed: Role) -> bool {
        self >= needed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_by_what_they_may_do() {
        assert!(Role::Admin.may(Role::Support) && Role::Admin.may(Role::Accountant));
        assert!(Role::Support.may(Role::Accountant) && !Role::Support.may(Role::Admin));
        assert!(!Role::Accountant.may(Role::Support));
        for word in Role::WORDS {
            assert_eq!(Role::parse(word).map(Role::as_str), Some(word));
        }
    }
}
