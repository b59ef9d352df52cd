//! Invoices (CONTRACT §11): one per approved charge, issued by `issue_in` inside the
//! transaction that settles the charge (`charges::settle_charge_in` alone, `batch` for a
//! renewal burst), so a settled approval without its invoice, or an invoice of a charge that was
//! not approved, cannot be committed. The database holds the rest: one invoice per charge
//! (`charge_id` UNIQUE), its total equal to the approved charge's amount (a trigger), its sums
//! (CHECKs), and each series' numbers unique; the numbers have no gap because `take_numbers`
//! moves the series' counter in that same transaction.

use super::entities::charge_attempt::Model as ChargeAttempt;
use super::entities::subscription::Model as Subscription;
use super::entities::{account, customer, invoice, subscription};
use super::invoice_rows::{Billed, invoice_row};
use super::outbox::{Event, event_row};
use super::series::take_numbers;
use super::txn::StoreTxn;
use super::{Page, PageRequest, Store, StoreError, StoreResult, fetch_page};
use crate::domain::charge_status::ChargeStatus;
use crate::domain::event_type::EventType;
use crate::domain::tax::TaxCode;
use crate::ids::{
    AccountId, ChargeAttemptId, CustomerId, InvoiceId, SubscriptionId, WebhookEndpointId,
};
use crate::store::Scoped;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter,
    QuerySelect,
};
use std::collections::{BTreeMap, HashMap};

pub use invoice::Model as Invoice;

pub use super::invoice_rows::{DraftLine, INVOICE_SERIES, InvoiceLine, Party, TaxEntry, TaxId};

/// The prefix of the sales invoices' series while DIAN is off (`FV-1`, `FV-2`, …).
pub const INVOICE_PREFIX: &str = "FV-";

/// Filters of `GET /v1/invoices`.
#[derive(Debug, Default)]
pub struct InvoiceFilter {
    pub customer_id: Option<CustomerId>,
    pub subscription_id: Option<SubscriptionId>,
    pub charge_id: Option<ChargeAttemptId>,
    /// `issued_from` and `issued_to`, as instants.
    pub issued: super::issued::IssuedBounds,
}

