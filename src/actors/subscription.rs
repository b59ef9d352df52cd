//! What a subscription actor does with each message: one `apply` per command (`commands.rs`),
//! timer (here) and processor outcome (`charging.rs`), the mini-redis shape, with the
//! decisions themselves in `decide.rs`. Every change is committed in one transaction with the
//! events it emits; charges reserve their fee in that same transaction. This file holds what
//! they share: loading, saving, events, prices, and the timer's work.

use super::charging::Resuming;
use super::decide::{self, reschedule, status_of};
use super::{ActionError, Runtime};
use crate::domain::charge_purpose;
use crate::domain::schedule::Schedule;
use crate::domain::subscription::Status;
use crate::domain::time::Cycle;
use crate::events::subscription_event;
use crate::ids::AccountId;
use crate::store::StoreError;
use crate::store::accounts::Account;
use crate::store::catalog::CatalogKind;
use crate::store::charges::ChargeAttempt;
use crate::store::prefetch::DueSnapshot;
use crate::store::subscriptions::{PeriodCharges, StoreTxn, Subscription};
use std::sync::Arc;

/// Charge details carried by charge events.
pub(super) struct ChargeInfo<'a> {
    pub(super) charge: &'a ChargeAttempt,
    pub(super) raw_status: &'a str,
}

/// Writes one event of the subscription into the outbox, inside `txn`.
pub(super) async fn emit(
    txn: &StoreTxn,
    sub: &Subscription,
    event_type: &str,
    charge: Option<ChargeInfo<'_>>,
    now_ms: i64,
) -> Result<(), StoreError> {
    let charge = charge.map(|info| (info.charge, info.raw_status));
    txn.insert_event(subscription_event(sub, event_type, charge, now_ms))
        .await
}

impl Runtime {
    pub(super) async fn load(
        &self,
        id: &str,
    ) -> Result<(Subscription, Arc<Account>, i64), ActionError> {
        let sub = self
            .store()
            .subscription_by_id(id)
            .await?
            .ok_or_else(|| ActionError::NotFound(format!("No subscription with id `{id}`.")))?;
        let (account, now) = self.account_and_now(&sub).await?;
        Ok((sub, account, now))
    }

    /// The subscription's account and the time in its clock.
    pub(super) async fn account_and_now(
        &self,
        sub: &Subscription,
    ) -> Result<(Arc<Account>, i64), ActionError> {
        let account_id = AccountId::from_stored(sub.account_id.clone());
        let account = self
            .account(&account_id)
            .await?
            .ok_or_else(|| ActionError::NotFound("account".into()))?;
        let now = self.clock().now_ms(&account_id).await?;
        Ok((account, now))
    }

    /// The per-period amount of `plan_id` for `cycle` plus the attached add-ons.
    pub(super) async fn recurring_amount(
        &self,
        sub: &Subscription,
        plan_id: &str,
        cycle: Cycle,
    ) -> Result<i64, ActionError> {
        let account = AccountId::from_stored(sub.account_id.clone());
        let plan = self
            .store()
            .catalog_item(&account, CatalogKind::Plan, plan_id)
            .await?
            .ok_or_else(|| ActionError::NotFound(format!("No plan with id `{plan_id}`.")))?;
        let mut total = price(&plan, cycle);
        // A detached add-on is billed for no further period (it leaves at the period's end).
        for attached in self
            .store()
            .subscription_addons(&sub.id)
            .await?
            .into_iter()
            .filter(|a| !a.detach_at_period_end)
        {
            if let Some(addon) = self
                .store()
                .catalog_item(&account, CatalogKind::Addon, &attached.addon_id)
                .await?
            {
                total += price(&addon, cycle);
            }
        }
        Ok(total)
    }

    /// Cancels a subscription whose period ended with `cancel_at_period_end` set.
    pub(super) async fn cancel_at_end(
        &self,
        sub: &mut Subscription,
        now: i64,
    ) -> Result<(), ActionError> {
        let txn = self.store().begin().await?;
        sub.status = Status::Canceled.as_str().to_owned();
        sub.due_at = None;
        emit(&txn, sub, "subscription.canceled", None, now).await?;
        self.save(&txn, sub, now).await?;
        txn.commit().await?;
        Ok(())
    }

