//! Integration tests: the real service over real HTTP, on SQLite and on PostgreSQL.

mod common;

mod actions;
mod admin;
mod auth;
mod auth_limits;
mod balance;
mod bench;
mod catalog;
mod chaos;
mod checkout;
mod checkout_browser;
mod checkout_payment;
mod cluster;
mod cluster_handover;
mod cluster_nodes;
mod conventions;
mod crash;
mod generated_client;

mod idempotency;
mod isolation;
mod logs;
mod model;
mod multi_node;
mod nequi;
mod openapi;
mod posting_races;
mod processor;
mod processor_conflicts;
mod processor_faults;
mod protocol;
mod query_plans;
mod rate_windows;
mod readme;
mod refund_faults;
mod refunds;
mod resumptions;
mod sandbox_admin;
mod secrets_in_logs;
mod store_contention;
mod subscriptions;
mod webhook_limit;
mod webhook_targets;
mod webhooks;
mod webhooks_restart;
