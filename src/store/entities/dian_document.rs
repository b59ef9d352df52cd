//! An invoice's or credit note's electronic document (CONTRACT §12), beside its row (same id):
//! its DIAN number and CUFE or CUDE (fixed at numbering), its status, the signed XML as sent,
//! DIAN's messages, and the submission's bookkeeping.

use crate::domain::dian::{DianDocumentKind, DianStatus, DianWaiting, Environment};
use crate::ids::{AccountId, DocumentId, InvoiceId, NumberingRangeId};
use sea_orm::entity::prelude::*;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "dian_documents")]
pub struct Model {
    /// The invoice's or the credit note's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: DocumentId,
    pub account_id: AccountId,
    pub kind: DianDocumentKind,
    /// A credit note's invoice.
    pub invoice_id: Option<InvoiceId>,
    pub status: DianStatus,
    pub environment: Environment,
    /// JSON of `store::dian::Issuer`: the seller and software as they were at numbering.
    pub issuer: String,
    pub issued_at: i64,
    pub prefix: Option<String>,
    pub sequence: Option<i64>,
    /// Prefix and sequence (`SETP990000001`); NULL while awaiting a range.
    pub number: Option<String>,
    pub range_id: Option<NumberingRangeId>,
    /// The CUFE (invoice) or CUDE (credit note).
    pub unique_code: Option<String>,
    /// The signed document, exactly as sent.
    pub xml: Option<String>,
    /// JSON array of DIAN's messages.
    pub messages: Option<String>,
    /// When it was last sent (real time): after an unknown answer it is asked about first.
    pub sent_at: Option<i64>,
    pub attempts: i64,
    /// When it is next signed, sent or asked about (real time).
    pub next_at: Option<i64>,
    pub claim: Option<String>,
    pub claimed_until: Option<i64>,
    pub updated_at: i64,
    /// Why it waits for an operator (migration 000022); NULL while it is on its way.
    pub waiting: Option<DianWaiting>,
    /// Since when it waits (the account's time).
    pub waiting_since: Option<i64>,
    /// DIAN's ApplicationResponse of an accepted document, as DIAN answered it.
    pub application_response: Option<String>,
    /// The number it had before it was renumbered (its range ended before it was sent).
    pub replaced_number: Option<String>,
}

/// The XML is long and says nothing a log line needs.
impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DianDocument")
            .field("id", &self.id)
            .field("status", &self.status)
            .field("number", &self.number)
            .finish_non_exhaustive()
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