    pub(super) async fn save(
        &self,
        txn: &StoreTxn,
        sub: &mut Subscription,
        now: i64,
    ) -> Result<(), StoreError> {
        sub.updated_at = now;
        // Arming before the commit is harmless: the timer's `Due` waits in this actor's
        // mailbox until this message is done, and re-reads the row.
        self.arm(sub, now);
        *sub = txn.save_subscription(sub.clone()).await?;
        Ok(())
    }

    /// A timer of the subscription came due.
    pub(super) async fn apply_due(&self, id: &str) -> Result<(), ActionError> {
        let (mut sub, account, now) = self.load(id).await?;
        if sub.due_at.is_none_or(|due| due > now) {
            return Ok(());
        }
        metrics::counter!("renewals_due_total").increment(1);
        let result = self.run_due(&mut sub, &account, now).await;
        let outcome = if result.is_ok() { "ok" } else { "error" };
        metrics::counter!("renewals_processed_total", "result" => outcome).increment(1);
        result.map(|_| ())
    }

    /// `apply_due` with the reads prefetched for the timer's batch. A snapshot that turns out
    /// stale (the subscription changed since it was read) ends in a refused conditional save
    /// with nothing written; the timer then runs again on fresh reads.
    pub(super) async fn apply_due_prefetched(
        &self,
        id: &str,
        snapshot: &DueSnapshot,
    ) -> Result<(), ActionError> {
        let mut sub = snapshot.sub.clone();
        let (account, now) = self.account_and_now(&sub).await?;
        // Not due when read: an early or stale timer, as in `apply_due` (whatever made the row
        // due since then armed its timer again).
        if sub.due_at.is_none_or(|due| due > now) {
            return Ok(());
        }
        metrics::counter!("renewals_due_total").increment(1);
        let result = match self
            .run_due_with(&mut sub, &account, now, Some(snapshot))
            .await
        {
            Err(ActionError::Store(StoreError::Conflict(_))) => {
                metrics::counter!("renewal_snapshots_stale_total").increment(1);
                let (mut sub, account, now) = self.load(id).await?;
                if sub.due_at.is_none_or(|due| due > now) {
                    return Ok(());
                }
                self.run_due(&mut sub, &account, now).await
            }
            other => other,
        };
        let outcome = if result.is_ok() { "ok" } else { "error" };
        metrics::counter!("renewals_processed_total", "result" => outcome).increment(1);
        result.map(|_| ())
    }

    pub(super) async fn run_due(
        &self,
        sub: &mut Subscription,
        account: &Account,
        now: i64,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        self.run_due_with(sub, account, now, None).await
    }

    /// The timer's work on `sub` (read at `now`), reading what it needs unless `snapshot`
    /// holds it.
    pub(super) async fn run_due_with(
        &self,
        sub: &mut Subscription,
        account: &Account,
        now: i64,
        snapshot: Option<&DueSnapshot>,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let status = status_of(sub);
        // Whatever happened in between (a pause, a balance too short), a subscription set to
        // cancel at its period's end is canceled at that end.
        if status != Status::Canceled && sub.cancel_at_period_end && now >= sub.current_period_end {
            self.cancel_at_end(sub, now).await?;
            return Ok(None);
        }
        // One read for the pending check and both periods' payment (the trial's end moves the
        // period forward, never back, so `since` covers every period asked about below).
        let charges = match snapshot {
            Some(snapshot) => snapshot.charges.clone(),
            None => {
                self.store()
                    .period_charges(&sub.id, sub.current_period_start)
                    .await?
            }
        };
        if charges.pending {
            return Ok(None);
        }
        self.charge_due(sub, account, &charges, now, snapshot, None)
            .await
    }

