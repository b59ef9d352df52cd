//! What a batch of due timers' renewals read, in a handful of queries for the whole batch
//! instead of six for each subscription: the rows, their charges, prices and payers.
//!
//! A snapshot may be stale by the time its actor uses it. That is safe because of what the
//! actor does with it: every write it leads to is the subscription's conditional save
//! (`WHERE version = ?`), and every change that would alter a renewal's decision bumps that
//! version (a charge of the subscription is created only in a transaction that saves it, a
//! period's settlement saves it, add-ons and plans change through it). A stale snapshot
//! therefore ends in `StoreError::Conflict` with nothing written, and the actor reads again
//! (`Context::apply_due_prefetched`). A decision to do nothing (a charge still pending) writes
//! nothing, and whatever changed it re-armed the timer.

use super::catalog::{CatalogItem, CatalogKind, Customer, period_lines};
use super::charges::PaymentMethod;
use super::entities::{
    catalog_item, charge_attempt, customer, payment_method, subscription, subscription_addon,
};
use super::subscriptions::{
    FreePeriod, PeriodCharges, Subscription, SubscriptionAddon, free_as_paid, free_period_rows,
};
use super::{Store, StoreResult};
use crate::domain::charge_status::ChargeStatus;
use crate::domain::time::Cycle;
use crate::ids::{
    AccountId, AddonId, CatalogItemId, CustomerId, PaymentMethodId, PlanId, SubscriptionId,
};
use crate::store::invoices::DraftLine;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use std::collections::HashMap;

/// A due subscription as its renewal needs it, read with the rest of its batch.
#[derive(Clone, Debug)]
pub struct DueSnapshot {
    pub sub: Subscription,
    pub charges: PeriodCharges,
    /// The subscription's plan, if it exists in its account.
    plan: Option<CatalogItem>,
    /// The catalog items of its add-ons billed next period (not detached), in attach order;
    /// `None` for one whose catalog item is gone (billed as nothing, as `recurring_amount`).
    addons: Vec<Option<CatalogItem>>,
    /// Its default payment method and its customer, when both exist in its account.
    pub payer: Option<(PaymentMethod, Customer)>,
}

impl DueSnapshot {
    /// The subscription's plan, if it exists in its account.
    pub fn plan(&self) -> Option<&CatalogItem> {
        self.plan.as_ref()
    }

    /// What one period of the subscription's own plan at `cycle` charges, `quantity` of it
    /// with its add-ons and its discount, as `Context::recurring_lines` computes it; `None`
    /// when the plan is not `plan_id` or is missing (the caller reads and reports it).
    pub fn recurring_amount(&self, plan_id: &PlanId, cycle: Cycle, quantity: i64) -> Option<i64> {
        let lines = self.recurring_lines(plan_id, cycle, quantity, (0, 0))?;
        Some(lines.iter().map(|line| line.amount_cents).sum())
    }

    /// The invoice lines of that amount for the period from `start` to `end`
    /// (`catalog::period_lines`).
    pub fn recurring_lines(
        &self,
        plan_id: &PlanId,
        cycle: Cycle,
        quantity: i64,
        period: (i64, i64),
    ) -> Option<Vec<DraftLine>> {
        let plan = self
            .plan
            .as_ref()
            .filter(|p| p.id.plan() == Some(plan_id))?;
        Some(period_lines(
            plan,
            self.addons.iter().flatten(),
            cycle,
            quantity,
            period,
            self.sub.discount().as_ref(),
        ))
    }
}

