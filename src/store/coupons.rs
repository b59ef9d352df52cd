//! Coupons and promotion codes (CONTRACT §14): their rows, and their redemption inside the
//! transaction that gives a subscription its discount. A redemption is a conditional
//! `UPDATE … SET times_redeemed = times_redeemed + 1 WHERE … times_redeemed < max_redemptions`
//! backed by a CHECK, so of two customers racing for the last redemption exactly one wins,
//! whatever the nodes and connections; a rollback gives the redemption back.

use super::entities::{coupon, promotion_code};
use super::invoices::DraftLine;
use super::txn::StoreTxn;
use super::{Page, PageRequest, Store, StoreError, StoreResult, fetch_page};
use crate::domain::discount::{AppliesTo, Discount, Off};
use crate::ids::{
    AccountId, AddonId, ChargeAttemptId, CouponId, CustomerId, PlanId, PromotionCodeId,
    SubscriptionId,
};
use crate::store::Scoped;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, EntityTrait, PaginatorTrait, QueryFilter, Set,
};

pub use coupon::Model as Coupon;
pub use promotion_code::Model as PromotionCode;

impl Coupon {
    /// Its money terms.
    pub fn off(&self) -> Option<Off> {
        match (self.percent_off_bps, self.amount_off_cents) {
            (Some(bps), None) => Some(Off::Percent(bps)),
            (None, Some(cents)) => Some(Off::Amount(cents)),
            _ => None,
        }
    }

    /// The plans and add-ons it is limited to, if any.
    pub fn applies_to(&self) -> Option<AppliesTo> {
        self.applies_to
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw).ok())
    }

    /// Whether it can still be redeemed at `now`: not made invalid, before its `redeem_by`,
    /// and with redemptions left.
    pub fn valid_at(&self, now: i64) -> bool {
        self.active
            && self.redeem_by.is_none_or(|by| now < by)
            && self
                .max_redemptions
                .is_none_or(|max| self.times_redeemed < max)
    }
}

impl PromotionCode {
    /// Whether it can still be redeemed at `now` (its own limits; the coupon's are apart).
    pub fn valid_at(&self, now: i64) -> bool {
        self.active
            && self.expires_at.is_none_or(|at| now < at)
            && self
                .max_redemptions
                .is_none_or(|max| self.times_redeemed < max)
    }
}

/// Takes `discount` off the lines it covers (a proration's one line takes only a percent off):
/// each line's `amount_cents` becomes what is left and `discount_cents` what came off.
pub fn discount_lines(lines: &mut [DraftLine], discount: &Discount, proration: bool) {
    let amounts: Vec<i64> = lines.iter().map(|l| l.amount_cents).collect();
    let covered: Vec<bool> = lines
        .iter()
        .map(|l| discount.covers(l.plan_id.as_ref(), l.addon_id.as_ref()))
        .collect();
    for (line, off) in lines
        .iter_mut()
        .zip(discount.of_lines(&amounts, &covered, proration))
    {
        line.amount_cents -= off;
        line.discount_cents += off;
    }
}

/// The key a code is matched by: codes are case-insensitive.
pub fn code_key(code: &str) -> String {
    code.to_lowercase()
}

/// Why a coupon or code cannot be redeemed: each is a 400 naming the field it came from.
#[derive(Debug, thiserror::Error)]
pub enum RedeemError {
    #[error("No coupon with id `{0}`.")]
    NoCoupon(CouponId),
    #[error("No active promotion code `{0}`.")]
    NoCode(String),
    #[error("This {0} is no longer valid (made invalid, expired or fully redeemed).")]
    Spent(&'static str),
    #[error("This promotion code belongs to another customer.")]
    OtherCustomer,
    #[error("This promotion code is for a customer's first purchase only.")]
    NotFirstTime,
    #[error("The coupon applies to none of this subscription's plan and add-ons.")]
    NotApplicable,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a redemption is asked for: a coupon, or a promotion code as typed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Redeem {
    Coupon(CouponId),
    Code(String),
}

/// What comes with a redemption: whose and for what.
pub struct Redeeming<'a> {
    pub account: &'a AccountId,
    /// `None` for a customer the payment is to create (a checkout's).
    pub customer_id: Option<&'a CustomerId>,
    /// The payer's e-mail where there is no customer yet (a checkout's): a first purchase is
    /// one of no customer of the account with this address, whatever its case.
    pub email: Option<&'a str>,
    /// What this very purchase has already written, which is not "another" purchase: the
    /// subscription a discount is applied to, the checkout's own pending charge.
    pub subscription_id: Option<&'a SubscriptionId>,
    pub charge_id: Option<&'a ChargeAttemptId>,
    /// The subscription's plan and add-ons (a limited coupon must cover one of them).
    pub plan_id: &'a PlanId,
    pub addon_ids: &'a [AddonId],
    pub now: i64,
}

impl Redeeming<'_> {
    /// Who buys, as a first purchase is judged.
    fn buyer(&self) -> super::first_purchases::Buyer<'_> {
        super::first_purchases::Buyer {
            account: self.account,
            customer_id: self.customer_id,
            email: self.email,
            subscription_id: self.subscription_id,
            charge_id: self.charge_id,
            now: self.now,
        }
    }
}

