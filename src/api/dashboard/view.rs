//! The dashboard's two pages as askama templates (`templates/`, auto-escaped): the login form,
//! and the operator's page, whose rows are read here and handed to the template as text.

use super::revenue::{RevenueView, revenue};
use crate::domain::money::pesos;
use crate::domain::time::{from_millis, rfc3339};
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::ids::SubscriptionId;
use askama::Template;

#[derive(Template)]
#[template(path = "api/dashboard/templates/login.html")]
struct LoginPage<'a> {
    error: Option<&'a str>,
}

/// The login form, with `error` above it if any.
pub(super) fn login_page(error: Option<&str>) -> String {
    render(&LoginPage { error })
}

#[derive(Template)]
#[template(path = "api/dashboard/templates/page.html")]
struct Page {
    csrf: String,
    notice: Option<String>,
    shards: usize,
    kinds: Vec<KindRow>,
    actors: Vec<ActorRow>,
    accounts: Vec<AccountRow>,
    by_status: Vec<(String, i64)>,
    plans: Vec<PlanRow>,
    deliveries: Vec<DeliveryRow>,
    conflicts: u64,
    failures: Vec<FailureRow>,
    range_warnings: Vec<RangeWarning>,
    dian_waiting: Vec<WaitingRow>,
    /// Notices to customers by status (CONTRACT §15): `scheduled`, `sent`, `failed`,
    /// `suppressed`, with how many.
    notices: Vec<(String, u64)>,
    /// One account's MRR and this month's movements, as charts and tables (CONTRACT §16).
    revenue: Option<RevenueView>,
}

/// DIAN documents of one account that have waited more than a day for an operator (CONTRACT
/// §12a), and for what.
struct WaitingRow {
    account: String,
    reason: &'static str,
    count: u64,
    days: i64,
    action: &'static str,
}

/// A DIAN numbering range at 90 % used or 30 days from its end (CONTRACT §12).
struct RangeWarning {
    id: String,
    account: String,
    prefix: String,
    used: String,
    remaining: i64,
    valid_to: String,
    days_left: i64,
}

struct KindRow {
    kind: &'static str,
    live: u64,
    restarts: u64,
    mailbox_backlog: u64,
    per_shard: String,
}

struct ActorRow {
    kind: &'static str,
    id: String,
    shard: usize,
    state: &'static str,
    mailbox: u64,
    restarts: u64,
    next_due: String,
}

struct AccountRow {
    id: String,
    name: String,
    sandbox: bool,
    available: String,
    reserved: String,
    created: String,
}

struct PlanRow {
    id: String,
    account: String,
    name: String,
    monthly: String,
    annual: String,
    active: bool,
    used: u64,
}

struct DeliveryRow {
    id: String,
    endpoint: String,
    event: String,
    status: String,
    attempts: i32,
    last_status: String,
    last_error: String,
    updated: String,
}

struct FailureRow {
    id: String,
    account: String,
    subscription: String,
    amount: String,
    status: String,
    message: String,
    at: String,
}

/// The operator's page, as this node sees the runtime and the database sees the rest.
pub(super) async fn page(
    state: &AppState,
    csrf: &str,
    notice: Option<&str>,
    account: Option<&str>,
) -> Result<String, ApiError> {
    let store = &state.store;
    let tree = state.runtime.tree();
    let counts = tree.counts();
    let all_accounts = store.all_accounts().await?;
    let revenue = revenue(
        state,
        &all_accounts,
        account,
        crate::checkout::i18n::Locale::En,
    )
    .await?;
    let page = Page {
        csrf: csrf.to_owned(),
        notice: notice.map(str::to_owned),
        shards: counts.shards,
        kinds: counts
            .kinds
            .iter()
            .map(|k| KindRow {
                kind: k.kind,
                live: k.live,
                restarts: k.restarts,
                mailbox_backlog: k.mailbox_backlog,
                per_shard: k
                    .per_shard
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" · "),
            })
            .collect(),
        actors: tree
            .page(None, None, 25)
            .into_iter()
            .map(|a| ActorRow {
                kind: a.kind,
                id: a.id,
                shard: a.shard,
                state: a.state,
                mailbox: a.mailbox_len,
                restarts: a.restarts,
                next_due: a.next_due_ms.map_or_else(|| "-".into(), when),
            })
            .collect(),
        accounts: all_accounts
            .into_iter()
            .map(|a| AccountRow {
                available: pesos(a.available_cents),
                reserved: pesos(a.reserved_cents),
                created: when(a.created_at),
                sandbox: a.sandbox,
                id: a.id.into_string(),
                name: a.name,
            })
            .collect(),
        by_status: store.subscriptions_by_status().await?,
        plans: store
            .all_plans_with_usage(100)
            .await?
            .into_iter()
            .map(|(p, used)| PlanRow {
                monthly: pesos(p.monthly_amount_cents),
                annual: pesos(p.annual_amount_cents),
                active: p.active,
                used,
                id: p.id.to_string(),
                account: p.account_id.into_string(),
                name: p.name,
            })
            .collect(),
        deliveries: store
            .recent_deliveries(20)
            .await?
            .into_iter()
            .map(|d| DeliveryRow {
                attempts: d.attempts,
                last_status: d
                    .last_status_code
                    .map(|c| c.to_string())
                    .unwrap_or_default(),
                last_error: d.last_error.unwrap_or_default(),
                updated: when(d.updated_at),
                id: d.id.into_string(),
                endpoint: d.endpoint_id.into_string(),
                event: d.event_id.into_string(),
                status: d.status,
            })
            .collect(),
        // Processor reports that moved no money because they contradict their charge.
        conflicts: store.count_charge_conflicts().await?,
        failures: store
            .recent_failed_charges(20)
            .await?
            .into_iter()
            .map(|c| FailureRow {
                amount: pesos(c.amount_cents),
                at: when(c.updated_at),
                subscription: c
                    .subscription_id
                    .map_or_else(|| "-".into(), SubscriptionId::into_string),
                message: c.processor_message.unwrap_or_default(),
                id: c.id.into_string(),
                account: c.account_id.into_string(),
                status: c.status.as_str().to_owned(),
            })
            .collect(),
        range_warnings: range_warnings(state).await?,
        dian_waiting: dian_waiting(state).await?,
        notices: store.count_notices_by_status().await?,
        revenue,
    };
    Ok(render(&page))
}

