//! The cluster's tables (PostgreSQL): live nodes, shard leases, and the fence every write of a
//! subscription or a delivery passes.
//!
//! Every instant here is the database's clock (`clock_timestamp()`), never a node's: nodes may
//! disagree about the time, the database is one. A node trusts a lease only until its own
//! deadline, counted on its monotonic clock from before it asked (`cluster::lease`), which ends
//! before the database's expiry.
//!
//! **The fence.** A write that changes a subscription (or a delivery) first takes the shard's
//! advisory lock in shared mode for the rest of its transaction, then writes only if the
//! shard's lease still carries the epoch this node was granted (`EXISTS` in the `UPDATE`
//! itself). A takeover takes the same lock exclusively before it moves the epoch, so it waits
//! for the old owner's writes in flight, and every later write of the old owner finds the new
//! epoch and changes nothing (`StoreError::Fenced`). Advisory locks live in the lock manager:
//! no row is locked, so many writers of one shard share the lock without the row locks'
//! multixacts and WAL records. A paused node's open transaction keeps its shared lock until
//! `idle_in_transaction_session_timeout` (set on every connection) ends it.

use super::{Store, StoreError, StoreResult};
use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait, Value};

/// The first key of a shard's advisory lock (`pg_advisory_xact_lock(int4, int4)`; the second
/// key is the shard): a hash of the schema, since advisory locks belong to the whole database
/// and two deployments in two schemas of one database (every PostgreSQL test does this) must
/// not take each other's fences. "bill" keeps it apart from the migrations' lock
/// (`store::MIGRATION_LOCK`), which hashes the bare schema name under another first key.
macro_rules! lock_class {
    () => {
        "hashtext('bill:' || current_schema())"
    };
}
const LOCK_CLASS: &str = lock_class!();
/// What every fenced write runs first (a constant: it is on the renewal path).
const LOCK_SHARED: &str = concat!(
    "SELECT pg_advisory_xact_lock_shared(",
    lock_class!(),
    ", $1)"
);

use super::DB_NOW_MS as DB_NOW;

/// The lease condition "node `$1` at URL `$2` may take this shard".
const FREE: &str = concat!(
    "owner IS NULL OR expires_at < ",
    super::db_now_ms!(),
    " OR owner IN (SELECT id FROM cluster_nodes WHERE url = $2 AND id <> $1)"
);

/// A node as the cluster sees it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct NodeRow {
    pub id: String,
    pub url: String,
    pub started_at: i64,
    pub expires_at: i64,
    pub leaving: bool,
}

/// A shard's lease as stored.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LeaseRow {
    pub shard: u16,
    pub owner: Option<String>,
    pub epoch: i64,
    pub expires_at: i64,
}

/// Who holds a shard now, and where to reach it.
#[derive(Clone, Debug)]
pub struct ShardOwner {
    pub node: String,
    pub url: String,
    pub epoch: i64,
}

fn stmt(sql: &str, values: Vec<Value>) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, values)
}

/// The `WHERE` condition that lets a write through only while `shard`'s lease carries `epoch`.
pub(crate) fn lease_is(shard: u16, epoch: i64) -> sea_orm::sea_query::SimpleExpr {
    sea_orm::sea_query::Expr::cust_with_values(
        "EXISTS (SELECT 1 FROM shard_leases WHERE shard = $1 AND epoch = $2)",
        [Value::from(shard as i16), Value::from(epoch)],
    )
}

/// Takes `shard`'s advisory lock in shared mode until the end of the transaction `conn`, as
/// every fenced write does.
pub async fn lock_shared<C: ConnectionTrait>(conn: &C, shard: u16) -> StoreResult<()> {
    conn.execute_raw(stmt(LOCK_SHARED, vec![i32::from(shard).into()]))
        .await?;
    Ok(())
}

