//! What DIAN made of a document, as every path reports it: accepted, rejected with DIAN's
//! messages, or unknown (with why: asked about again, never taken as a rejection). Below both
//! the client that reads DIAN's answers and the emitter that hands them on.

/// What DIAN made of a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Valid: DIAN keeps it under `document_key` (its CUFE or CUDE); `messages` are the
    /// notifications it came with.
    Accepted {
        document_key: Option<String>,
        messages: Vec<String>,
    },
    /// Refused, with DIAN's rules (`Regla: FAD06, Rechazo: …`).
    Rejected {
        status_code: String,
        messages: Vec<String>,
    },
    /// Not known yet: ask again (`status`).
    Unknown(Unknown),
}

/// Why an outcome is unknown.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unknown {
    #[error("no answer in time")]
    Timeout,
    #[error("the service could not be reached: {0}")]
    Transport(String),
    #[error("the service answered HTTP {0}")]
    Status(u16),
    #[error("the answer could not be read")]
    Unreadable,
    #[error("the request could not be made: {0}")]
    Request(String),
    /// DIAN already has a document with this number or key: its own outcome is `status`'s.
    #[error("DIAN already received this document")]
    AlreadyReceived,
    /// `status` of a key DIAN does not know (yet).
    #[error("DIAN has no document with this key")]
    NotFound,
}