/// The DIAN documents that have waited more than a day for an operator.
async fn dian_waiting(state: &AppState) -> Result<Vec<WaitingRow>, ApiError> {
    use crate::domain::dian::DianWaiting;
    const DAY_MS: i64 = 86_400_000;
    Ok(state
        .filing
        .waiting()
        .await?
        .into_iter()
        .filter(|(_, waited)| *waited > DAY_MS)
        .map(|(group, waited)| WaitingRow {
            account: group.account_id.into_string(),
            reason: group.waiting.as_str(),
            count: group.count,
            days: waited / DAY_MS,
            action: match group.waiting {
                DianWaiting::AwaitingRange => "add a numbering range valid today",
                DianWaiting::NumberingFailed => {
                    "numbering is retried at each filing pass: read the logs"
                }
                DianWaiting::InvoiceRejected => "correct the invoice DIAN rejected",
                DianWaiting::Settings => {
                    "restore the account's DIAN settings (software PIN, certificate)"
                }
            },
        })
        .collect())
}

/// The ranges operators are warned about.
async fn range_warnings(state: &AppState) -> Result<Vec<RangeWarning>, ApiError> {
    use crate::domain::dian::{RangeUse, colombian_date};
    let today = colombian_date(chrono::Utc::now());
    Ok(state
        .store
        .all_dian_ranges()
        .await?
        .into_iter()
        .filter_map(|r| {
            let used = RangeUse::of(
                r.range_from,
                r.range_to,
                r.next_number,
                r.valid_to_date(),
                today,
            );
            used.needs_warning().then(|| RangeWarning {
                used: format!("{:.0} %", used.used * 100.0),
                remaining: (r.range_to - r.next_number + 1).max(0),
                days_left: used.days_left,
                id: r.id.into_string(),
                account: r.account_id.into_string(),
                prefix: r.prefix,
                valid_to: r.valid_to,
            })
        })
        .collect())
}

/// A template rendered; askama fails only on a formatting error of a value, which these
/// plain strings and numbers do not have.
fn render(template: &impl Template) -> String {
    template.render().unwrap_or_else(|err| {
        format!("<!doctype html><p>The page could not be rendered: {err}</p>")
    })
}

fn when(ms: i64) -> String {
    rfc3339(from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_operator_or_a_tenant_wrote_is_escaped() {
        let html = login_page(Some("<script>\"x\" & 'y'</script>"));
        assert!(
            html.contains("&#60;script&#62;&#34;x&#34; &#38; &#39;y&#39;&#60;/script&#62;"),
            "{html}"
        );
        assert!(!html.contains("<script>"));
        let page = Page {
            csrf: "csrf_\"><b>".into(),
            notice: Some("<img src=x>".into()),
            shards: 1,
            kinds: Vec::new(),
            actors: Vec::new(),
            accounts: vec![AccountRow {
                id: "acct_1".into(),
                name: "<b>Shop</b>".into(),
                sandbox: true,
                available: pesos(-150),
                reserved: pesos(5),
                created: when(0),
            }],
            by_status: Vec::new(),
            plans: Vec::new(),
            deliveries: Vec::new(),
            conflicts: 0,
            range_warnings: Vec::new(),
            dian_waiting: Vec::new(),
            notices: Vec::new(),
            failures: Vec::new(),
            revenue: None,
        };
        let html = render(&page);
        assert!(!html.contains("<b>") && !html.contains("<img"), "{html}");
        assert!(html.contains("&#60;b&#62;Shop&#60;/b&#62;"), "{html}");
        assert!(
            html.contains("value=\"csrf_&#34;&#62;&#60;b&#62;\""),
            "{html}"
        );
        assert!(html.contains("<td>-1.50</td>"), "{html}");
        assert!(html.contains("No subscriptions."), "{html}");
    }
}
