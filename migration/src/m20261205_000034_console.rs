//! Why: the merchant's console (CONTRACT §17; issue 49). The people of an account who sign in
//! to `/console`: each a `console_users` row with a role and, once they accepted their
//! invitation, an argon2id hash (PHC string) of their password. An e-mail address names one
//! person of one deployment while they are not removed (`console_users_email`, partial): the
//! login form asks for no account, and a removed person may be invited again. An
//! invitation is a link whose token only its SHA-256 is kept of, used once
//! (`used_at`, set by a conditional update). A session is a row the cookie's token hashes to,
//! with the CSRF token its forms carry. Every action a person takes through the console is a
//! `console_actions` row: who, what, on which object, with which Idempotency-Key, and the
//! API's answer.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 8] = [
    "CREATE TABLE console_users (
        id TEXT NOT NULL PRIMARY KEY,
        account_id TEXT NOT NULL,
        email TEXT NOT NULL,
        role TEXT NOT NULL,
        password_hash TEXT NULL,
        locale TEXT NOT NULL DEFAULT 'es',
        created_at BIGINT NOT NULL,
        activated_at BIGINT NULL,
        removed_at BIGINT NULL,
        CONSTRAINT console_users_role CHECK (role IN ('admin', 'support', 'accountant'))
    )",
    "CREATE UNIQUE INDEX console_users_email ON console_users (email) WHERE removed_at IS NULL",
    "CREATE TABLE console_invitations (
        token_hash TEXT NOT NULL PRIMARY KEY,
        account_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        expires_at BIGINT NOT NULL,
        used_at BIGINT NULL,
        created_at BIGINT NOT NULL
    )",
    "CREATE INDEX console_invitations_user ON console_invitations (user_id)",
    "CREATE TABLE console_sessions (
        token_hash TEXT NOT NULL PRIMARY KEY,
        account_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        csrf TEXT NOT NULL,
        expires_at BIGINT NOT NULL,
        created_at BIGINT NOT NULL
    )",
    "CREATE INDEX console_sessions_user ON console_sessions (user_id)",
    "CREATE TABLE console_actions (
        id TEXT NOT NULL PRIMARY KEY,
        account_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        action TEXT NOT NULL,
        object_id TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        status INTEGER NULL,
        created_at BIGINT NOT NULL
    )",
    "CREATE INDEX console_actions_object ON console_actions (account_id, object_id, created_at)",
];

const DOWN: [&str; 4] = [
    "DROP TABLE console_actions",
    "DROP TABLE console_sessions",
    "DROP TABLE console_invitations",
    "DROP TABLE console_users",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(manager, &UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::run_all(manager, &DOWN).await
    }
}
