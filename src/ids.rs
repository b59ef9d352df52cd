//! Prefixed, time-ordered identifiers (`sub_0193…`), one newtype per resource.
//!
//! An id is the prefix plus the 32 lowercase hex digits of a UUIDv7. UUIDv7 starts with the
//! creation millisecond and the `uuid` crate keeps it monotonic within the process, so ids sort
//! by creation time as strings: that is what cursor pagination ("newest first") orders by.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Declares an id newtype with its wire prefix.
macro_rules! id_type {
    ($($name:ident => $prefix:literal),* $(,)?) => {$(
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A fresh id, later than every id made before it in this process.
            pub fn generate() -> Self {
                Self(format!("{}{}", $prefix, uuid::Uuid::now_v7().simple()))
            }

            /// Accepts any string with the right prefix; unknown ids are then simply not found.
            pub fn parse(raw: &str) -> Option<Self> {
                raw.starts_with($prefix).then(|| Self(raw.to_owned()))
            }

            /// Wraps a value read back from our own storage (`store::entities::ids`, the only
            /// caller: the rows carry the newtypes).
            pub(crate) fn from_stored(raw: String) -> Self {
                Self(raw)
            }

            /// An id as a request carried it (a path, a body, a query; another node's forwarded
            /// message), unchecked: one of another resource, or of none, is then simply not
            /// found, as an unknown id is, and an answer names it as it was sent. The one way
            /// from a request's string to an id, so that the edge can be found.
            pub fn given(raw: impl Into<String>) -> Self {
                Self(raw.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    )*};
}

id_type! {
    AccountId => "acct_",
    PlanId => "plan_",
    AddonId => "addon_",
    CustomerId => "cus_",
    PaymentMethodId => "pm_",
    SubscriptionId => "sub_",
    ChargeAttemptId => "ch_",
    CheckoutSessionId => "cs_",
    WebhookEndpointId => "we_",
    EventId => "evt_",
    DeliveryId => "del_",
    AttemptId => "att_",
    BalanceTransactionId => "btx_",
    ChargeConflictId => "ccf_",
    RefundId => "re_",
    InvoiceId => "in_",
    CreditNoteId => "cn_",
    PortalSessionId => "bps_",
    PortalActionId => "bpa_",
    CouponId => "co_",
    PromotionCodeId => "promo_",
    NumberingRangeId => "nr_",
    NoticeId => "ntc_",
    MrrMovementId => "mrm_",
    ConsoleUserId => "csu_",
    ConsoleActionId => "csa_",
}

/// The id of a `catalog_items` row: plans and add-ons share one table (decision 0004), and
/// the prefix tells them apart.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CatalogItemId {
    Plan(PlanId),
    Addon(AddonId),
}

impl CatalogItemId {
    /// A plan's or an add-on's id by its prefix; `None` for any other string.
    pub fn parse(raw: &str) -> Option<Self> {
        PlanId::parse(raw)
            .map(Self::Plan)
            .or_else(|| AddonId::parse(raw).map(Self::Addon))
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Plan(id) => id.as_str(),
            Self::Addon(id) => id.as_str(),
        }
    }

    pub fn plan(&self) -> Option<&PlanId> {
        match self {
            Self::Plan(id) => Some(id),
            Self::Addon(_) => None,
        }
    }

    pub fn addon(&self) -> Option<&AddonId> {
        match self {
            Self::Plan(_) => None,
            Self::Addon(id) => Some(id),
        }
    }
}

impl From<PlanId> for CatalogItemId {
    fn from(id: PlanId) -> Self {
        Self::Plan(id)
    }
}

impl From<AddonId> for CatalogItemId {
    fn from(id: AddonId) -> Self {
        Self::Addon(id)
    }
}

impl fmt::Display for CatalogItemId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The id of an electronic document (`dian_documents`): its invoice's or its credit note's,
/// whose row it stands beside, told apart by the prefix.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DocumentId {
    Invoice(InvoiceId),
    CreditNote(CreditNoteId),
}

impl DocumentId {
    /// An invoice's or a credit note's id by its prefix; `None` for any other string.
    pub fn parse(raw: &str) -> Option<Self> {
        InvoiceId::parse(raw)
            .map(Self::Invoice)
            .or_else(|| CreditNoteId::parse(raw).map(Self::CreditNote))
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Invoice(id) => id.as_str(),
            Self::CreditNote(id) => id.as_str(),
        }
    }
}

impl From<InvoiceId> for DocumentId {
    fn from(id: InvoiceId) -> Self {
        Self::Invoice(id)
    }
}

impl From<CreditNoteId> for DocumentId {
    fn from(id: CreditNoteId) -> Self {
        Self::CreditNote(id)
    }
}

impl fmt::Display for DocumentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_their_prefix_and_sort_by_creation() {
        let first = PlanId::generate();
        let second = PlanId::generate();
        assert!(first.as_str().starts_with("plan_"));
        assert_eq!(first.as_str().len(), "plan_".len() + 32);
        assert!(first < second);
    }

    #[test]
    fn parse_refuses_another_resources_prefix() {
        assert!(PlanId::parse("cus_123").is_none());
        assert!(PlanId::parse("plan_123").is_some());
    }

    #[test]
    fn a_catalog_items_id_is_a_plans_or_an_add_ons_by_its_prefix() {
        let plan = PlanId::generate();
        let addon = AddonId::generate();
        assert_eq!(
            CatalogItemId::parse(plan.as_str()),
            Some(CatalogItemId::Plan(plan))
        );
        assert_eq!(
            CatalogItemId::parse(addon.as_str()),
            Some(CatalogItemId::Addon(addon))
        );
        assert_eq!(CatalogItemId::parse("cus_123"), None);
    }

    #[test]
    fn a_documents_id_is_an_invoices_or_a_credit_notes_by_its_prefix() {
        let invoice = InvoiceId::generate();
        let note = CreditNoteId::generate();
        assert_eq!(
            DocumentId::parse(invoice.as_str()),
            Some(DocumentId::Invoice(invoice))
        );
        assert_eq!(
            DocumentId::parse(note.as_str()),
            Some(DocumentId::CreditNote(note))
        );
        assert_eq!(DocumentId::parse("ch_123"), None);
    }
}