impl Store {
    /// The snapshots of the subscriptions `ids` that exist (at most a few hundred: one
    /// statement binds every id), in seven queries.
    pub async fn due_snapshots(
        &self,
        ids: &[SubscriptionId],
    ) -> StoreResult<HashMap<SubscriptionId, DueSnapshot>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let conn = self.conn();
        let subs = subscription::Entity::find()
            .filter(subscription::Column::Id.is_in(ids))
            .all(conn)
            .await?;
        if subs.is_empty() {
            return Ok(HashMap::new());
        }
        let since = subs
            .iter()
            .map(|s| s.current_period_start)
            .min()
            .unwrap_or(0);
        // As `period_charges`, for every subscription at once from the earliest `since`.
        let charges: Vec<(Option<SubscriptionId>, ChargeStatus, Option<i64>)> =
            period_charge_rows(ids, since)
                .into_tuple()
                .all(conn)
                .await?;
        let free: Vec<FreePeriod> = free_period_rows(ids, since).into_tuple().all(conn).await?;
        let mut free_of: HashMap<SubscriptionId, Vec<FreePeriod>> = HashMap::new();
        for row in free {
            if let Some(sub) = row.0.clone() {
                free_of.entry(sub).or_default().push(row);
            }
        }
        let addons: Vec<SubscriptionAddon> = subscription_addon::Entity::find()
            .filter(subscription_addon::Column::SubscriptionId.is_in(ids))
            .order_by_asc(subscription_addon::Column::AttachedAt)
            .all(conn)
            .await?;
        let mut item_ids: Vec<CatalogItemId> = subs
            .iter()
            .map(|s| CatalogItemId::Plan(s.plan_id.clone()))
            .collect();
        item_ids.extend(
            addons
                .iter()
                .map(|a| CatalogItemId::Addon(a.addon_id.clone())),
        );
        item_ids.sort_unstable();
        item_ids.dedup();
        let mut plans: HashMap<PlanId, CatalogItem> = HashMap::new();
        let mut addon_items: HashMap<AddonId, CatalogItem> = HashMap::new();
        for item in catalog_item::Entity::find()
            .filter(catalog_item::Column::Id.is_in(item_ids))
            .all(conn)
            .await?
        {
            match item.id.clone() {
                CatalogItemId::Plan(id) => plans.insert(id, item),
                CatalogItemId::Addon(id) => addon_items.insert(id, item),
            };
        }
        let mut method_ids: Vec<&PaymentMethodId> =
            subs.iter().map(|s| &s.default_payment_method_id).collect();
        method_ids.sort_unstable();
        method_ids.dedup();
        let methods: HashMap<PaymentMethodId, PaymentMethod> = payment_method::Entity::find()
            .filter(payment_method::Column::Id.is_in(method_ids))
            .all(conn)
            .await?
            .into_iter()
            .map(|m| (m.id.clone(), m))
            .collect();
        let mut customer_ids: Vec<&CustomerId> = subs.iter().map(|s| &s.customer_id).collect();
        customer_ids.sort_unstable();
        customer_ids.dedup();
        let customers: HashMap<CustomerId, Customer> = customer::Entity::find()
            .filter(customer::Column::Id.is_in(customer_ids))
            .all(conn)
            .await?
            .into_iter()
            .map(|c| (c.id.clone(), c))
            .collect();

        let mut charges_of: HashMap<&SubscriptionId, Vec<(ChargeStatus, Option<i64>)>> =
            HashMap::new();
        for (sub, status, start) in &charges {
            if let Some(sub) = sub {
                charges_of.entry(sub).or_default().push((*status, *start));
            }
        }
        let mut addons_of: HashMap<&SubscriptionId, Vec<&SubscriptionAddon>> = HashMap::new();
        for addon in &addons {
            addons_of
                .entry(&addon.subscription_id)
                .or_default()
                .push(addon);
        }
        let mut snapshots = HashMap::with_capacity(subs.len());
        for sub in &subs {
            let own = charges_of.get(&sub.id).map_or(&[][..], Vec::as_slice);
            let charges = PeriodCharges::from_rows(
                sub.current_period_start,
                own.iter()
                    .map(|(status, start)| (*status, *start))
                    .chain(free_as_paid(free_of.remove(&sub.id).unwrap_or_default())),
            );
            // Each row is checked against the subscription's own account, as the single reads
            // are scoped to it.
            let in_account = |account: &AccountId| *account == sub.account_id;
            let plan = plans
                .get(&sub.plan_id)
                .filter(|p| p.kind == CatalogKind::Plan.as_str() && in_account(&p.account_id))
                .cloned();
            let addons = addons_of
                .get(&sub.id)
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .filter(|a| !a.detach_at_period_end)
                .map(|a| {
                    addon_items
                        .get(&a.addon_id)
                        .filter(|i| {
                            i.kind == CatalogKind::Addon.as_str() && in_account(&i.account_id)
                        })
                        .cloned()
                })
                .collect();
            let payer = methods
                .get(&sub.default_payment_method_id)
                .filter(|m| in_account(&m.account_id))
                .zip(
                    customers
                        .get(&sub.customer_id)
                        .filter(|c| in_account(&c.account_id)),
                )
                .map(|(m, c)| (m.clone(), c.clone()));
            snapshots.insert(
                sub.id.clone(),
                DueSnapshot {
                    sub: sub.clone(),
                    charges,
                    plan,
                    addons,
                    payer,
                },
            );
        }
        Ok(snapshots)
    }
}

