//! The money invariants, read back from the database (`crate::audit` adds the processor's
//! side). Each query returns the rows that break one invariant, so an empty answer is a pass;
//! they scan whole tables and are meant for fault runs, CI and an operator's spot check, not
//! for the hot path.

use super::{Store, StoreResult};
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
    pub account_id: String,
    pub reference: String,
    pub status: String,
    pub amount_cents: i64,
}

impl Store {
    /// Every breach of the invariants the database alone can tell, at the accounts' clocks
    /// (`now_ms` plus each account's offset): periods paid twice, balances that disagree with
    /// their ledger or their reservations, negative counters, due renewals not done, charges
    /// whose refunded or refunding amounts disagree with their refunds.
    pub async fn audit(&self, now_ms: i64) -> StoreResult<Vec<Breach>> {
        let checks: [(&'static str, String); 6] = [
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
        let sql = "SELECT id, account_id, reference, status, amount_cents FROM charge_attempts \
                   ORDER BY id";
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
            });
        }
        Ok(charges)
    }
}

#[cfg(test)]
mod tests {
    //! The invariants the database itself enforces, without any actor in front of it.
    use super::super::charges::{BeginChargeError, NewCharge};
    use super::super::{Store, StoreError};
    use crate::domain::time::Cycle;
    use crate::ids::AccountId;
    use crate::store::accounts::NewAccount;
    use crate::subscribe::{NewSubscription, Start, build};

    async fn store_with_account() -> (Store, AccountId) {
        let path = std::env::temp_dir().join(format!("inv-{}.db", uuid::Uuid::new_v4().simple()));
        let store = Store::connect(&format!("sqlite://{}", path.display()))
            .await
            .expect("connect");
        store.migrate().await.expect("migrate");
        let id = AccountId::generate();
        store
            .create_account(NewAccount {
                id: id.clone(),
                name: "Invariants".into(),
                sandbox: true,
                api_key_hash: "hash".into(),
                processor_base_url: None,
                processor_public_key: "pub_test_x".into(),
                processor_private_key: "prv_test_x".into(),
                processor_events_secret: "test_events_x".into(),
                processor_integrity_secret: "test_integrity_x".into(),
                fee_percent_bps: 150,
                fee_fixed_cents: 0,
                rate_limit_per_minute: 100,
                status_rate_limit_per_minute: 20,
                dunning_retry_days: "1,3,5,7".into(),
                created_at: 0,
            })
            .await
            .expect("account");
        store.top_up(&id, 1_000_000, 0).await.expect("top up");
        (store, id)
    }

    fn charge(account: &AccountId, subscription: &str, period_start: i64) -> NewCharge {
        NewCharge {
            account: account.clone(),
            subscription_id: Some(subscription.to_owned()),
            customer_id: "cus_1".into(),
            payment_method_id: "pm_1".into(),
            amount_cents: 100_000,
            fee_cents: 1_500,
            purpose: "renewal",
            period_start: Some(period_start),
            pending_change: None,
            now_ms: 0,
        }
    }

    #[tokio::test]
    async fn a_period_takes_one_live_charge_whoever_asks() {
        let (store, account) = store_with_account().await;
        let first = store
            .begin_charge(charge(&account, "sub_1", 1_000))
            .await
            .expect("first");
        let second = store.begin_charge(charge(&account, "sub_1", 1_000)).await;
        assert!(
            matches!(second, Err(BeginChargeError::PeriodTaken)),
            "{second:?}"
        );
        // The refused charge's fee reservation rolled back with it.
        let balance = store.balance(&account).await.expect("db").expect("account");
        assert_eq!(balance.reserved_cents, first.fee_cents);
        // Declined, the period may be charged again (a retry); another period always may.
        store
            .settle_charge(&first.id, "DECLINED", None, None, 0)
            .await
            .expect("settle");
        store
            .begin_charge(charge(&account, "sub_1", 1_000))
            .await
            .expect("retry");
        store
            .begin_charge(charge(&account, "sub_1", 2_000))
            .await
            .expect("next period");
    }

