//! Each account's numbering series (`invoice_series`): the sales invoices' (`FV-`), the credit
//! notes' (`NC-`) and DIAN's credit notes' (`NC`), each taken by `UPDATE … RETURNING` in the
//! transaction that writes the document, so a rollback gives the numbers back and a series has
//! no gap.

use super::entities::invoice_series;
use super::{Scoped, StoreError, StoreResult};
use crate::ids::AccountId;
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter};

/// Takes `count` consecutive numbers of `account`'s series: the first of them. In the caller's
/// transaction, so its rollback gives them back.
pub(super) async fn take_numbers<C: ConnectionTrait>(
    conn: &C,
    account: &AccountId,
    series: &str,
    prefix: &str,
    count: i64,
) -> StoreResult<i64> {
    for _ in 0..2 {
        let moved = invoice_series::Entity::update_many()
            .col_expr(
                invoice_series::Column::NextNumber,
                Expr::col(invoice_series::Column::NextNumber).add(count),
            )
            .filter(invoice_series::Entity::of(account))
            .filter(invoice_series::Column::Series.eq(series))
            .exec_with_returning(conn)
            .await?;
        if let Some(row) = moved.into_iter().next() {
            return Ok(row.next_number - count);
        }
        // The account's first document of the series: its counter starts at 1.
        invoice_series::Entity::insert(
            invoice_series::Model {
                account_id: account.clone(),
                series: series.to_owned(),
                prefix: prefix.to_owned(),
                next_number: 1,
            }
            .into_active_model(),
        )
        .on_conflict(
            OnConflict::columns([
                invoice_series::Column::AccountId,
                invoice_series::Column::Series,
            ])
            .do_nothing()
            .to_owned(),
        )
        .exec_without_returning(conn)
        .await?;
    }
    Err(StoreError::invariant(format!(
        "the {series} series of {account} could not be created"
    )))
}
