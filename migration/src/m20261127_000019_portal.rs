//! Why: customers fix their card, cancel, switch plan and download their invoices themselves
//! (CONTRACT §13, issue 35).
//!
//! - `portal_sessions`: a session an integrator opened for one customer; only the SHA-256 of
//!   its URL's token is stored (`token_hash` UNIQUE), so whoever reads the table cannot open a
//!   session; it expires an hour after it was made (`expires_at`, the account's clock).
//! - `portal_actions`: every action taken through the portal, with the session it came from
//!   (what, on which subscription, the customer's reason), written after the action took
//!   effect: where a change came from, for the merchant and for support.
//! - `accounts.portal`: what customers may do (JSON; NULL: the defaults).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for statement in [
            "ALTER TABLE accounts ADD COLUMN portal TEXT NULL",
            "CREATE TABLE portal_sessions (
                id TEXT NOT NULL PRIMARY KEY,
                account_id TEXT NOT NULL REFERENCES accounts (id),
                customer_id TEXT NOT NULL REFERENCES customers (id),
                token_hash TEXT NOT NULL UNIQUE,
                return_url TEXT NULL,
                locale TEXT NULL CHECK (locale IN ('es', 'en')),
                flow_type TEXT NULL
                    CHECK (flow_type IN ('payment_method_update', 'subscription_cancel')),
                flow_subscription_id TEXT NULL,
                expires_at BIGINT NOT NULL,
                created_at BIGINT NOT NULL,
                CHECK ((flow_type IS NULL) = (flow_subscription_id IS NULL)),
                CHECK (expires_at > created_at)
            )",
            "CREATE INDEX portal_sessions_account ON portal_sessions (account_id, id)",
            "CREATE TABLE portal_actions (
                id TEXT NOT NULL PRIMARY KEY,
                account_id TEXT NOT NULL REFERENCES accounts (id),
                session_id TEXT NOT NULL REFERENCES portal_sessions (id),
                customer_id TEXT NOT NULL,
                subscription_id TEXT NULL,
                action TEXT NOT NULL CHECK (action IN
                    ('payment_method_update', 'subscription_cancel', 'plan_switch',
                     'customer_update')),
                detail TEXT NULL,
                created_at BIGINT NOT NULL
            )",
            "CREATE INDEX portal_actions_session ON portal_actions (session_id)",
            "CREATE INDEX portal_actions_subscription ON portal_actions (subscription_id)",
        ] {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        for statement in [
            "DROP TABLE portal_actions",
            "DROP TABLE portal_sessions",
            "ALTER TABLE accounts DROP COLUMN portal",
        ] {
            db.execute_unprepared(statement).await?;
        }
        Ok(())
    }
}
