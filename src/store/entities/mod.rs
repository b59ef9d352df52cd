//! sea-orm entities, one per table. Instants are i64 milliseconds (see migration/).

pub mod account;
pub mod balance_transaction;
pub mod catalog_item;
pub mod charge_attempt;
pub mod charge_conflict;
pub mod charge_recheck;
pub mod checkout_session;
pub mod credit_note;
pub mod customer;
pub mod dashboard_session;
pub mod event;
pub mod idempotency_key;
mod ids;
pub mod invoice;
pub mod invoice_series;
pub mod payment_method;
pub mod portal_action;
pub mod portal_session;
pub mod processor_event;
pub mod refund;
pub mod setting;
pub mod subscription;
pub mod subscription_addon;
pub mod webhook_attempt;
pub mod webhook_delivery;
pub mod webhook_endpoint;
mod words;