    /// Begins the charge that is due on `sub` (read at `now`, its period's charges in
    /// `charges`) as its status says; with `resuming`, in the unit that resumes it.
    pub(super) async fn charge_due(
        &self,
        sub: &mut Subscription,
        account: &Account,
        charges: &PeriodCharges,
        now: i64,
        snapshot: Option<&DueSnapshot>,
        resuming: Option<Resuming>,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let status = status_of(sub);
        let in_pre_period = status == Status::Trialing || sub.period_index < 0;
        let purpose = match status {
            Status::Trialing | Status::Active if in_pre_period => {
                // The trial (or the prepaid time before start_date) ends: the first period
                // starts, in the subscription's cycle (a change made meanwhile included).
                sub.status = Status::Active.as_str().to_owned();
                reschedule(sub, Schedule::advance);
                sub.next_charge_date = sub.current_period_start;
                charge_purpose::FIRST
            }
            Status::Active => charge_purpose::RENEWAL,
            Status::PastDue => charge_purpose::RETRY,
            // Paused for want of balance and woken by a top-up (its timer): resumed and
            // charged what is due if the balance covers the projected fee, else left paused
            // with no timer (the next top-up wakes it again) and no event.
            Status::PausedInsufficientBalance if resuming.is_none() => {
                return self
                    .resume_into_charge(sub, account, charges, now, snapshot)
                    .await;
            }
            _ => return Ok(None),
        };
        self.charge_period(sub, account, charges, now, purpose, snapshot, resuming)
            .await
    }

    /// Resumes a paused `sub` (read at `now`, with the charges of its period since the current
    /// one began in `charges`) with its `subscription.resumed` event. When the resume makes a
    /// charge due (the renewal date passed during the pause, or the charge that paused it for
    /// balance), the resumption, its event and the charge's beginning (the fee's reservation,
    /// a conditional update that never takes the balance below zero) are one unit: all of it
    /// commits or none of it. A balance short of the fee leaves the row as read, paused for
    /// balance, with no event. A charge still pending (its outcome not yet applied) begins
    /// nothing: the resumption commits alone, as when nothing is due.
    pub(super) async fn resume_into_charge(
        &self,
        sub: &mut Subscription,
        account: &Account,
        charges: &PeriodCharges,
        now: i64,
        snapshot: Option<&DueSnapshot>,
    ) -> Result<Option<ChargeAttempt>, ActionError> {
        let paused = sub.clone();
        decide::resume(sub, now);
        let event = subscription_event(sub, "subscription.resumed", None, now);
        if charges.pending || sub.due_at.is_none_or(|due| due > now) {
            let txn = self.store().begin().await?;
            txn.insert_event(event).await?;
            self.save(&txn, sub, now).await?;
            txn.commit().await?;
            return Ok(None);
        }
        let resuming = Resuming { paused, event };
        Box::pin(self.charge_due(sub, account, charges, now, snapshot, Some(resuming))).await
    }
}

