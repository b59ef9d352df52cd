//! The money invariants, read back from the database (`crate::audit` adds the processor's
//! side). Each query returns the rows that break one invariant, so an empty answer is a pass;
//! they scan whole tables and are meant for fault runs, CI and an operator's spot check, not
//! for the hot path.

use billing::ids::AccountId;
use billing::store::StoreResult;
use sea_orm::{ConnectionTrait, Statement};

/// One broken invariant: what it is and the row that breaks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breach {
    pub invariant: &'static str,
    pub detail: String,
}

/// The invariant a subscription breaks while its due renewal is not done: a fault run waits
/// for it to clear before judging.
pub const DUE_RENEWAL_NOT_DONE: &str = "a due renewal not done";

/// A charge as the auditor compares it with the processor.
#[derive(Clone, Debug)]
pub struct AuditedCharge {
    pub id: String,
    pub account_id: AccountId,
    pub reference: String,
    pub status: String,
    pub amount_cents: i64,
    /// Why a declined charge was declined; `network_limit` is one never sent.
    pub decline_code: Option<String>,
}

impl crate::Raw<'_> {
    /// Every breach of the invariants the database alone can tell, at the accounts' clocks
    /// (`now_ms` plus each account's offset): periods paid twice, balances that disagree with
    /// their ledger or their reservations, negative counters, due renewals not done, charges
    /// whose refunded or refunding amounts disagree with their refunds, approved charges without
    /// exactly one invoice of their amount, numbering series with a gap, and DIAN's documents
    /// (each invoice of a DIAN account has one, in a known status, numbered once and within
    /// its range).
    pub async fn audit(&self, now_ms: i64) -> StoreResult<Vec<Breach>> {
        let checks: [(&'static str, String); 18] = [
            (
                "a period paid more than once",
                "SELECT subscription_id || ' ' || CAST(period_start AS TEXT) || ' x' || \
                 CAST(COUNT(*) AS TEXT) FROM charge_attempts \
                 WHERE status = 'approved' AND period_start IS NOT NULL \
                 GROUP BY subscription_id, period_start HAVING COUNT(*) > 1"
                    .into(),
            ),
            (
                "balance differs from its ledger (top-ups minus fees)",
                "SELECT a.id || ' balance ' || CAST(a.available_cents + a.reserved_cents AS TEXT) \
                 || ' ledger ' || CAST(COALESCE(SUM(t.amount_cents), 0) AS TEXT) \
                 FROM accounts a LEFT JOIN balance_transactions t ON t.account_id = a.id \
                 GROUP BY a.id, a.available_cents, a.reserved_cents \
                 HAVING a.available_cents + a.reserved_cents <> COALESCE(SUM(t.amount_cents), 0)"
                    .into(),
            ),
            (
                "reserved balance differs from the fees of pending charges",
                "SELECT a.id || ' reserved ' || CAST(a.reserved_cents AS TEXT) || ' pending fees ' \
                 || CAST(COALESCE(SUM(c.fee_cents), 0) AS TEXT) \
                 FROM accounts a LEFT JOIN charge_attempts c \
                   ON c.account_id = a.id AND c.status = 'pending' \
                 GROUP BY a.id, a.reserved_cents \
                 HAVING a.reserved_cents <> COALESCE(SUM(c.fee_cents), 0)"
                    .into(),
            ),
            (
                "a charge's refunded or refunding amount differs from its refunds",
                "SELECT c.id || ' refunded ' || CAST(c.refunded_cents AS TEXT) || ' refunding ' \
                 || CAST(c.refunding_cents AS TEXT) FROM charge_attempts c \
                 LEFT JOIN refunds r ON r.charge_id = c.id \
                 GROUP BY c.id, c.refunded_cents, c.refunding_cents \
                 HAVING c.refunded_cents <> COALESCE(SUM(CASE WHEN r.status = 'approved' \
                          THEN r.amount_cents ELSE 0 END), 0) \
                     OR c.refunding_cents <> COALESCE(SUM(CASE WHEN r.status = 'pending' \
                          THEN r.amount_cents ELSE 0 END), 0)"
                    .into(),
            ),
            (
                "an approved charge without exactly one invoice",
                "SELECT c.id || ' invoices ' || CAST((SELECT COUNT(*) FROM invoices i \
                 WHERE i.charge_id = c.id) AS TEXT) FROM charge_attempts c \
                 WHERE c.status = 'approved' \
                   AND (SELECT COUNT(*) FROM invoices i WHERE i.charge_id = c.id) <> 1"
                    .into(),
            ),
            (
                "an invoice of a charge not approved, or of another amount",
                "SELECT i.id || ' ' || c.status || ' ' || CAST(c.amount_cents AS TEXT) || ' vs ' \
                 || CAST(i.total_cents AS TEXT) FROM invoices i \
                 JOIN charge_attempts c ON c.id = i.charge_id \
                 WHERE c.status <> 'approved' OR c.amount_cents <> i.total_cents \
                    OR i.subtotal_cents + i.tax_cents <> i.total_cents"
                    .into(),
            ),
            (
                "an approved refund of an invoiced charge without exactly one credit note",
                "SELECT r.id || ' credit notes ' || CAST((SELECT COUNT(*) FROM credit_notes n \
                 WHERE n.refund_id = r.id) AS TEXT) FROM refunds r \
                 WHERE r.status = 'approved' \
                   AND EXISTS (SELECT 1 FROM invoices i WHERE i.charge_id = r.charge_id) \
                   AND (SELECT COUNT(*) FROM credit_notes n WHERE n.refund_id = r.id) <> 1"
                    .into(),
            ),
            (
                "credit notes beyond their invoice",
                "SELECT i.id || ' credited ' || CAST(SUM(n.total_cents) AS TEXT) || ' of ' \
                 || CAST(i.total_cents AS TEXT) FROM invoices i \
                 JOIN credit_notes n ON n.invoice_id = i.id \
                 GROUP BY i.id, i.total_cents, i.subtotal_cents, i.tax_cents \
                 HAVING SUM(n.total_cents) > i.total_cents \
                     OR SUM(n.subtotal_cents) > i.subtotal_cents OR SUM(n.tax_cents) > i.tax_cents"
                    .into(),
            ),
            (
                "a numbering series with a gap",
                "SELECT s.account_id || ' ' || s.series || ' next ' || CAST(s.next_number AS TEXT) \
                 || ' issued ' || CAST(COUNT(i.id) AS TEXT) FROM invoice_series s \
                 LEFT JOIN (SELECT id, account_id, series, sequence FROM invoices UNION ALL \
                   SELECT id, account_id, series, sequence FROM credit_notes UNION ALL \
                   SELECT id, account_id, 'dian_credit_note', sequence FROM dian_documents \
                   WHERE kind = 'credit_note') i \
                   ON i.account_id = s.account_id AND i.series = s.series \
                 GROUP BY s.account_id, s.series, s.next_number \
                 HAVING COUNT(i.id) <> s.next_number - 1 \
                     OR COALESCE(MAX(i.sequence), 0) <> s.next_number - 1"
                    .into(),
            ),
            (
                "an invoice of a DIAN account without its electronic document",
                "SELECT i.id FROM invoices i WHERE NOT EXISTS (SELECT 1 FROM dian_documents d \
                   WHERE d.id = i.id) AND i.issued_at > (SELECT MIN(d.issued_at) \
                   FROM dian_documents d WHERE d.account_id = i.account_id \
                   AND d.kind = 'invoice')"
                    .into(),
            ),
            (
                "an electronic document neither accepted, pending, rejected nor awaiting a range",
                "SELECT id || ' ' || status FROM dian_documents \
                 WHERE status NOT IN ('accepted', 'pending', 'rejected', 'awaiting_range') \
                    OR (status <> 'awaiting_range' AND (number IS NULL OR unique_code IS NULL))"
                    .into(),
            ),
            (
                "a DIAN number issued twice",
                "SELECT account_id || ' ' || number FROM dian_documents WHERE number IS NOT NULL \
                 GROUP BY account_id, number HAVING COUNT(*) > 1"
                    .into(),
            ),
            (
                "an invoice numbered outside its range",
                "SELECT d.id || ' ' || d.number FROM dian_documents d \
                 JOIN dian_ranges r ON r.id = d.range_id \
                 WHERE d.prefix <> r.prefix OR d.sequence < r.range_from \
                    OR d.sequence >= r.next_number OR d.account_id <> r.account_id"
                    .into(),
            ),
            (
                "a period documented by both an invoice of nothing and a charge",
                "SELECT i.id || ' and ' || c.id FROM invoices i \
                 JOIN charge_attempts c ON c.subscription_id = i.subscription_id \
                   AND c.period_start = i.period_start AND c.status IN ('pending', 'approved') \
                 WHERE i.charge_id IS NULL"
                    .into(),
            ),
            (
                "an invoice without a charge that is not of nothing",
                "SELECT id || ' total ' || CAST(total_cents AS TEXT) FROM invoices \
                 WHERE charge_id IS NULL AND total_cents <> 0"
                    .into(),
            ),
            (
                "a coupon or promotion code redeemed beyond its limit",
                "SELECT id FROM coupons WHERE max_redemptions IS NOT NULL \
                   AND times_redeemed > max_redemptions \
                 UNION ALL SELECT id FROM promotion_codes WHERE max_redemptions IS NOT NULL \
                   AND times_redeemed > max_redemptions"
                    .into(),
            ),
            (
                "a negative balance",
                "SELECT id FROM accounts WHERE available_cents < 0 OR reserved_cents < 0".into(),
            ),
            (
                DUE_RENEWAL_NOT_DONE,
                format!(
                    "SELECT s.id || ' due ' || CAST(s.due_at AS TEXT) FROM subscriptions s \
                     JOIN accounts a ON a.id = s.account_id \
                     WHERE s.status IN ('active', 'trialing', 'past_due') \
                       AND s.due_at IS NOT NULL AND s.due_at <= {now_ms} + a.clock_offset_ms \
                       AND NOT EXISTS (SELECT 1 FROM charge_attempts c \
                         WHERE c.subscription_id = s.id AND c.status = 'pending')"
                ),
            ),
        ];
        let backend = self.conn().get_database_backend();
        let mut breaches = Vec::new();
        for (invariant, sql) in checks {
            for row in self
                .conn()
                .query_all_raw(Statement::from_string(backend, sql))
                .await?
            {
                breaches.push(Breach {
                    invariant,
                    detail: row.try_get_by_index::<String>(0)?,
                });
            }
        }
        Ok(breaches)
    }

    /// Every charge attempt that reached a final status or is still pending, for comparing
    /// with the processor (`crate::audit`).
    pub async fn audited_charges(&self) -> StoreResult<Vec<AuditedCharge>> {
        let backend = self.conn().get_database_backend();
        let sql = "SELECT id, account_id, reference, status, amount_cents, decline_code \
                   FROM charge_attempts ORDER BY id";
        let mut charges = Vec::new();
        for row in self
            .conn()
            .query_all_raw(Statement::from_string(backend, sql))
            .await?
        {
            charges.push(AuditedCharge {
                id: row.try_get_by_index(0)?,
                account_id: row.try_get_by_index(1)?,
                reference: row.try_get_by_index(2)?,
                status: row.try_get_by_index(3)?,
                amount_cents: row.try_get_by_index(4)?,
                decline_code: row.try_get_by_index(5)?,
            });
        }
        Ok(charges)
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