/// Fences every `(shard, epoch)` of `held` for the rest of the transaction `conn` at once (a
/// batch's writes, `store::batch`): takes each shard's lock in shared mode, then checks that
/// each lease still carries its epoch. Under the locks no takeover moves an epoch before the
/// transaction ends, so the check stands for every write that follows, as `lease_is` does
/// for one. False when any lease moved on.
pub(crate) async fn leases_hold<C: ConnectionTrait>(
    conn: &C,
    held: &[(u16, i64)],
) -> StoreResult<bool> {
    if held.is_empty() {
        return Ok(true);
    }
    let shards: Vec<String> = (1..=held.len()).map(|i| format!("(${i}::int4)")).collect();
    let lock = format!(
        "SELECT pg_advisory_xact_lock_shared({LOCK_CLASS}, s.column1) FROM (VALUES {}) AS s",
        shards.join(", ")
    );
    let values = held
        .iter()
        .map(|(shard, _)| i32::from(*shard).into())
        .collect();
    conn.execute_raw(stmt(&lock, values)).await?;
    let pairs: Vec<String> = (0..held.len())
        .map(|i| format!("(${}::int2, ${}::int8)", 2 * i + 1, 2 * i + 2))
        .collect();
    let check = format!(
        "SELECT COUNT(*) AS held FROM shard_leases WHERE (shard, epoch) IN ({})",
        pairs.join(", ")
    );
    let values = held
        .iter()
        .flat_map(|(shard, epoch)| [Value::from(*shard as i16), Value::from(*epoch)])
        .collect();
    let row = conn.query_one_raw(stmt(&check, values)).await?;
    let count: i64 = match row {
        Some(row) => row.try_get("", "held")?,
        None => 0,
    };
    Ok(count == held.len() as i64)
}

/// Whether `shard`'s lease still carries `epoch` (after a write that changed nothing: a lost
/// lease is `Fenced`, otherwise the row itself had moved).
pub(crate) async fn lease_holds<C: ConnectionTrait>(
    conn: &C,
    shard: u16,
    epoch: i64,
) -> StoreResult<bool> {
    Ok(conn
        .query_one_raw(stmt(
            "SELECT 1 AS held FROM shard_leases WHERE shard = $1 AND epoch = $2",
            vec![(shard as i16).into(), epoch.into()],
        ))
        .await?
        .is_some())
}

impl Store {
    /// The connection of the lease loop: a pool of its own, so a burst that holds every
    /// connection of the main pool cannot delay a renewal past its lease.
    fn coordination(&self) -> &sea_orm::DatabaseConnection {
        self.coordination.as_ref().unwrap_or(self.writer())
    }

    /// Announces this node (or renews its heartbeat) until `ttl_ms` from the database's now.
    pub async fn node_heartbeat(&self, id: &str, url: &str, ttl_ms: i64) -> StoreResult<()> {
        self.coordination()
            .execute_raw(stmt(
                &format!(
                    "INSERT INTO cluster_nodes (id, url, started_at, expires_at, leaving)
                     VALUES ($1, $2, {DB_NOW}, {DB_NOW} + $3, FALSE)
                     ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at, url = EXCLUDED.url"
                ),
                vec![id.into(), url.into(), ttl_ms.into()],
            ))
            .await?;
        Ok(())
    }

    /// The nodes whose heartbeat has not expired and that are not leaving, by id. Rows of nodes
    /// gone for an hour are removed on the way.
    pub async fn live_nodes(&self) -> StoreResult<Vec<NodeRow>> {
        let conn = self.coordination();
        conn.execute_raw(stmt(
            &format!("DELETE FROM cluster_nodes WHERE expires_at < {DB_NOW} - 3600000"),
            vec![],
        ))
        .await?;
        self.nodes(true).await
    }