pub(super) fn price(item: &crate::store::catalog::CatalogItem, cycle: Cycle) -> i64 {
    match cycle {
        Cycle::Monthly => item.monthly_amount_cents,
        Cycle::Annual => item.annual_amount_cents,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::extract::METADATA_MAX_BYTES;
    use crate::webhooks::MAX_PAYLOAD_BYTES;
    use serde_json::json;

    #[test]
    fn a_charge_event_with_the_largest_metadata_fits_the_payload_limit() {
        // The largest metadata a request may store: a compact object of exactly 60 KB.
        let filler = "x".repeat(METADATA_MAX_BYTES - r#"{"k":""}"#.len());
        let metadata = json!({"k": filler}).to_string();
        assert_eq!(metadata.len(), METADATA_MAX_BYTES);
        let id = "sub_01a20748d4787232924bab375e9b2bba".to_owned();
        let sub = Subscription {
            id: id.clone(),
            account_id: "acct_01a20748d4787232924bab375e9b2bba".into(),
            customer_id: "cus_01a20748d4787232924bab375e9b2bba".into(),
            plan_id: "plan_01a20748d4787232924bab375e9b2bba".into(),
            cycle: "monthly".into(),
            status: "active".into(),
            current_period_start: 0,
            current_period_end: 0,
            next_charge_date: 0,
            default_payment_method_id: "pm_01a20748d4787232924bab375e9b2bba".into(),
            trial_end: None,
            cancel_at_period_end: false,
            failed_attempts: 0,
            first_failure_at: None,
            metadata: Some(metadata),
            anchor: 0,
            period_index: 0,
            next_cycle: None,
            period_cycle: "monthly".into(),
            version: 0,
            due_at: None,
            created_at: 0,
            updated_at: 0,
        };
        let charge = ChargeAttempt {
            id: "ch_01a20748d4787232924bab375e9b2bba".into(),
            account_id: sub.account_id.clone(),
            subscription_id: Some(id),
            customer_id: sub.customer_id.clone(),
            payment_method_id: sub.default_payment_method_id.clone(),
            amount_cents: i64::MAX,
            fee_cents: 0,
            reference: "ch_01a20748d4787232924bab375e9b2bba".into(),
            processor_transaction_id: None,
            status: "approved".into(),
            processor_status: Some("APPROVED".into()),
            processor_message: None,
            purpose: charge_purpose::RENEWAL.into(),
            period_start: None,
            created_at: 0,
            updated_at: 0,
            finalized_at: None,
            pending_change: None,
            refunded_cents: 0,
            refunding_cents: 0,
        };
        let event = subscription_event(
            &sub,
            "subscription.plan_changed",
            Some((&charge, "APPROVED")),
            i64::from(i32::MAX) * 1000,
        );
        assert!(
            event.body.len() <= MAX_PAYLOAD_BYTES,
            "{} bytes",
            event.body.len()
        );
    }

    /// The actors' runtime on `store`, its processor unreachable (every post an unknown
    /// outcome, the charge left pending), actors stopping after `idle`.
    async fn runtime(
        store: &crate::store::Store,
        idle: std::time::Duration,
    ) -> (
        Runtime,
        tokio::sync::mpsc::UnboundedReceiver<crate::actors::Arm>,
    ) {
        let config = crate::config::Config::new("sqlite://unused.db");
        let charger = crate::charges::Charger::new(
            store.clone(),
            crate::processor::client::ProcessorClient::new().expect("client"),
            "http://127.0.0.1:9".into(),
        );
        Runtime::start(
            store.clone(),
            charger,
            idle,
            crate::webhooks::send::Clients::new(&config).expect("clients"),
            None,
        )
        .await
        .expect("runtime")
    }

    /// A renewal's reads prefetched for its batch, then the subscription changes (here its plan,
    /// as an action would) before its actor gets the timer: the stale snapshot's unit is refused
    /// by the conditional save with nothing written, and the renewal runs again on fresh reads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stale_snapshot_writes_nothing_and_the_renewal_reads_again() {
        use crate::store::entities::charge_attempt;
        use crate::store::prefetch::fixture::{ADDON, PLAN_B, shop};
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

        let now = chrono::Utc::now().timestamp_millis();
        let shop = shop(now).await;
        let store = shop.store.clone();
        let id = shop.sub.id.clone();
        let snapshot = store
            .due_snapshots(std::slice::from_ref(&id))
            .await
            .expect("snapshots")
            .remove(&id)
            .expect("snapshot");
        let mut changed = shop.sub.clone();
        changed.plan_id = shop.plan_b.clone();
        let txn = store.begin().await.expect("begin");
        txn.save_subscription(changed).await.expect("save");
        txn.commit().await.expect("commit");

        let (runtime, _arms) = runtime(&store, std::time::Duration::from_secs(5)).await;
        runtime
            .due_prefetched(Arc::new(snapshot))
            .await
            .expect("renewal");

        let charges = charge_attempt::Entity::find()
            .filter(charge_attempt::Column::SubscriptionId.eq(id.as_str()))
            .all(store.conn())
            .await
            .expect("charges");
        assert_eq!(charges.len(), 1, "one charge: {charges:?}");
        assert_eq!(
            charges[0].amount_cents,
            PLAN_B + ADDON,
            "priced on fresh reads"
        );
        let balance = store
            .balance(&shop.account)
            .await
            .expect("balance")
            .expect("account");
        assert_eq!(
            balance.reserved_cents, charges[0].fee_cents,
            "one fee reserved"
        );
        assert_eq!(balance.available_cents, 1_000_000 - charges[0].fee_cents);
        runtime.stop().await;
        shop.remove();
    }

    /// A renewal whose charge began and is out at the processor (unreachable: its outcome
    /// unknown, the charge pending), its actor keeping the row it saved: the shop, the runtime
    /// (idle far beyond the test: an actor that stops does so because its work is done), the
    /// instant, the charge's id.
    async fn renewal_out() -> (crate::store::prefetch::fixture::Shop, Runtime, i64, String) {
        let now = chrono::Utc::now().timestamp_millis();
        let shop = crate::store::prefetch::fixture::shop(now).await;
        let (runtime, _arms) = runtime(&shop.store, std::time::Duration::from_secs(600)).await;
        runtime.due(&shop.sub.id).await.expect("renewal");
        let charge_id = runtime
            .inner
            .began
            .get(&shop.sub.id)
            .map(|kept| kept.0.clone())
            .expect("the row kept for the charge's outcome");
        (shop, runtime, now, charge_id)
    }

    /// A renewal's charge begins (the processor unreachable: its outcome unknown, the charge
    /// pending) and its actor keeps the row it saved; then the row changes outside the actor.
    /// The outcome that arrives next settles on the row as it is now: the batch's conditional
    /// save refuses the kept one and the outcome is applied alone on a fresh read, keeping the
    /// change. Then the actor stops: its renewal's work is done.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_outcome_settles_on_the_row_as_it_is_not_as_its_charge_began() {
        let (shop, runtime, _, charge_id) = renewal_out().await;
        let (store, id) = (shop.store.clone(), shop.sub.id.clone());
        let began = store
            .subscription_by_id(&id)
            .await
            .expect("read")
            .expect("subscription");
        let charge = store
            .charge_by_id(&charge_id)
            .await
            .expect("read")
            .expect("charge");
        assert_eq!(charge.status, "pending");
        assert_eq!(
            runtime.charge_out(&charge.reference).as_ref(),
            Some(&charge),
            "the ingress finds the charge out at the processor without reading it"
        );

        let mut changed = began.clone();
        changed.metadata = Some(r#"{"changed":"outside"}"#.into());
        let txn = store.begin().await.expect("begin");
        let changed = txn.save_subscription(changed).await.expect("save");
        txn.commit().await.expect("commit");

        runtime
            .outcome(&id, &charge, "APPROVED", None, Some("tx-outside"), None)
            .await
            .expect("outcome");
        let settled = store
            .charge_by_id(&charge_id)
            .await
            .expect("read")
            .expect("charge");
        assert_eq!(settled.status, "approved");
        let now_row = store
            .subscription_by_id(&id)
            .await
            .expect("read")
            .expect("subscription");
        assert_eq!(
            now_row.metadata, changed.metadata,
            "the change made while the charge was out is kept"
        );
        assert_eq!(now_row.version, changed.version + 1, "saved once, after it");
        assert_eq!(now_row.status, "active");
        assert!(
            runtime.inner.began.get(&id).is_none(),
            "the kept row is used once"
        );
        assert!(
            runtime.charge_out(&charge.reference).is_none(),
            "an applied outcome's charge is no longer out: its next event is read"
        );
        // The outcome ended the renewal's work: its actor stops (after answering) without
        // waiting to be idle.
        let bound = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while runtime.inner.subscriptions.get(&id).is_some() {
            assert!(
                std::time::Instant::now() < bound,
                "the actor is still live 10 s after its charge's outcome"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let balance = store
            .balance(&shop.account)
            .await
            .expect("balance")
            .expect("account");
        assert_eq!(balance.reserved_cents, 0, "the fee captured");
        assert_eq!(balance.available_cents, 1_000_000 - charge.fee_cents);
        runtime.stop().await;
        shop.remove();
    }

    /// The ingress takes an event's charge from the charges out at the processor, as it
    /// began. When another writer (a recheck, another node) settled it meanwhile, the event
    /// still moves no money twice: its contradicting outcome is kept as a conflict and the
    /// fee is captured once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_event_for_a_charge_out_but_settled_elsewhere_moves_no_money_again() {
        use crate::processor::client::Transaction;
        use crate::processor::outcome::ProcessorOutcome;
        use crate::store::charges::ProcessorEvent;

        let (shop, runtime, now, charge_id) = renewal_out().await;
        let store = shop.store.clone();
        let settled = store
            .settle_charge(&charge_id, "APPROVED", None, Some("tx-elsewhere"), now)
            .await
            .expect("settle")
            .expect("final");
        assert!(settled.newly);
        let out = runtime
            .charge_out(&charge_id)
            .expect("still out for this node");
        assert_eq!(out.status, "pending", "as it began");

        let tx = Transaction {
            id: "tx-elsewhere".into(),
            status: "DECLINED".into(),
            reference: out.reference.clone(),
            amount_in_cents: out.amount_cents,
            currency: Some("COP".into()),
            status_message: None,
        };
        let event = ProcessorEvent {
            checksum: "c0ffee".into(),
            account_id: out.account_id.clone(),
            event_type: "transaction.updated".into(),
            transaction_id: Some(tx.id.clone()),
            reference: Some(tx.reference.clone()),
            status: Some(tx.status.clone()),
            body: "{}".into(),
            received_at: now,
            processed_at: Some(now),
        };
        let first = runtime
            .apply_processor_outcome(&out, &ProcessorOutcome::of_transaction(tx), Some(event))
            .await
            .expect("applied");
        assert!(first, "the event itself is new");
        let charge = store
            .charge_by_id(&charge_id)
            .await
            .expect("read")
            .expect("charge");
        assert_eq!(charge.status, "approved", "the first outcome stands");
        assert_eq!(
            store.count_charge_conflicts().await.expect("count"),
            1,
            "the contradicting event is kept for operators"
        );
        let balance = store
            .balance(&shop.account)
            .await
            .expect("balance")
            .expect("account");
        assert_eq!(balance.reserved_cents, 0, "the fee captured once");
        assert_eq!(balance.available_cents, 1_000_000 - charge.fee_cents);
        assert!(
            runtime.charge_out(&charge_id).is_none(),
            "no longer out once its outcome is known here"
        );
        runtime.stop().await;
        shop.remove();
    }

    /// A pending answer noted for a charge out (its transaction id, from a `PENDING` event or
    /// a recheck) makes the charge as it began stale: the ingress reads the charge again, so
    /// a final event naming another transaction is still caught as a mismatch.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_noted_pending_answer_sends_the_ingress_back_to_the_database() {
        use crate::processor::client::Transaction;
        use crate::processor::outcome::ProcessorOutcome;

        let (shop, runtime, _, charge_id) = renewal_out().await;
        let out = runtime.charge_out(&charge_id).expect("out");
        let pending = Transaction {
            id: "tx-noted".into(),
            status: "PENDING".into(),
            reference: out.reference.clone(),
            amount_in_cents: out.amount_cents,
            currency: Some("COP".into()),
            status_message: None,
        };
        runtime
            .apply_processor_outcome(&out, &ProcessorOutcome::of_transaction(pending), None)
            .await
            .expect("noted");
        let stored = shop
            .store
            .charge_by_id(&charge_id)
            .await
            .expect("read")
            .expect("charge");
        assert_eq!(stored.processor_transaction_id.as_deref(), Some("tx-noted"));
        assert_eq!(stored.status, "pending");
        assert!(
            runtime.charge_out(&charge_id).is_none(),
            "the charge as it began no longer stands for the stored one"
        );
        runtime.stop().await;
        shop.remove();
    }
}
