//! Plans, add-ons (one `catalog_items` table told apart by kind) and customers.

use super::entities::{catalog_item, customer};
use super::{Page, PageRequest, Store, StoreResult, fetch_page};
use crate::domain::discount::Discount;
use crate::domain::time::Cycle;
use crate::ids::{AccountId, AddonId, CatalogItemId, CustomerId, PlanId};
use crate::store::Scoped;
use sea_orm::{ActiveModelTrait, ColumnTrait, QueryFilter, Set};

pub use catalog_item::Model as CatalogItem;
pub use customer::Model as Customer;

impl CatalogItem {
    /// The price rule: a plan's or an add-on's amount for one period of `cycle`.
    pub fn price(&self, cycle: Cycle) -> i64 {
        match cycle {
            Cycle::Monthly => self.monthly_amount_cents,
            Cycle::Annual => self.annual_amount_cents,
        }
    }

    /// Its invoice line for `quantity` of one period of `cycle` from `start` to `end`: its
    /// price times the quantity, its name and its tax code.
    pub fn line(
        &self,
        cycle: Cycle,
        quantity: i64,
        start: i64,
        end: i64,
    ) -> super::invoices::DraftLine {
        super::invoices::DraftLine {
            quantity,
            ..self.line_of(self.price(cycle).saturating_mul(quantity), start, end)
        }
    }

    /// Its invoice line of `amount` (a proration) from `start` to `end`.
    pub fn line_of(&self, amount: i64, start: i64, end: i64) -> super::invoices::DraftLine {
        super::invoices::DraftLine {
            description: self.name.clone(),
            quantity: 1,
            amount_cents: amount,
            discount_cents: 0,
            tax_code: self.tax_code,
            period_start: Some(start),
            period_end: Some(end),
            plan_id: self.id.plan().cloned(),
            addon_id: self.id.addon().cloned(),
        }
    }
}

/// The price rule (CONTRACT §5, §14), written once: the lines of one period from `start` to
/// `end` at `cycle`: the plan's amount times `quantity`, then each add-on's, then the discount
/// taken off them line by line. Their sum is what the period charges.
pub fn period_lines<'a>(
    plan: &CatalogItem,
    addons: impl IntoIterator<Item = &'a CatalogItem>,
    cycle: Cycle,
    quantity: i64,
    (start, end): (i64, i64),
    discount: Option<&Discount>,
) -> Vec<super::invoices::DraftLine> {
    let mut lines: Vec<_> = std::iter::once(plan.line(cycle, quantity, start, end))
        .chain(
            addons
                .into_iter()
                .map(|addon| addon.line(cycle, 1, start, end)),
        )
        .collect();
    if let Some(discount) = discount {
        super::coupons::discount_lines(&mut lines, discount, false);
    }
    lines
}

/// Which catalog an item belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatalogKind {
    Plan,
    Addon,
}

impl CatalogKind {
    /// The kind an id names.
    pub fn of(id: &CatalogItemId) -> Self {
        match id {
            CatalogItemId::Plan(_) => CatalogKind::Plan,
            CatalogItemId::Addon(_) => CatalogKind::Addon,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CatalogKind::Plan => "plan",
            CatalogKind::Addon => "addon",
        }
    }
}

/// A change of name or active flag.
#[derive(Clone, Debug, Default)]
pub struct CatalogPatch {
    pub name: Option<String>,
    pub active: Option<bool>,
    /// Applies to charges that begin after the change (a charge's lines are decided with it).
    pub tax_code: Option<crate::domain::tax::TaxCode>,
}

/// What `PATCH /v1/customers/{id}` changes; `None` leaves a field as it is.
#[derive(Debug, Default)]
pub struct CustomerPatch {
    pub email: Option<String>,
    pub name: Option<String>,
    /// The document's kind and number.
    pub tax_id: Option<(String, String)>,
    pub legal_name: Option<String>,
    /// JSON `{line, city_code, country}`.
    pub address: Option<String>,
    /// E.164.
    pub phone: Option<String>,
    pub whatsapp_opt_in: Option<bool>,
}

impl Store {
    pub async fn insert_catalog_item(&self, item: CatalogItem) -> StoreResult<CatalogItem> {
        let model: catalog_item::ActiveModel = item.into();
        Ok(model.insert(self.writer()).await?)
    }

