//! A checkout session's states (the spec's open, complete, expired) and the only ways between
//! them: `open → complete` when its payment is approved, `open → expired` when its time has
//! passed with no payment in flight. Nothing leaves `complete` or `expired`.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionStatus {
    Open,
    Complete,
    Expired,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Open => "open",
            SessionStatus::Complete => "complete",
            SessionStatus::Expired => "expired",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [
            SessionStatus::Open,
            SessionStatus::Complete,
            SessionStatus::Expired,
        ]
        .into_iter()
        .find(|status| status.as_str() == raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_their_wire_names() {
        for name in ["open", "complete", "expired"] {
            assert_eq!(
                SessionStatus::parse(name).map(SessionStatus::as_str),
                Some(name)
            );
        }
        assert_eq!(SessionStatus::parse("paid"), None);
    }
}