    /// Every node row (live or not when `live_only` is false), by id.
    pub async fn nodes(&self, live_only: bool) -> StoreResult<Vec<NodeRow>> {
        let filter = if live_only {
            format!("WHERE expires_at > {DB_NOW} AND NOT leaving")
        } else {
            String::new()
        };
        let rows = self
            .coordination()
            .query_all_raw(stmt(
                &format!(
                    "SELECT id, url, started_at, expires_at, leaving FROM cluster_nodes {filter} ORDER BY id"
                ),
                vec![],
            ))
            .await?;
        rows.iter()
            .map(|row| {
                Ok(NodeRow {
                    id: row.try_get("", "id")?,
                    url: row.try_get("", "url")?,
                    started_at: row.try_get("", "started_at")?,
                    expires_at: row.try_get("", "expires_at")?,
                    leaving: row.try_get("", "leaving")?,
                })
            })
            .collect()
    }

    /// Marks this node as leaving (it takes no more shards; others stop counting it) .
    pub async fn node_leaving(&self, id: &str) -> StoreResult<()> {
        self.coordination()
            .execute_raw(stmt(
                "UPDATE cluster_nodes SET leaving = TRUE WHERE id = $1",
                vec![id.into()],
            ))
            .await?;
        Ok(())
    }

    /// Removes this node's row (it stopped).
    pub async fn node_gone(&self, id: &str) -> StoreResult<()> {
        self.coordination()
            .execute_raw(stmt(
                "DELETE FROM cluster_nodes WHERE id = $1",
                vec![id.into()],
            ))
            .await?;
        Ok(())
    }

    /// Extends every lease `node` holds to `ttl_ms` from the database's now; returns the shards
    /// and epochs renewed. A shard this node believes it holds and that is not returned was
    /// taken over.
    pub async fn renew_leases(&self, node: &str, ttl_ms: i64) -> StoreResult<Vec<(u16, i64)>> {
        let rows = self
            .coordination()
            .query_all_raw(stmt(
                &format!(
                    "UPDATE shard_leases SET expires_at = {DB_NOW} + $2
                     WHERE owner = $1 RETURNING shard, epoch"
                ),
                vec![node.into(), ttl_ms.into()],
            ))
            .await?;
        rows.iter()
            .map(|row| {
                let shard: i16 = row.try_get("", "shard")?;
                Ok((shard as u16, row.try_get("", "epoch")?))
            })
            .collect()
    }

    /// Up to `limit` shards `node` (at `url`) may take: nobody holds them (never held,
    /// released, or expired), or a node that had `url` before holds them (it died, and this
    /// node now answers at its address). In random order, so that nodes starting together do
    /// not all queue for the same ones.
    pub async fn free_shards(&self, node: &str, url: &str, limit: u64) -> StoreResult<Vec<u16>> {
        let rows = self
            .coordination()
            .query_all_raw(stmt(
                &format!("SELECT shard FROM shard_leases WHERE {FREE} ORDER BY random() LIMIT $3"),
                vec![node.into(), url.into(), (limit as i64).into()],
            ))
            .await?;
        rows.iter()
            .map(|row| Ok(row.try_get::<i16>("", "shard")? as u16))
            .collect()
    }

    /// Takes `shard` for `node` if it is free and its fence lock is free now; its new epoch.
    pub async fn acquire_shard(
        &self,
        node: &str,
        url: &str,
        shard: u16,
        ttl_ms: i64,
    ) -> StoreResult<Option<i64>> {
        Ok(self
            .acquire_shards(node, url, &[shard], ttl_ms)
            .await?
            .into_iter()
            .find(|(s, _)| *s == shard)
            .map(|(_, epoch)| epoch))
    }

