//! Several nodes on one PostgreSQL database: the lease loop (`lease`) acquires, renews and
//! hands over the shards this node holds through the `shard_leases` table, with an epoch that
//! every takeover moves forward, and reports each change to the runtime. What a node holds is
//! the store's `Ownership` (`store::ownership`), which fences every write; a message for
//! another node's shard is forwarded by the actors' runtime (`actors::forward`).
//!
//! SQLite is one process's file: its `Ownership` is `single_node`, every shard held forever,
//! with no lease, no fence and no forwarding.

pub mod lease;