impl Store {
    pub async fn insert_coupon(&self, coupon: Coupon) -> StoreResult<Coupon> {
        let model: coupon::ActiveModel = coupon.into();
        Ok(model.insert(self.writer()).await?)
    }

    pub async fn coupon(&self, account: &AccountId, id: &CouponId) -> StoreResult<Option<Coupon>> {
        Ok(coupon::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    pub async fn list_coupons(
        &self,
        account: &AccountId,
        page: &PageRequest,
    ) -> StoreResult<Page<Coupon>> {
        let select = coupon::Entity::scoped(account);
        fetch_page(self.conn(), select, coupon::Column::Id, page).await
    }

    /// Renames it or makes it (in)valid; its money terms never change.
    pub async fn update_coupon(
        &self,
        account: &AccountId,
        id: &CouponId,
        name: Option<String>,
        active: Option<bool>,
    ) -> StoreResult<Option<Coupon>> {
        let Some(found) = self.coupon(account, id).await? else {
            return Ok(None);
        };
        let mut model: coupon::ActiveModel = found.clone().into();
        if let Some(name) = name {
            model.name = Set(name);
        }
        if let Some(active) = active {
            model.active = Set(active);
        }
        if !model.is_changed() {
            return Ok(Some(found));
        }
        Ok(Some(model.update(self.writer()).await?))
    }

    /// Inserts a code; a unique violation means another active code of the account has the
    /// same letters (`StoreError::is_unique_violation`).
    pub async fn insert_promotion_code(&self, code: PromotionCode) -> StoreResult<PromotionCode> {
        let model: promotion_code::ActiveModel = code.into();
        Ok(model.insert(self.writer()).await?)
    }

    /// Whether the account has an active code of these letters (in any case).
    pub async fn active_code_exists(&self, account: &AccountId, code: &str) -> StoreResult<bool> {
        Ok(promotion_code::Entity::scoped(account)
            .filter(promotion_code::Column::CodeKey.eq(code_key(code)))
            .filter(promotion_code::Column::Active.eq(true))
            .count(self.conn())
            .await?
            > 0)
    }

    pub async fn promotion_code(
        &self,
        account: &AccountId,
        id: &PromotionCodeId,
    ) -> StoreResult<Option<PromotionCode>> {
        Ok(promotion_code::Entity::find_scoped(account, id.clone())
            .one(self.conn())
            .await?)
    }

    /// The account's active code typed as `code` (any case).
    pub async fn promotion_code_by_code(
        &self,
        account: &AccountId,
        code: &str,
    ) -> StoreResult<Option<PromotionCode>> {
        Ok(promotion_code::Entity::scoped(account)
            .filter(promotion_code::Column::CodeKey.eq(code_key(code)))
            .filter(promotion_code::Column::Active.eq(true))
            .one(self.conn())
            .await?)
    }

    pub async fn list_promotion_codes(
        &self,
        account: &AccountId,
        coupon_id: Option<&CouponId>,
        page: &PageRequest,
    ) -> StoreResult<Page<PromotionCode>> {
        let mut select = promotion_code::Entity::scoped(account);
        if let Some(coupon_id) = coupon_id {
            select = select.filter(promotion_code::Column::CouponId.eq(coupon_id));
        }
        fetch_page(self.conn(), select, promotion_code::Column::Id, page).await
    }

    pub async fn set_promotion_code_active(
        &self,
        account: &AccountId,
        id: &PromotionCodeId,
        active: bool,
    ) -> StoreResult<Option<PromotionCode>> {
        let Some(found) = self.promotion_code(account, id).await? else {
            return Ok(None);
        };
        if found.active == active {
            return Ok(Some(found));
        }
        let mut model: promotion_code::ActiveModel = found.into();
        model.active = Set(active);
        Ok(Some(model.update(self.writer()).await?))
    }

    /// What `redeem` would give, checked without writing: the discount a subscription would
    /// carry (for a preview, a checkout page), or why not.
    pub async fn check_redeem(
        &self,
        what: &Redeem,
        whom: &Redeeming<'_>,
    ) -> Result<Discount, RedeemError> {
        let (coupon, code) = self.find_redeemable(what, whom.account).await?;
        let conn = self.conn();
        check(conn, &coupon, code.as_ref(), whom).await
    }

    async fn find_redeemable(
        &self,
        what: &Redeem,
        account: &AccountId,
    ) -> Result<(Coupon, Option<PromotionCode>), RedeemError> {
        match what {
            Redeem::Coupon(id) => {
                let coupon = self
                    .coupon(account, id)
                    .await?
                    .ok_or_else(|| RedeemError::NoCoupon(id.clone()))?;
                Ok((coupon, None))
            }
            Redeem::Code(typed) => {
                let code = self
                    .promotion_code_by_code(account, typed)
                    .await?
                    .ok_or_else(|| RedeemError::NoCode(typed.clone()))?;
                let coupon = self
                    .coupon(account, &code.coupon_id)
                    .await?
                    .ok_or_else(|| RedeemError::NoCoupon(code.coupon_id.clone()))?;
                Ok((coupon, Some(code)))
            }
        }
    }
}

/// The checks of a redemption, read through `conn` (the redeeming transaction's or the pool).
async fn check<C: sea_orm::ConnectionTrait>(
    conn: &C,
    coupon: &Coupon,
    code: Option<&PromotionCode>,
    whom: &Redeeming<'_>,
) -> Result<Discount, RedeemError> {
    if let Some(code) = code {
        if !code.valid_at(whom.now) {
            return Err(RedeemError::Spent("promotion code"));
        }
        if code
            .customer_id
            .as_ref()
            .is_some_and(|only| Some(only) != whom.customer_id)
        {
            return Err(RedeemError::OtherCustomer);
        }
        if code.first_time_only {
            let buyer = whom.buyer();
            let key = super::first_purchases::key(conn, &buyer).await?;
            if super::first_purchases::bought_before(conn, &buyer, key.as_deref()).await? {
                return Err(RedeemError::NotFirstTime);
            }
        }
    }
    if !coupon.valid_at(whom.now) {
        return Err(RedeemError::Spent("coupon"));
    }
    let applies_to = coupon.applies_to();
    if let Some(to) = &applies_to
        && !to.covers(Some(whom.plan_id), None)
        && !whom.addon_ids.iter().any(|a| to.covers(None, Some(a)))
    {
        return Err(RedeemError::NotApplicable);
    }
    let off = coupon
        .off()
        .ok_or_else(|| StoreError::invariant(format!("coupon {} has no money terms", coupon.id)))?;
    Ok(Discount {
        coupon_id: coupon.id.clone(),
        promotion_code_id: code.map(|c| c.id.clone()),
        start: whom.now,
        periods_left: coupon.duration.periods(coupon.duration_in_periods),
        off,
        applies_to,
    })
}

/// `times_redeemed < max_redemptions` (or no maximum), as SQL.
fn redemption_left(times: Expr, max: Expr) -> Condition {
    Condition::any()
        .add(max.clone().is_null())
        .add(times.lt(max))
}

impl StoreTxn {
    /// Gives back the redemption `discount` counted (a checkout payment that was declined),
    /// in the transaction that releases it.
    pub async fn unredeem(&self, discount: &Discount) -> StoreResult<()> {
        coupon::Entity::update_many()
            .col_expr(
                coupon::Column::TimesRedeemed,
                Expr::col(coupon::Column::TimesRedeemed).sub(1),
            )
            .filter(coupon::Column::Id.eq(discount.coupon_id.as_str()))
            .filter(coupon::Column::TimesRedeemed.gt(0))
            .exec(self.conn())
            .await?;
        if let Some(code) = &discount.promotion_code_id {
            promotion_code::Entity::update_many()
                .col_expr(
                    promotion_code::Column::TimesRedeemed,
                    Expr::col(promotion_code::Column::TimesRedeemed).sub(1),
                )
                .filter(promotion_code::Column::Id.eq(code.as_str()))
                .filter(promotion_code::Column::TimesRedeemed.gt(0))
                .exec(self.conn())
                .await?;
        }
        Ok(())
    }

    /// Redeems `what` for `whom` inside this transaction: the checks, then one redemption
    /// counted on the coupon (and on the code) by a conditional `UPDATE`; the discount the
    /// subscription then carries. Refused (or rolled back), nothing is counted.
    pub async fn redeem(
        &self,
        store: &Store,
        what: &Redeem,
        whom: &Redeeming<'_>,
    ) -> Result<Discount, RedeemError> {
        let (coupon, code) = store.find_redeemable(what, whom.account).await?;
        let discount = check(self.conn(), &coupon, code.as_ref(), whom).await?;
        let counted = coupon::Entity::update_many()
            .col_expr(
                coupon::Column::TimesRedeemed,
                Expr::col(coupon::Column::TimesRedeemed).add(1),
            )
            .filter(coupon::Column::Id.eq(coupon.id.as_str()))
            .filter(coupon::Entity::of(whom.account))
            .filter(coupon::Column::Active.eq(true))
            .filter(redemption_left(
                Expr::col(coupon::Column::TimesRedeemed),
                Expr::col(coupon::Column::MaxRedemptions),
            ))
            .exec(self.conn())
            .await
            .map_err(StoreError::from)?;
        if counted.rows_affected != 1 {
            return Err(RedeemError::Spent("coupon"));
        }
        if let Some(code) = &code {
            let counted = promotion_code::Entity::update_many()
                .col_expr(
                    promotion_code::Column::TimesRedeemed,
                    Expr::col(promotion_code::Column::TimesRedeemed).add(1),
                )
                .filter(promotion_code::Column::Id.eq(code.id.as_str()))
                .filter(promotion_code::Column::Active.eq(true))
                .filter(redemption_left(
                    Expr::col(promotion_code::Column::TimesRedeemed),
                    Expr::col(promotion_code::Column::MaxRedemptions),
                ))
                .exec(self.conn())
                .await
                .map_err(StoreError::from)?;
            if counted.rows_affected != 1 {
                return Err(RedeemError::Spent("promotion code"));
            }
            if code.first_time_only && !self.claim_first_purchase(&whom.buyer()).await? {
                return Err(RedeemError::NotFirstTime);
            }
        }
        Ok(discount)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::discount::Off;
    use crate::domain::tax::TaxCode;
    use proptest::prelude::*;

    fn plan_a() -> PlanId {
        PlanId::parse("plan_a").expect("a plan's id")
    }

    fn line(amount: i64, plan: bool) -> DraftLine {
        DraftLine {
            description: "x".into(),
            quantity: 1,
            amount_cents: amount,
            discount_cents: 0,
            tax_code: TaxCode::Iva19,
            period_start: None,
            period_end: None,
            plan_id: plan.then(plan_a),
            addon_id: (!plan).then(|| AddonId::parse("addon_a").expect("an add-on's id")),
        }
    }

    fn discount(off: Off, plans_only: bool) -> Discount {
        Discount {
            coupon_id: CouponId::parse("co_1").expect("a coupon's id"),
            promotion_code_id: None,
            start: 0,
            periods_left: None,
            off,
            applies_to: plans_only.then(|| AppliesTo {
                plan_ids: vec![plan_a()],
                addon_ids: vec![],
            }),
        }
    }

    fn off() -> impl Strategy<Value = Off> {
        prop_oneof![
            (1i64..=10_000).prop_map(Off::Percent),
            (1i64..2_000_000_000).prop_map(Off::Amount),
        ]
    }

    proptest! {
        /// What a line loses is what its discount says, the rest is what is charged; nothing
        /// goes below zero, nothing is made or lost, and a line the coupon does not cover keeps
        /// its amount (CONTRACT §14).
        #[test]
        fn a_discount_moves_cents_from_amount_to_discount_and_never_below_zero(
            amounts in proptest::collection::vec((0i64..1_000_000_000, any::<bool>()), 1..6),
            off in off(),
            plans_only in any::<bool>(),
            proration in any::<bool>(),
        ) {
            let mut lines: Vec<DraftLine> =
                amounts.iter().map(|(a, plan)| line(*a, *plan)).collect();
            let before: Vec<i64> = lines.iter().map(|l| l.amount_cents).collect();
            discount_lines(&mut lines, &discount(off, plans_only), proration);
            for (l, b) in lines.iter().zip(&before) {
                prop_assert_eq!(l.amount_cents + l.discount_cents, *b);
                prop_assert!(l.amount_cents >= 0 && l.discount_cents >= 0);
                if plans_only && l.addon_id.is_some() {
                    prop_assert_eq!(l.discount_cents, 0);
                }
            }
            if proration && matches!(off, Off::Amount(_)) {
                prop_assert!(lines.iter().all(|l| l.discount_cents == 0));
            }
            if let (Off::Amount(cents), false) = (off, proration) {
                let covered: i64 = before.iter().zip(&amounts)
                    .filter(|(_, (_, plan))| !plans_only || *plan)
                    .map(|(b, _)| *b).sum();
                let taken: i64 = lines.iter().map(|l| l.discount_cents).sum();
                prop_assert_eq!(taken, Ord::min(cents, covered));
            }
        }
    }
}