    /// The account's plan or add-on `id`: a row of the kind its id names (a plan's id with an
    /// add-on's prefix finds nothing, as it did as a string).
    pub async fn catalog_item(
        &self,
        account: &AccountId,
        id: &CatalogItemId,
    ) -> StoreResult<Option<CatalogItem>> {
        Ok(catalog_item::Entity::find_scoped(account, id.clone())
            .filter(catalog_item::Column::Kind.eq(CatalogKind::of(id).as_str()))
            .one(self.conn())
            .await?)
    }

    /// The account's plan `id`.
    pub async fn plan(&self, account: &AccountId, id: &PlanId) -> StoreResult<Option<CatalogItem>> {
        self.catalog_item(account, &CatalogItemId::Plan(id.clone()))
            .await
    }

    /// The account's add-on `id`.
    pub async fn addon(
        &self,
        account: &AccountId,
        id: &AddonId,
    ) -> StoreResult<Option<CatalogItem>> {
        self.catalog_item(account, &CatalogItemId::Addon(id.clone()))
            .await
    }

    pub async fn list_catalog_items(
        &self,
        account: &AccountId,
        kind: CatalogKind,
        page: &PageRequest,
    ) -> StoreResult<Page<CatalogItem>> {
        let select = catalog_item::Entity::scoped(account)
            .filter(catalog_item::Column::Kind.eq(kind.as_str()));
        fetch_page(self.conn(), select, catalog_item::Column::Id, page).await
    }

    pub async fn update_catalog_item(
        &self,
        account: &AccountId,
        id: &CatalogItemId,
        patch: CatalogPatch,
    ) -> StoreResult<Option<CatalogItem>> {
        let Some(found) = self.catalog_item(account, id).await? else {
            return Ok(None);
        };
        let mut model: catalog_item::ActiveModel = found.clone().into();
        if let Some(name) = patch.name {
            model.name = Set(name);
        }
        if let Some(active) = patch.active {
            model.active = Set(active);
        }
        if let Some(tax_code) = patch.tax_code {
            model.tax_code = Set(tax_code);
        }
        if !model.is_changed() {
            return Ok(Some(found));
        }
        Ok(Some(model.update(self.writer()).await?))
    }

    pub async fn insert_customer(&self, customer: Customer) -> StoreResult<Customer> {
        let model: customer::ActiveModel = customer.into();
        Ok(model.insert(self.writer()).await?)
    }

    pub async fn customer(
        &self,
        account: &AccountId,
        id: &CustomerId,
    ) -> StoreResult<Option<Customer>> {
        Ok(customer::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// Applies `patch` to the account's customer `id`; `None` when it has none of that id.
    pub async fn update_customer(
        &self,
        account: &AccountId,
        id: &CustomerId,
        patch: CustomerPatch,
    ) -> StoreResult<Option<Customer>> {
        let Some(found) = self.customer(account, id).await? else {
            return Ok(None);
        };
        let mut model: customer::ActiveModel = found.clone().into();
        if let Some(email) = patch.email {
            model.email = Set(email);
        }
        if let Some(name) = patch.name {
            model.name = Set(name);
        }
        if let Some((kind, number)) = patch.tax_id {
            model.tax_id_type = Set(Some(kind));
            model.tax_id_number = Set(Some(number));
        }
        if let Some(legal_name) = patch.legal_name {
            model.legal_name = Set(Some(legal_name));
        }
        if let Some(phone) = patch.phone {
            model.phone = Set(Some(phone));
        }
        if let Some(opt_in) = patch.whatsapp_opt_in {
            model.whatsapp_opt_in = Set(opt_in);
        }
        if let Some(address) = patch.address {
            model.address = Set(Some(address));
        }
        if !model.is_changed() {
            return Ok(Some(found));
        }
        Ok(Some(model.update(self.writer()).await?))
    }

    pub async fn list_customers(
        &self,
        account: &AccountId,
        page: &PageRequest,
    ) -> StoreResult<Page<Customer>> {
        let select = customer::Entity::scoped(account);
        fetch_page(self.conn(), select, customer::Column::Id, page).await
    }
}
