//! One `billing serve` per SQLite file. SQLite runs single-node: the process keeps state every
//! node would have to share (rate windows, the scheduler's timers, actors that own their
//! subscriptions) in its memory, so a second server on the same file would double-charge and
//! double-send. A server holds an exclusive lock on `<database>.lock` for its whole life; the
//! operating system drops it when the process ends, however it ends (even `kill -9`), so a
//! crash never leaves a stale lock behind. An in-memory database has nobody to share with.

use sea_orm::sqlx::sqlite::SqliteConnectOptions;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::PathBuf;
use std::str::FromStr;

/// Held while this process serves the SQLite database; dropping it lets another start.
#[derive(Debug)]
pub struct SqliteLock {
    _file: File,
}

#[derive(Debug, thiserror::Error)]
pub enum SqliteLockError {
    #[error(
        "another billing process is already serving the SQLite database {database} (it holds \
         {lock}); SQLite runs one node only: stop that process first, or use PostgreSQL \
         (--database-url postgres://…) to run several nodes"
    )]
    Held { database: PathBuf, lock: PathBuf },
    #[error("cannot lock {lock}")]
    Io {
        lock: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("not a SQLite database URL")]
    Url(#[source] sea_orm::sqlx::Error),
}

/// Takes the lock of the SQLite file `database_url` names; `None` for PostgreSQL and for an
/// in-memory database.
pub fn lock_sqlite_file(database_url: &str) -> Result<Option<SqliteLock>, SqliteLockError> {
    let Some(rest) = database_url.strip_prefix("sqlite:") else {
        return Ok(None);
    };
    let (path, query) = rest
        .trim_start_matches("//")
        .split_once('?')
        .unwrap_or((rest.trim_start_matches("//"), ""));
    let in_memory =
        path == ":memory:" || path.is_empty() || query.split('&').any(|pair| pair == "mode=memory");
    if in_memory {
        return Ok(None);
    }
    // The file SQLite will open, as sqlx reads the URL (percent-decoding included).
    let options = SqliteConnectOptions::from_str(database_url).map_err(SqliteLockError::Url)?;
    let database = options.get_filename().to_path_buf();
    let mut lock = database.clone().into_os_string();
    lock.push(".lock");
    let lock = PathBuf::from(lock);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock)
        .map_err(|source| SqliteLockError::Io {
            lock: lock.clone(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(Some(SqliteLock { _file: file })),
        Err(TryLockError::WouldBlock) => Err(SqliteLockError::Held { database, lock }),
        Err(TryLockError::Error(source)) => Err(SqliteLockError::Io { lock, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url() -> (String, PathBuf) {
        let path =
            std::env::temp_dir().join(format!("billing-lock-{}.db", uuid::Uuid::new_v4().simple()));
        (format!("sqlite://{}?mode=rwc", path.display()), path)
    }

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let (url, path) = url();
        let first = lock_sqlite_file(&url).expect("first").expect("a file");
        let second = lock_sqlite_file(&url).expect_err("second");
        assert!(
            matches!(&second, SqliteLockError::Held { database, .. } if *database == path),
            "{second:?}"
        );
        assert!(second.to_string().contains("already serving"), "{second}");
        drop(first);
        assert!(lock_sqlite_file(&url).expect("after release").is_some());
    }

    #[test]
    fn memory_and_postgres_take_no_lock() {
        for url in [
            "sqlite::memory:",
            "sqlite://:memory:",
            "sqlite://shared?mode=memory&cache=shared",
            "postgres://postgres@127.0.0.1/billing",
        ] {
            assert!(lock_sqlite_file(url).expect(url).is_none(), "{url}");
        }
    }
}
