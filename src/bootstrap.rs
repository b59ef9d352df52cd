//! What `billing serve` does before it listens: migrate, settle the admin token, and on an
//! empty database create the sandbox account a newcomer needs.

use crate::accounts::{AccountSpec, CreatedAccount, create_account};
use crate::config::Config;
use crate::secrets::{check_admin_token, random_token, sha256_hex};
use crate::store::Store;

const ADMIN_TOKEN_HASH: &str = "admin_token_hash";
/// The `settings` key claimed by the one start that makes the sandbox account.
const FIRST_START: &str = "first_start";

/// Credentials made during this start, to be shown once.
pub struct FirstStart {
    pub admin_token: Option<String>,
    pub sandbox_account: Option<CreatedAccount>,
}

/// Returns the admin token's hash and what was created for the first start.
pub async fn prepare(store: &Store, config: &Config) -> anyhow::Result<(String, FirstStart)> {
    // A weak token given by the operator is refused before anything else happens: it would
    // open every account to whoever guesses it.
    if let Some(token) = &config.admin_token {
        check_admin_token(token).map_err(|why| anyhow::anyhow!("--admin-token: {why}"))?;
    }
    store.migrate().await?;
    let (admin_token_hash, admin_token) = match &config.admin_token {
        Some(token) => (sha256_hex(token), None),
        None => match store.setting(ADMIN_TOKEN_HASH).await? {
            Some(hash) => (hash, None),
            None => {
                let token = random_token("adm_", 40);
                let stored = store
                    .setting_insert_once(ADMIN_TOKEN_HASH, &sha256_hex(&token))
                    .await?;
                // Another process may have won the race; then its token stands, not ours.
                let shown = (stored == sha256_hex(&token)).then_some(token);
                (stored, shown)
            }
        },
    };
    // Nodes starting together on an empty database (PostgreSQL) would each see no account:
    // only the one whose claim is stored first makes the sandbox account.
    let first = store.count_accounts().await? == 0 && {
        let claim = random_token("start_", 24);
        store.setting_insert_once(FIRST_START, &claim).await? == claim
    };
    let sandbox_account = if first {
        let spec = AccountSpec {
            name: "Sandbox".to_owned(),
            sandbox: true,
            processor: None,
            fee: None,
            rate_limit_per_minute: None,
            status_rate_limit_per_minute: None,
        };
        Some(create_account(store, spec, chrono::Utc::now().timestamp_millis()).await?)
    } else {
        None
    };
    Ok((
        admin_token_hash,
        FirstStart {
            admin_token,
            sandbox_account,
        },
    ))
}

impl FirstStart {
    /// Prints the credentials of this first start, never to the log: to stdout beside text
    /// log lines, to stderr when stdout is a stream of JSON log lines (`--log-format json`),
    /// so that a log pipeline reading stdout neither breaks on them nor stores them.
    pub fn print(&self, public_url: &str, log_format: crate::logging::LogFormat) {
        let mut lines = Vec::new();
        if let Some(created) = &self.sandbox_account {
            lines.push(format!(
                "Created sandbox account {} ({}).",
                created.account.id, created.account.name
            ));
            lines.push(format!("  API key (shown once): {}", created.api_key));
        }
        if let Some(token) = &self.admin_token {
            lines.push(format!("  Admin token (shown once): {token}"));
        }
        if lines.is_empty() {
            return;
        }
        lines.push(format!(
            "  Try: curl -H 'Authorization: Bearer <API key>' {public_url}/v1/account"
        ));
        for line in lines {
            match log_format {
                crate::logging::LogFormat::Text => println!("{line}"),
                crate::logging::LogFormat::Json => eprintln!("{line}"),
            }
        }
    }
}
