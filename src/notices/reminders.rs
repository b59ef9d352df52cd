//! Writing reminders (`store::reminders`): for each account that sends notices and each
//! reminder kind it has on, the window `(through, now + lead]` of its subscriptions' timers
//! that has not been looked at yet, by the account's clock. What was looked at is kept in
//! memory per node: after a restart the whole window is looked at once more, and the unique
//! cause keeps what was written to one.

use super::Notices;
use crate::domain::notices::Channel;
use crate::ids::AccountId;
use crate::store::StoreResult;
use crate::store::reminders::{REMINDERS, lead_ms};
use std::time::Duration;

/// How often the loop writes reminders (a test-clock advance writes its account's at once).
pub(super) const EVERY: Duration = Duration::from_secs(60);
/// Subscriptions read per page of a window.
const PAGE: u64 = 500;

/// How far each account's reminders of each kind have been written, on its clock.
pub(super) type Marks = dashmap::DashMap<(AccountId, &'static str), i64>;

impl Notices {
    /// Writes the reminders that came within their lead, for `account` or every account that
    /// sends notices.
    pub(super) async fn remind(&self, account: Option<&AccountId>) -> StoreResult<()> {
        let store = &self.0.store;
        if account.is_none() {
            // Dunning's figure, beside the reminders' pass: the share of the periods declined
            // in the last 30 days that were paid after all.
            let since = chrono::Utc::now().timestamp_millis() - 30 * 86_400_000;
            let recovery = store.recovery_since(since).await?;
            metrics::gauge!("charges_failed_periods", "window" => "30d")
                .set(recovery.failed_periods as f64);
            metrics::gauge!("charges_recovered_periods", "window" => "30d")
                .set(recovery.recovered_periods as f64);
            if recovery.failed_periods > 0 {
                metrics::gauge!("charges_recovered_ratio", "window" => "30d")
                    .set(recovery.recovered_periods as f64 / recovery.failed_periods as f64);
            }
        }
        let accounts = match account {
            Some(id) => {
                let settings = store.notice_settings(id).await?;
                vec![(id.clone(), settings)]
            }
            None => store.accounts_sending_notices().await?,
        };
        for (account, settings) in accounts {
            let channels: Vec<Channel> = settings.channels().collect();
            if channels.is_empty() {
                continue;
            }
            let now = self.0.clock.fresh_now_ms(&account).await?;
            for kind in REMINDERS {
                if !settings.kinds.on(kind) {
                    continue;
                }
                let key = (account.clone(), kind.as_str());
                let from = self.0.marks.get(&key).map_or(now, |mark| *mark).max(now);
                let through = now + lead_ms(kind);
                let mut after = (from, None::<String>);
                loop {
                    let page = store
                        .reminder_page(&account, kind, (after.0, after.1.as_deref()), through, PAGE)
                        .await?;
                    let Some(last) = page.last() else {
                        break;
                    };
                    after = (
                        last.subscription.due_at.unwrap_or(through),
                        Some(last.subscription.id.to_string()),
                    );
                    let full = page.len() as u64 == PAGE;
                    store.insert_reminders(kind, &page, &channels, now).await?;
                    if !full {
                        break;
                    }
                }
                self.0.marks.insert(key, through);
            }
        }
        Ok(())
    }
}
