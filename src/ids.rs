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

            /// Wraps a value read back from our own storage.
            pub fn from_stored(raw: String) -> Self {
                Self(raw)
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
}