impl Store {
    pub async fn invoice(
        &self,
        account: &AccountId,
        id: &InvoiceId,
    ) -> StoreResult<Option<Invoice>> {
        Ok(invoice::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// The invoice whose hosted page is at `token` (`hosted_url`), of whichever account: the
    /// token is the customer's only credential, as a checkout session's id is.
    pub async fn invoice_by_hosted_token(&self, token: &str) -> StoreResult<Option<Invoice>> {
        Ok(invoice::Entity::find()
            .filter(invoice::Column::HostedToken.eq(token))
            .one(self.conn())
            .await?)
    }

    pub async fn list_invoices(
        &self,
        account: &AccountId,
        filter: &InvoiceFilter,
        page: &PageRequest,
    ) -> StoreResult<Page<Invoice>> {
        let mut select = invoice::Entity::scoped(account);
        if let Some(customer) = &filter.customer_id {
            select = select.filter(invoice::Column::CustomerId.eq(customer));
        }
        if let Some(subscription) = &filter.subscription_id {
            select = select.filter(invoice::Column::SubscriptionId.eq(subscription));
        }
        if let Some(charge) = &filter.charge_id {
            select = select.filter(invoice::Column::ChargeId.eq(charge));
        }
        select = select.filter(super::issued::within(
            sea_orm::Condition::all(),
            invoice::Column::IssuedAt,
            filter.issued,
        ));
        fetch_page(self.conn(), select, invoice::Column::Id, page).await
    }
}

/// The lines a charge records (`charge_attempts.invoice_lines`): its draft lines when they add
/// up to its amount; otherwise one line of the whole amount: at its first line's tax code when
/// its lines are wrong (logged), at `default_code` when it has none (begun before invoices).
fn lines_of(charge: &ChargeAttempt, default_code: TaxCode) -> Vec<DraftLine> {
    let drafted: Option<Vec<DraftLine>> = charge
        .invoice_lines
        .as_deref()
        .and_then(|raw| serde_json::from_str(raw).ok());
    match drafted {
        Some(lines)
            if !lines.is_empty()
                && lines.iter().map(|l| l.amount_cents).sum::<i64>() == charge.amount_cents =>
        {
            lines
        }
        drafted => {
            if drafted.is_some() {
                tracing::error!(charge = %charge.id, "a charge's lines do not add up to its amount; invoiced as one line");
            }
            let first_code = drafted.and_then(|lines| lines.first().map(|l| l.tax_code));
            vec![DraftLine {
                description: "Cargo".into(),
                quantity: 1,
                amount_cents: charge.amount_cents,
                discount_cents: 0,
                tax_code: first_code.unwrap_or(default_code),
                period_start: charge.period_start,
                period_end: None,
                plan_id: None,
                addon_id: None,
            }]
        }
    }
}

/// Issues the invoice of each charge of `charges` (each just approved, in the caller's
/// transaction), numbered in order, and answers their `invoice.created` events for the caller
/// to write with the rest of the transaction's events.
pub(crate) async fn issue_in<C: ConnectionTrait>(
    conn: &C,
    charges: &[&ChargeAttempt],
) -> StoreResult<Vec<Event>> {
    let Drafts { rows, events } = draft_in(conn, charges, None).await?;
    number_in(conn, rows).await?;
    Ok(events)
}

/// Invoices drafted in a transaction, not yet numbered: their events can be written with the
/// transaction's others before `number_in` takes their numbers.
pub(crate) struct Drafts {
    pub(crate) rows: Vec<Invoice>,
    pub(crate) events: Vec<Event>,
}

/// The invoices of `charges` (each just approved) and their `invoice.created` events, read
/// within `conn`'s transaction: the customers as they are now, and each subscription's metadata
/// from `metadata` (the caller's rows, by subscription id) or, without it, from the database.
pub(crate) async fn draft_in<C: ConnectionTrait>(
    conn: &C,
    charges: &[&ChargeAttempt],
    metadata: Option<&HashMap<&SubscriptionId, Option<&str>>>,
) -> StoreResult<Drafts> {
    if charges.is_empty() {
        return Ok(Drafts {
            rows: Vec::new(),
            events: Vec::new(),
        });
    }
    if let Some(charge) = charges.iter().find(|c| !c.is(ChargeStatus::Approved)) {
        return Err(StoreError::invariant(format!(
            "an invoice for charge {}, which is {}",
            charge.id, charge.status
        )));
    }
    let customers: HashMap<CustomerId, customer::Model> = customer::Entity::find()
        .filter(customer::Column::Id.is_in(charges.iter().map(|c| &c.customer_id)))
        .all(conn)
        .await?
        .into_iter()
        .map(|c| (c.id.clone(), c))
        .collect();
    let with_subscription: Vec<&SubscriptionId> = charges
        .iter()
        .filter_map(|c| c.subscription_id.as_ref())
        .collect();
    let read: HashMap<SubscriptionId, Option<String>> =
        if with_subscription.is_empty() || metadata.is_some() {
            HashMap::new()
        } else {
            subscription::Entity::find()
                .select_only()
                .column(subscription::Column::Id)
                .column(subscription::Column::Metadata)
                .filter(subscription::Column::Id.is_in(with_subscription))
                .into_tuple::<(SubscriptionId, Option<String>)>()
                .all(conn)
                .await?
                .into_iter()
                .collect()
        };
    let metadata_of = |id: &SubscriptionId| -> Option<String> {
        match metadata {
            Some(known) => known.get(id).copied().flatten().map(str::to_owned),
            None => read.get(id).cloned().flatten(),
        }
    };
    // The accounts' default tax codes (for a charge begun without lines) and test-clock
    // offsets: an invoice is dated by its account's clock (`crate::clock`), as the account's
    // events are, while a charge's `finalized_at` is the machine's time.
    let mut account_ids: Vec<&AccountId> = charges.iter().map(|c| &c.account_id).collect();
    account_ids.sort();
    account_ids.dedup();
    // Their invoicing data too: each invoice keeps its seller as it is now (issue 46).
    let accounts: HashMap<AccountId, (TaxCode, i64, Option<String>)> = account::Entity::find()
        .select_only()
        .column(account::Column::Id)
        .column(account::Column::DefaultTaxCode)
        .column(account::Column::ClockOffsetMs)
        .column(account::Column::Invoicing)
        .filter(account::Column::Id.is_in(account_ids))
        .into_tuple::<(AccountId, TaxCode, i64, Option<String>)>()
        .all(conn)
        .await?
        .into_iter()
        .map(|(id, code, offset, seller)| (id, (code, offset, seller)))
        .collect();
    let mut rows = Vec::with_capacity(charges.len());
    let mut events = Vec::with_capacity(charges.len());
    for charge in charges {
        let (default_code, clock_offset, seller) = accounts
            .get(&charge.account_id)
            .cloned()
            .unwrap_or_default();
        let row = invoice_row(
            Billed {
                account_id: &charge.account_id,
                charge_id: Some(&charge.id),
                subscription_id: charge.subscription_id.as_ref(),
                customer_id: &charge.customer_id,
                lines: lines_of(charge, default_code),
                issued_at: charge.finalized_at.unwrap_or(charge.updated_at) + clock_offset,
                period_start: None,
                seller,
            },
            &customers,
        )?;
        let metadata = charge
            .subscription_id
            .as_ref()
            .and_then(metadata_of)
            .and_then(|raw| serde_json::from_str(&raw).ok())
            .unwrap_or(serde_json::Value::Null);
        let data = serde_json::json!({
            "subscription_id": charge.subscription_id,
            "metadata": metadata,
            "invoice_id": row.id,
            "amount_in_cents": row.total_cents,
        });
        events.push(event_row(
            &charge.account_id,
            charge.subscription_id.as_ref(),
            EventType::InvoiceCreated,
            data,
            row.issued_at,
        ));
        rows.push(row);
    }
    Ok(Drafts { rows, events })
}

/// Numbers drafted invoices (`Drafts::rows`) in their accounts' series, in order, and writes
/// them. Takes each series' row, so a caller that also changes the account's row does that
/// first (one lock order).
pub(crate) async fn number_in<C: ConnectionTrait>(
    conn: &C,
    drafts: Vec<Invoice>,
) -> StoreResult<()> {
    let mut by_account: BTreeMap<AccountId, Vec<Invoice>> = BTreeMap::new();
    for row in drafts {
        by_account
            .entry(row.account_id.clone())
            .or_default()
            .push(row);
    }
    let mut rows = Vec::new();
    for (account_id, invoices) in by_account {
        let first = take_numbers(
            conn,
            &account_id,
            INVOICE_SERIES,
            INVOICE_PREFIX,
            invoices.len() as i64,
        )
        .await?;
        for (offset, mut row) in invoices.into_iter().enumerate() {
            row.sequence = first + offset as i64;
            row.number = format!("{INVOICE_PREFIX}{}", row.sequence);
            rows.push(row);
        }
    }
    if rows.is_empty() {
        return Ok(());
    }
    let dian =
        super::dian::numbering::dian_accounts(conn, rows.iter().map(|r| &r.account_id)).await?;
    if dian.is_empty() {
        invoice::Entity::insert_many(
            rows.into_iter()
                .map(|row| row.into_active_model().reset_all()),
        )
        .exec_without_returning(conn)
        .await?;
        return Ok(());
    }
    invoice::Entity::insert_many(
        rows.iter()
            .map(|row| row.clone().into_active_model().reset_all()),
    )
    .exec_without_returning(conn)
    .await?;
    let written: Vec<&Invoice> = rows.iter().collect();
    super::dian::numbering::number_invoices_guarded(conn, &written, &dian).await
}

/// Issues the invoice of one approved `charge` and writes its event with the event's
/// deliveries, in the caller's transaction: the endpoints given one, to wake after the commit.
pub(crate) async fn issue_with_events<C: ConnectionTrait>(
    conn: &C,
    charge: &ChargeAttempt,
) -> StoreResult<Vec<WebhookEndpointId>> {
    let events = issue_in(conn, &[charge]).await?;
    super::fanout::write(conn, &events.iter().collect::<Vec<_>>()).await
}

impl super::txn::StoreTxn {
    /// Issues the invoice of an approved checkout charge, once the transaction that settles it
    /// has made the customer and the subscription it is for.
    pub async fn issue_invoice(&self, charge_id: &ChargeAttemptId) -> StoreResult<()> {
        if self.issuing == super::Issuing::SkippedForBenchmark {
            return Ok(());
        }
        let charge = super::entities::charge_attempt::Entity::find_by_id(charge_id.clone())
            .one(self.conn())
            .await?
            .ok_or_else(|| StoreError::invariant(format!("no charge {charge_id} to invoice")))?;
        let touched = issue_with_events(self.conn(), &charge).await?;
        self.touch(touched);
        Ok(())
    }
}

impl StoreTxn {
    /// Issues the invoice of a period of `sub` starting at `period_start` whose `lines` add up
    /// to 0 (a discount took everything): no charge, one invoice of 0 with its
    /// `invoice.created`, in this transaction. A second one for the same period is refused by
    /// the database (`invoices_zero_period`), as is one beside a live charge of that period.
    pub async fn issue_free_invoice(
        &self,
        sub: &Subscription,
        lines: Vec<DraftLine>,
        period_start: i64,
        now: i64,
    ) -> StoreResult<()> {
        if lines.iter().map(|l| l.amount_cents).sum::<i64>() != 0 {
            return Err(StoreError::invariant(format!(
                "a free invoice of subscription {} with lines that are not free",
                sub.id
            )));
        }
        let customers: HashMap<CustomerId, customer::Model> =
            customer::Entity::find_by_id(sub.customer_id.clone())
                .one(self.conn())
                .await?
                .into_iter()
                .map(|c| (c.id.clone(), c))
                .collect();
        let seller = account::Entity::find_by_id(sub.account_id.clone())
            .select_only()
            .column(account::Column::Invoicing)
            .into_tuple::<Option<String>>()
            .one(self.conn())
            .await?
            .flatten();
        let row = invoice_row(
            Billed {
                account_id: &sub.account_id,
                charge_id: None,
                subscription_id: Some(&sub.id),
                customer_id: &sub.customer_id,
                lines,
                issued_at: now,
                period_start: Some(period_start),
                seller,
            },
            &customers,
        )?;
        let metadata = sub
            .metadata
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw).ok())
            .unwrap_or(serde_json::Value::Null);
        let data = serde_json::json!({
            "subscription_id": sub.id,
            "metadata": metadata,
            "invoice_id": row.id,
            "amount_in_cents": 0,
        });
        let event = event_row(
            &sub.account_id,
            Some(&sub.id),
            EventType::InvoiceCreated,
            data,
            now,
        );
        number_in(self.conn(), vec![row]).await?;
        self.insert_event(event).await
    }
}
