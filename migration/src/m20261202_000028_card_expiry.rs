//! Why: a card that expires before a subscription's next charge is worth a word to its
//! customer beforehand (CONTRACT §15, `card_expiring`), and only the processor's answer when
//! the card was attached says when it expires. `expires_at` is the first instant (Colombian
//! time) after the card's expiry month; NULL for Nequi accounts and for cards attached before. A checkout keeps it on its
//! attempt (`attempt_expires_at`) until the payment method is written at settlement.
//! The reminder's link (`pay_links.payment_method_id`) lets the customer replace that card
//! for as long as it is still the subscription's.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(
            manager,
            &[
                "ALTER TABLE payment_methods ADD COLUMN expires_at BIGINT NULL",
                "ALTER TABLE checkout_sessions ADD COLUMN attempt_expires_at BIGINT NULL",
                "ALTER TABLE pay_links ADD COLUMN payment_method_id TEXT NULL",
            ],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(
            manager,
            &[
                "ALTER TABLE payment_methods DROP COLUMN expires_at",
                "ALTER TABLE checkout_sessions DROP COLUMN attempt_expires_at",
                "ALTER TABLE pay_links DROP COLUMN payment_method_id",
            ],
        )
        .await
    }
}