/// The (subscription, status, period start) rows `PeriodCharges` reads for `ids`, from the
/// earliest `since` of theirs.
pub fn period_charge_rows(
    ids: &[SubscriptionId],
    since: i64,
) -> sea_orm::Select<charge_attempt::Entity> {
    charge_attempt::Entity::find()
        .select_only()
        .column(charge_attempt::Column::SubscriptionId)
        .column(charge_attempt::Column::Status)
        .column(charge_attempt::Column::PeriodStart)
        .filter(charge_attempt::Column::SubscriptionId.is_in(ids))
        .filter(PeriodCharges::rows_since(since))
}

/// A shop with one subscription due now, for the prefetch tests here and in `actors`.
#[cfg(test)]
pub(crate) mod fixture {
    use crate::domain::subscription::Status;
    use crate::domain::time::Cycle;
    use crate::ids::{
        AccountId, AddonId, CatalogItemId, CustomerId, PaymentMethodId, PlanId, SubscriptionId,
    };
    use crate::store::Store;
    use crate::store::catalog::{CatalogItem, CatalogKind, Customer};
    use crate::store::charges::PaymentMethod;
    use crate::store::subscriptions::{Subscription, SubscriptionAddon};

    pub(crate) const PLAN_A: i64 = 10_000;
    pub(crate) const PLAN_B: i64 = 25_000;
    pub(crate) const ADDON: i64 = 1_000;

    pub(crate) struct Shop {
        pub(crate) store: Store,
        pub(crate) path: std::path::PathBuf,
        pub(crate) account: AccountId,
        pub(crate) sub: Subscription,
        pub(crate) plan_b: PlanId,
    }

    fn item(account: &AccountId, id: impl Into<CatalogItemId>, amount: i64) -> CatalogItem {
        let id = id.into();
        let kind = CatalogKind::of(&id);
        CatalogItem {
            id,
            account_id: account.clone(),
            kind: kind.as_str().into(),
            name: kind.as_str().into(),
            monthly_amount_cents: amount,
            annual_amount_cents: amount * 10,
            active: true,
            metadata: None,
            created_at: 0,
            tax_code: crate::domain::tax::TaxCode::Iva19,
        }
    }

    /// Plan A with one add-on billed and one detached at the period's end, a card, and a
    /// subscription on plan A due `now`; plan B exists beside it.
    pub(crate) async fn shop(now: i64) -> Shop {
        let path =
            std::env::temp_dir().join(format!("prefetch-{}.db", uuid::Uuid::new_v4().simple()));
        let store = Store::connect(&format!("sqlite://{}", path.display()))
            .await
            .expect("connect");
        store.migrate().await.expect("migrate");
        let account = AccountId::generate();
        let mut new = crate::store::group::tests::account(&account);
        // Nothing listens there: a charge's post is an unknown outcome, left pending.
        new.processor_base_url = Some("http://127.0.0.1:9".into());
        store.create_account(new).await.expect("account");
        store.top_up(&account, 1_000_000, 0).await.expect("top up");
        let (plan_a, plan_b) = (PlanId::generate(), PlanId::generate());
        let (billed, leaving) = (AddonId::generate(), AddonId::generate());
        for (id, amount) in [(plan_a.clone(), PLAN_A), (plan_b.clone(), PLAN_B)] {
            store
                .insert_catalog_item(item(&account, id, amount))
                .await
                .expect("plan");
        }
        for (id, amount) in [(billed.clone(), ADDON), (leaving.clone(), 7_777)] {
            store
                .insert_catalog_item(item(&account, id, amount))
                .await
                .expect("addon");
        }
        let customer = store
            .insert_customer(Customer {
                id: CustomerId::generate(),
                account_id: account.clone(),
                email: "payer@example.co".into(),
                name: "Payer".into(),
                metadata: None,
                created_at: 0,
                tax_id_type: None,
                tax_id_number: None,
                legal_name: None,
                address: None,
                phone: None,
                whatsapp_opt_in: false,
            })
            .await
            .expect("customer");
        let method = store
            .insert_payment_method(PaymentMethod {
                id: PaymentMethodId::generate(),
                account_id: account.clone(),
                customer_id: customer.id.clone(),
                processor_payment_source_id: 42,
                brand: Some("VISA".into()),
                last4: Some("4242".into()),
                kind: "card".into(),
                created_at: 0,
                expires_at: None,
            })
            .await
            .expect("payment method");
        let sub = Subscription {
            id: SubscriptionId::generate(),
            account_id: account.clone(),
            customer_id: customer.id.clone(),
            plan_id: plan_a,
            cycle: Cycle::Monthly,
            status: Status::Active,
            current_period_start: now - 1_000,
            current_period_end: now + 30 * 86_400_000,
            next_charge_date: now - 1_000,
            default_payment_method_id: method.id.clone(),
            trial_end: None,
            cancel_at_period_end: false,
            failed_attempts: 0,
            first_failure_at: None,
            metadata: None,
            anchor: now - 1_000,
            period_index: 0,
            next_cycle: None,
            period_cycle: Cycle::Monthly,
            version: 0,
            due_at: Some(now - 1_000),
            created_at: 0,
            updated_at: 0,
            quantity: 1,
            period_quantity: 1,
            discount: None,
            mrr_cents: 0,
            period_discount: None,
        };
        let txn = store.begin().await.expect("begin");
        txn.insert_subscription(sub.clone())
            .await
            .expect("subscription");
        for (addon, detached) in [(&billed, false), (&leaving, true)] {
            txn.attach_addon(SubscriptionAddon {
                subscription_id: sub.id.clone(),
                addon_id: addon.clone(),
                account_id: account.clone(),
                attached_at: 0,
                detach_at_period_end: detached,
            })
            .await
            .expect("add-on");
        }
        txn.commit().await.expect("commit");
        // As stored: the insert gave it its MRR.
        let sub = store
            .subscription_by_id(&sub.id)
            .await
            .expect("read")
            .expect("inserted");
        Shop {
            store,
            path,
            account,
            sub,
            plan_b,
        }
    }

