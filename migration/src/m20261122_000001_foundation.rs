//! Accounts, catalog, balance ledger and idempotency records: what the foundation needs.
//!
//! Why the balance lives on the account row: a reservation is one conditional UPDATE
//! (`available >= fee`), atomic on both databases, so concurrent charges can never overdraw it;
//! `balance_transactions` is the ledger that explains every movement.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden, Clone, Copy)]
enum Settings {
    Table,
    Key,
    Value,
}

#[derive(DeriveIden, Clone, Copy)]
pub enum Accounts {
    Table,
    Id,
    Name,
    Sandbox,
    ApiKeyHash,
    ProcessorBaseUrl,
    ProcessorPublicKey,
    ProcessorPrivateKey,
    ProcessorEventsSecret,
    ProcessorIntegritySecret,
    FeePercentBps,
    FeeFixedCents,
    RateLimitPerMinute,
    StatusRateLimitPerMinute,
    ClockOffsetMs,
    DunningRetryDays,
    AvailableCents,
    ReservedCents,
    CreatedAt,
}

/// Plans and add-ons: one priced catalog item shape, told apart by `kind`.
#[derive(DeriveIden, Clone, Copy)]
enum CatalogItems {
    Table,
    Id,
    AccountId,
    Kind,
    Name,
    MonthlyAmountCents,
    AnnualAmountCents,
    Active,
    Metadata,
    CreatedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum Customers {
    Table,
    Id,
    AccountId,
    Email,
    Name,
    Metadata,
    CreatedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum BalanceTransactions {
    Table,
    Id,
    AccountId,
    Kind,
    AmountCents,
    ChargeAttemptId,
    Description,
    CreatedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum IdempotencyKeys {
    Table,
    AccountId,
    Key,
    RequestHash,
    State,
    ResponseStatus,
    ResponseBody,
    CreatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Settings::Table)
                    .col(string(Settings::Key).primary_key())
                    .col(text(Settings::Value))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Accounts::Table)
                    .col(string(Accounts::Id).primary_key())
                    .col(string(Accounts::Name))
                    .col(boolean(Accounts::Sandbox))
                    .col(string_uniq(Accounts::ApiKeyHash))
                    .col(string_null(Accounts::ProcessorBaseUrl))
                    .col(string(Accounts::ProcessorPublicKey))
                    .col(string(Accounts::ProcessorPrivateKey))
                    .col(string(Accounts::ProcessorEventsSecret))
                    .col(string(Accounts::ProcessorIntegritySecret))
                    .col(big_integer(Accounts::FeePercentBps))
                    .col(big_integer(Accounts::FeeFixedCents))
                    .col(big_integer(Accounts::RateLimitPerMinute))
                    .col(big_integer(Accounts::StatusRateLimitPerMinute))
                    .col(big_integer(Accounts::ClockOffsetMs))
                    .col(string(Accounts::DunningRetryDays))
                    .col(
                        big_integer(Accounts::AvailableCents)
                            .check(Expr::col(Accounts::AvailableCents).gte(0)),
                    )
                    .col(
                        big_integer(Accounts::ReservedCents)
                            .check(Expr::col(Accounts::ReservedCents).gte(0)),
                    )
                    .col(big_integer(Accounts::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(CatalogItems::Table)
                    .col(string(CatalogItems::Id).primary_key())
                    .col(string(CatalogItems::AccountId))
                    .col(string(CatalogItems::Kind))
                    .col(string(CatalogItems::Name))
                    .col(big_integer(CatalogItems::MonthlyAmountCents))
                    .col(big_integer(CatalogItems::AnnualAmountCents))
                    .col(boolean(CatalogItems::Active))
                    .col(text_null(CatalogItems::Metadata))
                    .col(big_integer(CatalogItems::CreatedAt))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_catalog_items_account_kind",
            CatalogItems::Table,
            [
                CatalogItems::AccountId,
                CatalogItems::Kind,
                CatalogItems::Id,
            ],
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(Customers::Table)
                    .col(string(Customers::Id).primary_key())
                    .col(string(Customers::AccountId))
                    .col(string(Customers::Email))
                    .col(string(Customers::Name))
                    .col(text_null(Customers::Metadata))
                    .col(big_integer(Customers::CreatedAt))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_customers_account",
            Customers::Table,
            [Customers::AccountId, Customers::Id],
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(BalanceTransactions::Table)
                    .col(string(BalanceTransactions::Id).primary_key())
                    .col(string(BalanceTransactions::AccountId))
                    .col(string(BalanceTransactions::Kind))
                    .col(big_integer(BalanceTransactions::AmountCents))
                    .col(string_null(BalanceTransactions::ChargeAttemptId))
                    .col(string(BalanceTransactions::Description))
                    .col(big_integer(BalanceTransactions::CreatedAt))
                    .to_owned(),
            )
            .await?;
        index(
            manager,
            "idx_balance_transactions_account",
            BalanceTransactions::Table,
            [BalanceTransactions::AccountId, BalanceTransactions::Id],
        )
        .await?;
        // One fee movement of each kind per charge attempt: the database itself refuses a
        // second deduction when an outcome arrives twice.
        manager
            .create_index(
                Index::create()
                    .name("uq_balance_transactions_charge_kind")
                    .table(BalanceTransactions::Table)
                    .col(BalanceTransactions::ChargeAttemptId)
                    .col(BalanceTransactions::Kind)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(IdempotencyKeys::Table)
                    .col(string(IdempotencyKeys::AccountId))
                    .col(string(IdempotencyKeys::Key))
                    .col(string(IdempotencyKeys::RequestHash))
                    .col(string(IdempotencyKeys::State))
                    .col(integer_null(IdempotencyKeys::ResponseStatus))
                    .col(text_null(IdempotencyKeys::ResponseBody))
                    .col(big_integer(IdempotencyKeys::CreatedAt))
                    .primary_key(
                        Index::create()
                            .col(IdempotencyKeys::AccountId)
                            .col(IdempotencyKeys::Key),
                    )
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            IdempotencyKeys::Table.into_iden(),
            BalanceTransactions::Table.into_iden(),
            Customers::Table.into_iden(),
            CatalogItems::Table.into_iden(),
            Accounts::Table.into_iden(),
            Settings::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}

/// Creates a named, non-unique index over `cols` of `table`.
pub(crate) async fn index<T: Iden + Copy + 'static, const N: usize>(
    manager: &SchemaManager<'_>,
    name: &str,
    table: T,
    cols: [T; N],
) -> Result<(), DbErr> {
    let mut statement = Index::create();
    statement.name(name).table(table);
    for col in cols {
        statement.col(col);
    }
    manager.create_index(statement.to_owned()).await
}
