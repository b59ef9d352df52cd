//! Sliding windows of requests (API rate limits, checkout attempts, failed authentications),
//! shared by every node on PostgreSQL. SQLite has one node, which keeps its windows in memory
//! (`api::rate_limit`); nothing here runs there.
//!
//! One row per key holds the instants of the requests the window accepted and that are still
//! in it: `ats` ascending, `counts[i]` requests at `ats[i]`. A request is taken by one
//! statement, an upsert whose `ON CONFLICT DO UPDATE` holds the key's row locked and reads its
//! latest committed version, so that concurrent takes on any number of nodes are serialized by
//! the row lock and none can see a stale window; the lock is held only for that statement (the
//! table is UNLOGGED: its commit waits for no WAL flush). Instants come from the database's
//! clock, the one clock all nodes share.
//!
//! Exactness and cost. A limit of at most [`EXACT_UP_TO`] keeps every instant at millisecond
//! resolution: the window is exact (a request is accepted iff fewer than `limit` were accepted
//! in the `length_ms` before it). A larger limit (an operator's 1,000,000 a minute for a
//! benchmark) keeps instants at `length_ms / EXACT_UP_TO` resolution: requests in one such
//! slice share one entry, stamped with the latest of them, so an entry leaves the window when
//! its latest request does. The window then never holds more than `limit` (no window of
//! `length_ms` ever sees more), and a slot frees at most one slice (300 ms for a minute) later
//! than exactly. Either way a row has at most about `EXACT_UP_TO` entries, so every take costs
//! the same bounded work whatever the limit.

use super::{Store, StoreResult};
use sea_orm::{ConnectionTrait, DbBackend, QueryResult, Statement, Value};

/// Limits up to this many requests per window are counted exactly; larger ones at a
/// resolution of `length_ms / EXACT_UP_TO` (see the module's doc).
pub const EXACT_UP_TO: u64 = 200;

use super::DB_NOW_MS;

/// Which window, and the instant to count at: `at_ms` `None` means the database's clock now
/// (tests pass explicit instants to see a window pass).
#[derive(Clone, Copy, Debug)]
pub struct Window<'a> {
    pub key: &'a str,
    pub limit: u64,
    pub length_ms: i64,
    pub at_ms: Option<i64>,
}

impl Window<'_> {
    fn limit(&self) -> i64 {
        i64::try_from(self.limit).unwrap_or(i64::MAX)
    }

    /// Milliseconds per entry of the row (1: exact).
    fn resolution_ms(&self) -> i64 {
        if self.limit <= EXACT_UP_TO {
            1
        } else {
            (self.length_ms / EXACT_UP_TO as i64).max(1)
        }
    }
}

/// The answer to a take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// Counted, at this instant.
    Taken { at_ms: i64 },
    /// The window is full; a slot frees in this many milliseconds (at least 1).
    Refused { wait_ms: i64 },
}

/// Accepts one request if the window has room, in one statement (see the module's doc). The
/// row is written either way (a refusal stores the pruned window); `refused_for_ms` carries
/// the verdict back through `RETURNING`. `t.now` never goes below the row's last instant, so
/// `ats` stays ascending even if the database's clock steps back.
const TAKE: &str = "INSERT INTO rate_windows AS w (key, ats, counts, refused_for_ms, last_at) \
SELECT $1, ARRAY[n.ms], ARRAY[1::bigint], 0, n.ms FROM (SELECT coalesce($4, {NOW}) AS ms) n \
ON CONFLICT (key) DO UPDATE SET (ats, counts, refused_for_ms, last_at) = ( \
  SELECT \
    CASE WHEN k.total >= $2 THEN k.ats \
         WHEN k.joins THEN k.ats[1:k.n - 1] || t.now \
         ELSE k.ats || t.now END, \
    CASE WHEN k.total >= $2 THEN k.counts \
         WHEN k.joins THEN k.counts[1:k.n - 1] || (k.counts[k.n] + 1) \
         ELSE k.counts || 1::bigint END, \
    CASE WHEN k.total >= $2 THEN greatest(k.free_at + $5 - t.now, 1) ELSE 0 END, \
    CASE WHEN k.total >= $2 THEN w.last_at ELSE t.now END \
  FROM (SELECT greatest(excluded.last_at, w.last_at) AS now) t \
  CROSS JOIN LATERAL ( \
    SELECT coalesce(array_agg(e.at ORDER BY e.i), '{}') AS ats, \
           coalesce(array_agg(e.c ORDER BY e.i), '{}') AS counts, \
           coalesce(sum(e.c), 0) AS total, \
           count(*) AS n, \
           coalesce(bool_or(e.i = e.newest AND e.at / $3 = t.now / $3), false) AS joins, \
           min(e.at) FILTER (WHERE e.newer < $2) AS free_at \
    FROM ( \
      SELECT u.at, u.c, u.i, max(u.i) OVER () AS newest, \
             coalesce(sum(u.c) OVER (ORDER BY u.i DESC \
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS newer \
      FROM unnest(w.ats, w.counts) WITH ORDINALITY AS u(at, c, i) \
      WHERE u.at > t.now - $5 \
    ) e \
  ) k \
) \
RETURNING refused_for_ms, last_at";

/// Rows whose every request has left the window, a batch at a time.
const PURGE: &str = "DELETE FROM rate_windows WHERE key IN ( \
  SELECT key FROM rate_windows WHERE last_at <= coalesce($1, {NOW}) - $2 LIMIT $3)";

fn sql(template: &str) -> String {
    template.replace("{NOW}", DB_NOW_MS)
}

fn get(row: &QueryResult, column: &str) -> StoreResult<i64> {
    Ok(row.try_get::<i64>("", column)?)
}

impl Store {
    /// Whether several nodes may share this database (PostgreSQL), so that state every node
    /// must agree on (rate windows) lives in it rather than in a process.
    pub fn shares_state(&self) -> bool {
        self.writer().get_database_backend() == DbBackend::Postgres
    }

    fn postgres(&self, template: &str, values: Vec<Value>) -> Statement {
        Statement::from_sql_and_values(DbBackend::Postgres, sql(template), values)
    }

    /// Counts one request in `window` if it has room (PostgreSQL only).
    pub async fn take_rate_slot(&self, window: Window<'_>) -> StoreResult<Take> {
        let statement = self.postgres(
            TAKE,
            vec![
                window.key.into(),
                window.limit().into(),
                window.resolution_ms().into(),
                window.at_ms.into(),
                window.length_ms.into(),
            ],
        );
        let row = self
            .writer()
            .query_one_raw(statement)
            .await?
            .ok_or_else(|| super::StoreError::invariant("the take returned no row".into()))?;
        Ok(match get(&row, "refused_for_ms")? {
            0 => Take::Taken {
                at_ms: get(&row, "last_at")?,
            },
            wait_ms => Take::Refused { wait_ms },
        })
    }

    /// Deletes at most `batch` rows whose requests all left a window of `length_ms` before
    /// `at_ms` (`None`: the database's clock); returns how many.
    pub async fn purge_rate_windows(
        &self,
        length_ms: i64,
        at_ms: Option<i64>,
        batch: u64,
    ) -> StoreResult<u64> {
        let batch = i64::try_from(batch).unwrap_or(i64::MAX);
        let statement = self.postgres(PURGE, vec![at_ms.into(), length_ms.into(), batch.into()]);
        Ok(self.writer().execute_raw(statement).await?.rows_affected())
    }
}