    impl Shop {
        pub(crate) fn remove(self) {
            drop(self.store);
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", self.path.display()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::{ADDON, PLAN_A, shop};
    use crate::domain::charge_purpose::ChargePurpose;
    use crate::domain::time::Cycle;
    use crate::store::charges::NewCharge;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snapshot_reads_what_the_single_reads_do() {
        let now = chrono::Utc::now().timestamp_millis();
        let shop = shop(now).await;
        let (store, sub) = (&shop.store, &shop.sub);

        let snapshots = store
            .due_snapshots(&[sub.id.clone(), crate::ids::SubscriptionId::generate()])
            .await
            .expect("snapshots");
        assert_eq!(snapshots.len(), 1, "only subscriptions that exist");
        let snapshot = &snapshots[&sub.id];
        assert_eq!(snapshot.sub, *sub);
        // The plan and the billed add-on; the detached one is not billed next period.
        assert_eq!(
            snapshot.recurring_amount(&sub.plan_id, Cycle::Monthly, 1),
            Some(PLAN_A + ADDON)
        );
        assert_eq!(
            snapshot.recurring_amount(&sub.plan_id, Cycle::Annual, 1),
            Some((PLAN_A + ADDON) * 10)
        );
        assert_eq!(
            snapshot.recurring_amount(&crate::ids::PlanId::generate(), Cycle::Monthly, 1),
            None
        );
        let (method, customer) = snapshot.payer.as_ref().expect("payer");
        assert_eq!(method.id, sub.default_payment_method_id);
        assert_eq!(customer.id, sub.customer_id);
        assert!(!snapshot.charges.pending);
        assert!(!snapshot.charges.paid(sub.current_period_start));

        // A charge of the current period, pending: both reads see it.
        store
            .begin_charge(NewCharge {
                account: shop.account.clone(),
                subscription_id: Some(sub.id.clone()),
                customer_id: sub.customer_id.clone(),
                payment_method_id: sub.default_payment_method_id.clone(),
                amount_cents: PLAN_A,
                fee_cents: 150,
                purpose: ChargePurpose::Renewal,
                period_start: Some(sub.current_period_start),
                pending_change: None,
                now_ms: now,
                lines: Vec::new(),
            })
            .await
            .expect("charge");
        let single = store
            .period_charges(&sub.id, sub.current_period_start)
            .await
            .expect("period charges");
        let snapshot = store
            .due_snapshots(std::slice::from_ref(&sub.id))
            .await
            .expect("snapshots")
            .remove(&sub.id)
            .expect("snapshot");
        assert!(single.pending);
        assert!(snapshot.charges.pending);
        shop.remove();
    }
}
