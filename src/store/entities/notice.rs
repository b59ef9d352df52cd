//! A notice to a customer (CONTRACT §15): one kind, through one channel, for one cause.

use crate::ids::{AccountId, ChargeAttemptId, CustomerId, InvoiceId, NoticeId, SubscriptionId};
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "notices")]
pub struct Model {
    /// `ntc_…`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: NoticeId,
    pub account_id: AccountId,
    /// `receipt`, `payment_failed`, `card_expiring`, `renewal_upcoming`, `trial_ending`,
    /// `subscription_canceled`.
    pub kind: String,
    /// `email` or `whatsapp`.
    pub channel: String,
    /// What caused it, unique with the account and the channel (`receipt:inv_…`).
    pub cause: String,
    pub customer_id: CustomerId,
    pub subscription_id: Option<SubscriptionId>,
    pub invoice_id: Option<InvoiceId>,
    pub charge_id: Option<ChargeAttemptId>,
    /// The address or phone it went to (set when it is sent or suppressed).
    pub recipient: Option<String>,
    pub subject: Option<String>,
    /// `scheduled`, `sent`, `failed` or `suppressed`.
    pub status: String,
    /// The earliest instant it may be sent (account clock, ms).
    pub scheduled_for: i64,
    pub sent_at: Option<i64>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub suppressed_reason: Option<String>,
    /// The e-mail's `Message-ID`, the same on every attempt; a WhatsApp message's wamid.
    // raw id: an RFC 5322 Message-ID (`<ntc_…@host>`) or Meta's wamid, not one of ours.
    pub message_id: Option<String>,
    /// When the delivery worker takes it next (account clock, ms); None once it ended.
    pub due_at: Option<i64>,
    /// The worker holding it while it sends.
    pub claim: Option<String>,
    pub created_at: i64,
    /// When WhatsApp reported it delivered (account clock, ms).
    pub delivered_at: Option<i64>,
    /// When WhatsApp reported it read (account clock, ms).
    pub read_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
