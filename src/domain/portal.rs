//! What a customer may do in the portal (CONTRACT §13): each account's configuration, its
//! defaults, and how a `PATCH` merges into it. Kept as JSON on the account; the one in force
//! when an action arrives is the one that applies, also to sessions opened before.

use crate::ids::PlanId;
use serde::{Deserialize, Serialize};

crate::domain::vocabulary! {
    /// When a cancellation from the portal takes effect.
    pub enum CancelMode {
        AtPeriodEnd => "at_period_end",
        Immediately => "immediately",
    }
}

crate::domain::vocabulary! {
    /// The one action a session may open directly (`flow.type`).
    pub enum FlowKind {
        PaymentMethodUpdate => "payment_method_update",
        SubscriptionCancel => "subscription_cancel",
    }
}

/// Whether customers may cancel, and when their cancellation takes effect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRule {
    pub enabled: bool,
    pub mode: CancelMode,
}

/// Whether customers may switch plan, to which plans, and whether an upgrade is prorated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanSwitchRule {
    pub enabled: bool,
    pub plan_ids: Vec<PlanId>,
    pub prorate: bool,
}

/// An action that is simply on or off.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Toggle {
    pub enabled: bool,
}

/// An account's portal configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortalConfig {
    pub cancel: CancelRule,
    pub plan_switch: PlanSwitchRule,
    pub payment_method_update: Toggle,
    pub invoice_history: Toggle,
}

impl Default for PortalConfig {
    /// Cancel at the period's end, no plan switch, card update and invoices on.
    fn default() -> Self {
        Self {
            cancel: CancelRule {
                enabled: true,
                mode: CancelMode::AtPeriodEnd,
            },
            plan_switch: PlanSwitchRule {
                enabled: false,
                plan_ids: Vec::new(),
                prorate: true,
            },
            payment_method_update: Toggle { enabled: true },
            invoice_history: Toggle { enabled: true },
        }
    }
}

/// A `PATCH`: every field optional at every level; what it names changes, the rest stays.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortalPatch {
    pub cancel_enabled: Option<bool>,
    pub cancel_mode: Option<CancelMode>,
    pub plan_switch_enabled: Option<bool>,
    pub plan_ids: Option<Vec<PlanId>>,
    pub prorate: Option<bool>,
    pub payment_method_update_enabled: Option<bool>,
    pub invoice_history_enabled: Option<bool>,
}

impl PortalConfig {
    /// The stored JSON read back; a row without one (or, defensively, one that no longer
    /// reads) has the defaults.
    pub fn from_stored(raw: Option<&str>) -> Self {
        raw.and_then(|raw| serde_json::from_str(raw).ok())
            .unwrap_or_default()
    }

    /// This configuration with `patch` merged in.
    pub fn merged(mut self, patch: &PortalPatch) -> Self {
        fn set<T: Clone>(slot: &mut T, value: &Option<T>) {
            if let Some(value) = value {
                *slot = value.clone();
            }
        }
        set(&mut self.cancel.enabled, &patch.cancel_enabled);
        set(&mut self.cancel.mode, &patch.cancel_mode);
        set(&mut self.plan_switch.enabled, &patch.plan_switch_enabled);
        set(&mut self.plan_switch.plan_ids, &patch.plan_ids);
        set(&mut self.plan_switch.prorate, &patch.prorate);
        set(
            &mut self.payment_method_update.enabled,
            &patch.payment_method_update_enabled,
        );
        set(
            &mut self.invoice_history.enabled,
            &patch.invoice_history_enabled,
        );
        self
    }

    /// Whether a customer may switch to `plan_id`.
    pub fn may_switch_to(&self, plan_id: &PlanId) -> bool {
        self.plan_switch.enabled && self.plan_switch.plan_ids.iter().any(|id| id == plan_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(raw: &str) -> PlanId {
        PlanId::parse(raw).expect("a plan's id")
    }

    #[test]
    fn defaults_are_the_contracts() {
        let config = PortalConfig::from_stored(None);
        assert_eq!(config.cancel.mode, CancelMode::AtPeriodEnd);
        assert!(config.cancel.enabled);
        assert!(!config.plan_switch.enabled);
        assert!(config.payment_method_update.enabled);
        assert!(config.invoice_history.enabled);
        assert!(!config.may_switch_to(&plan("plan_a")));
    }

    #[test]
    fn a_patch_changes_only_what_it_names() {
        let config = PortalConfig::default().merged(&PortalPatch {
            plan_switch_enabled: Some(true),
            plan_ids: Some(vec![plan("plan_a")]),
            ..PortalPatch::default()
        });
        assert!(config.may_switch_to(&plan("plan_a")));
        assert!(!config.may_switch_to(&plan("plan_b")));
        assert!(config.plan_switch.prorate, "prorate kept its default");
        let later = config.clone().merged(&PortalPatch {
            cancel_mode: Some(CancelMode::Immediately),
            ..PortalPatch::default()
        });
        assert_eq!(later.cancel.mode, CancelMode::Immediately);
        assert_eq!(
            later.plan_switch, config.plan_switch,
            "the other rule stayed"
        );
    }

    #[test]
    fn stored_json_reads_back() {
        let config = PortalConfig::default().merged(&PortalPatch {
            invoice_history_enabled: Some(false),
            ..PortalPatch::default()
        });
        let raw = serde_json::to_string(&config).unwrap_or_default();
        assert_eq!(PortalConfig::from_stored(Some(&raw)), config);
    }
}
