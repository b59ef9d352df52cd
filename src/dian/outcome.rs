//! What DIAN made of a document, as every path reports it: accepted, rejected with DIAN's
//! messages, or unknown (with why: asked about again, never taken as a rejection). Below both
//! the client that reads DIAN's answers and the emitter that hands them on.

/// What DIAN made of a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Valid: DIAN keeps it under `document_key` (its CUFE or CUDE); `messages` are the
    /// notifications it came with; `application_response` is DIAN's ApplicationResponse for
    /// it, base64 (`XmlBase64Bytes`), when the answer carried one.
    Accepted {
        document_key: Option<String>,
        messages: Vec<String>,
        application_response: Option<String>,
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
    /// DIAN already has a document with this number or key (rule 90), with DIAN's messages:
    /// its own outcome is `status`'s. When `status` of our key answers "no such document",
    /// DIAN holds the number under another document, and that is a rejection
    /// (`filing`), not an unknown.
    #[error("DIAN already received a document with this number or key")]
    AlreadyReceived(Vec<String>),
    /// `status` of a key DIAN does not know (yet).
    #[error("DIAN has no document with this key")]
    NotFound,
    /// An answer that is none of DIAN's final ones (an "in process" status, a DIAN-side error
    /// reported in a 200, a code we do not know): asked about again.
    #[error("DIAN answered status {code} ({description}), which is not final")]
    NotFinal { code: String, description: String },
}