    /// Takes those of `shards` that nobody holds for `node` (at `url`), each under a new epoch,
    /// in one transaction; returns the shards taken and their epochs. A shard is taken only if
    /// its fence lock can be had exclusively at once (`pg_try_advisory_xact_lock`): a write of
    /// its previous owner still in flight holds it shared, and the takeover of that shard waits
    /// for the next pass rather than for the write (a paused node's open transaction holds it
    /// until `idle_in_transaction_session_timeout`).
    pub async fn acquire_shards(
        &self,
        node: &str,
        url: &str,
        shards: &[u16],
        ttl_ms: i64,
    ) -> StoreResult<Vec<(u16, i64)>> {
        if shards.is_empty() {
            return Ok(Vec::new());
        }
        // Shard numbers (u16) are written into the statement: no text of anyone's.
        let list = shards
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let txn = self.coordination().begin().await?;
        let rows = txn
            .query_all_raw(stmt(
                &format!(
                    "UPDATE shard_leases
                     SET owner = $1, epoch = nextval('shard_epochs'), expires_at = {DB_NOW} + $3
                     WHERE shard IN (
                         SELECT s FROM unnest(ARRAY[{list}]::int[]) AS s
                         WHERE pg_try_advisory_xact_lock({LOCK_CLASS}, s)
                     ) AND ({FREE})
                     RETURNING shard, epoch"
                ),
                vec![node.into(), url.into(), ttl_ms.into()],
            ))
            .await?;
        txn.commit().await?;
        rows.iter()
            .map(|row| {
                let shard: i16 = row.try_get("", "shard")?;
                Ok((shard as u16, row.try_get("", "epoch")?))
            })
            .collect()
    }

    /// Gives `shard` back (this node stopped its work on it first), if still held under `epoch`.
    pub async fn release_shard(&self, node: &str, shard: u16, epoch: i64) -> StoreResult<()> {
        self.coordination()
            .execute_raw(stmt(
                "UPDATE shard_leases SET owner = NULL, expires_at = 0
                 WHERE shard = $1 AND owner = $2 AND epoch = $3",
                vec![(shard as i16).into(), node.into(), epoch.into()],
            ))
            .await?;
        Ok(())
    }

    /// The node holding `shard` now (lease not expired by the database's clock) and its URL.
    pub async fn shard_owner(&self, shard: u16) -> StoreResult<Option<ShardOwner>> {
        let row = self
            .conn()
            .query_one_raw(stmt(
                &format!(
                    "SELECT l.owner, l.epoch, n.url FROM shard_leases l
                     JOIN cluster_nodes n ON n.id = l.owner
                     WHERE l.shard = $1 AND l.expires_at > {DB_NOW}"
                ),
                vec![(shard as i16).into()],
            ))
            .await?;
        row.map(|row| {
            Ok(ShardOwner {
                node: row.try_get("", "owner")?,
                url: row.try_get("", "url")?,
                epoch: row.try_get("", "epoch")?,
            })
        })
        .transpose()
    }

    /// The database's clock, in milliseconds.
    pub async fn database_now_ms(&self) -> StoreResult<i64> {
        let row = self
            .coordination()
            .query_one_raw(stmt(&format!("SELECT {DB_NOW} AS now"), vec![]))
            .await?
            .ok_or_else(|| StoreError::invariant("no clock".into()))?;
        Ok(row.try_get("", "now")?)
    }

    /// Every shard's lease, by shard.
    pub async fn leases(&self) -> StoreResult<Vec<LeaseRow>> {
        let rows = self
            .coordination()
            .query_all_raw(stmt(
                "SELECT shard, owner, epoch, expires_at FROM shard_leases ORDER BY shard",
                vec![],
            ))
            .await?;
        rows.iter()
            .map(|row| {
                Ok(LeaseRow {
                    shard: row.try_get::<i16>("", "shard")? as u16,
                    owner: row.try_get("", "owner")?,
                    epoch: row.try_get("", "epoch")?,
                    expires_at: row.try_get("", "expires_at")?,
                })
            })
            .collect()
    }
}

/// The SQL condition "the id in `column` belongs to one of `shards`" (its last two hex digits,
/// as `cluster::shard_of`), for queries that load only a node's shards.
pub(crate) fn in_shards(column: &str, shards: &[u16]) -> sea_orm::sea_query::SimpleExpr {
    use sea_orm::sea_query::{Expr, ExprTrait};
    let suffixes: Vec<String> = shards.iter().map(|s| format!("{s:02x}")).collect();
    Expr::cust(format!("substr({column}, length({column}) - 1)")).is_in(suffixes)
}
