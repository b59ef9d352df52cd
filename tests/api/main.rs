//! Integration tests: the real service over real HTTP, on SQLite and on PostgreSQL.

mod common;

mod auth;
mod balance;
mod catalog;
mod conventions;
mod crash;
mod openapi;
mod processor;
mod protocol;
mod subscriptions;
