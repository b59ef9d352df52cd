//! The invariant checker: after a fault run (or whenever an operator asks), reads the database
//! and the processor and reports every way money went wrong. Nothing here writes.
//!
//! From the database (`queries`): no period paid twice, each balance equal to its ledger
//! (top-ups minus fees) with its reservations equal to the fees of pending charges, no negative
//! counter, no due renewal left undone, one invoice of its amount per approved charge and no
//! gap in a numbering series. From the processor, per charge attempt, asked by its
//! reference: an approved charge is an APPROVED transaction of the same amount; a declined or
//! voided one is that status there (a retry the card network's limit stopped was never sent,
//! and is not there); an errored one is ERROR there or was never created; a transaction the
//! processor approved is never recorded as anything but approved.

pub mod queries;

use crate::audit::queries::Breach;
use billing::charges::Charger;
use billing::store::Store;
use std::collections::HashMap;

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    pub breaches: Vec<Breach>,
    /// Charge attempts compared with the processor.
    pub charges: usize,
    /// Of those, still pending (not a breach while a run is settling).
    pub pending: usize,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.breaches.is_empty()
    }
}

/// Checks every invariant at `now_ms` (real time; each account's test clock is applied).
pub async fn audit(store: &Store, charger: &Charger, now_ms: i64) -> anyhow::Result<Report> {
    let mut report = Report {
        breaches: crate::Raw(store).audit(now_ms).await?,
        ..Report::default()
    };
    let mut credentials = HashMap::new();
    for charge in crate::Raw(store).audited_charges().await? {
        report.charges += 1;
        if charge.status == "pending" {
            report.pending += 1;
            continue;
        }
        if !credentials.contains_key(&charge.account_id) {
            let account = store
                .account(&charge.account_id)
                .await?
                .ok_or_else(|| anyhow::anyhow!("charge {} has no account", charge.id))?;
            credentials.insert(charge.account_id.clone(), charger.credentials(&account)?);
        }
        let creds = &credentials[&charge.account_id];
        let found = charger
            .client()
            .find_transaction_by_reference(creds, &charge.reference)
            .await?;
        let agrees = match (&found, charge.status.as_str()) {
            (Some(tx), "approved") => {
                tx.status == "APPROVED" && tx.amount_in_cents == charge.amount_cents
            }
            (Some(tx), "declined") => tx.status == "DECLINED",
            (Some(tx), "voided") => tx.status == "VOIDED",
            (Some(tx), "error") => tx.status == "ERROR",
            (None, "error") => true,
            (None, "declined") => charge.decline_code.as_deref() == Some("network_limit"),
            _ => false,
        };
        if !agrees {
            report.breaches.push(Breach {
                invariant: "our charge and the processor's transaction disagree",
                detail: format!(
                    "{} is {} ({} cents); the processor has {}",
                    charge.id,
                    charge.status,
                    charge.amount_cents,
                    found.map_or_else(
                        || "no transaction".to_owned(),
                        |tx| format!("{} ({} cents)", tx.status, tx.amount_in_cents)
                    )
                ),
            });
        }
    }
    Ok(report)
}