    #[tokio::test]
    async fn a_subscription_write_from_a_stale_read_is_refused() {
        let (store, account) = store_with_account().await;
        let sub = build(
            NewSubscription {
                id: crate::ids::SubscriptionId::generate(),
                account_id: account.as_str().to_owned(),
                customer_id: "cus_1".into(),
                plan_id: "plan_1".into(),
                cycle: Cycle::Monthly,
                payment_method_id: "pm_1".into(),
                metadata: None,
                start: Start::Paid,
            },
            0,
        );
        let txn = store.begin().await.expect("begin");
        txn.insert_subscription(sub.clone()).await.expect("insert");
        txn.commit().await.expect("commit");
        let txn = store.begin().await.expect("begin");
        let mut written = txn.save_subscription(sub.clone()).await.expect("save");
        txn.commit().await.expect("commit");
        assert_eq!(written.version, sub.version + 1);
        // A second writer that read before the first wrote loses, and nothing is overwritten.
        let mut stale = sub.clone();
        stale.status = "canceled".into();
        let txn = store.begin().await.expect("begin");
        let lost = txn.save_subscription(stale).await;
        assert!(matches!(lost, Err(StoreError::Conflict(_))), "{lost:?}");
        drop(txn);
        written.status = "paused".into();
        let txn = store.begin().await.expect("begin");
        txn.save_subscription(written)
            .await
            .expect("save at the current version");
        txn.commit().await.expect("commit");
        let stored = store
            .subscription_by_id(&sub.id)
            .await
            .expect("db")
            .expect("row");
        assert_eq!(stored.status, "paused");
    }

    /// A refund can never take a charge beyond its amount, nor run beside another refund of
    /// the same charge, whatever writes the rows; and the auditor sees a refunded amount no
    /// refund explains.
    #[tokio::test]
    async fn a_charge_is_never_refunded_beyond_its_amount_nor_twice_at_once() {
        use crate::store::refunds::{BeginRefundError, NewRefund};
        use sea_orm::ConnectionTrait;
        let (store, account) = store_with_account().await;
        let charge = store
            .begin_charge(charge(&account, "sub_1", 1_000))
            .await
            .expect("charge");
        store
            .settle_charge(&charge.id, "APPROVED", None, Some("tx-1"), 0)
            .await
            .expect("settle");
        let over = store
            .conn()
            .execute_unprepared(&format!(
                "UPDATE charge_attempts SET refunded_cents = 60000, refunding_cents = 50000 \
                 WHERE id = '{}'",
                charge.id
            ))
            .await;
        assert!(
            over.is_err(),
            "the CHECK refuses refunded + refunding > amount"
        );
        let refund = |amount| NewRefund {
            account: account.clone(),
            charge_id: charge.id.clone(),
            amount_cents: Some(amount),
            reason: None,
            now_ms: 0,
            recheck_at_ms: 0,
        };
        let (first, _) = store.begin_refund(refund(10_000)).await.expect("first");
        let second = store.begin_refund(refund(10_000)).await;
        assert!(
            matches!(second, Err(BeginRefundError::InFlight)),
            "{second:?}"
        );
        let beside = store
            .conn()
            .execute_unprepared(&format!(
                "INSERT INTO refunds (id, account_id, charge_id, amount_cents, status, attempts, \
                 created_at, updated_at) VALUES ('re_beside', '{}', '{}', 5, 'pending', 0, 0, 0)",
                account.as_str(),
                charge.id
            ))
            .await;
        assert!(
            beside.is_err(),
            "refunds_one_in_flight refuses a second pending refund"
        );
        assert!(
            store.audit(0).await.expect("audit").is_empty(),
            "a refund in flight is accounted for"
        );
        store
            .conn()
            .execute_unprepared(&format!(
                "UPDATE charge_attempts SET refunded_cents = 5 WHERE id = '{}'",
                charge.id
            ))
            .await
            .expect("drift");
        let breaches = store.audit(0).await.expect("audit");
        assert!(
            breaches
                .iter()
                .any(|b| b.invariant.contains("refund") && b.detail.contains(&charge.id)),
            "{breaches:?} (refund {})",
            first.id
        );
    }
}
