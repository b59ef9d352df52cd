//! The dashboard's revenue section (CONTRACT §16): one account's MRR at the end of each of the
//! last twelve Colombian months (the current one as of now) and this month's movements, drawn
//! as charts (`documents::charts`) and given as tables beside them. The figures are the
//! ledger's, as `GET /v1/revenue/summary` gives them: the line ends at the summary's
//! `mrr_end_cents`, and the bars are its movements.

use crate::checkout::i18n::Locale;
use crate::documents::charts::{movement_bars, mrr_line};
use crate::domain::money::pesos;
use crate::domain::mrr::colombian_month;
use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::ids::AccountId;
use crate::store::accounts::Account;

/// How many months the MRR line shows, the current one last.
pub(super) const MONTHS: u32 = 12;

/// What the revenue section shows of one account.
pub(crate) struct RevenueView {
    pub account: String,
    pub name: String,
    /// The accounts to choose from: id and name.
    pub accounts: Vec<(String, String)>,
    pub month: String,
    pub mrr_chart: String,
    pub movements_chart: String,
    /// Month and MRR in pesos, oldest first.
    pub months: Vec<(String, String)>,
    /// Movement and amount in pesos (losses negative), in the chart's order.
    pub movements: Vec<(String, String)>,
}

/// The section for `chosen` of `accounts` (the first when none or an unknown one is chosen);
/// none when there is no account.
pub(crate) async fn revenue(
    state: &AppState,
    accounts: &[Account],
    chosen: Option<&str>,
    locale: Locale,
) -> Result<Option<RevenueView>, ApiError> {
    let spanish = locale == Locale::Es;
    let Some(account) = chosen
        .and_then(|id| accounts.iter().find(|a| a.id.as_str() == id))
        .or_else(|| accounts.first())
    else {
        return Ok(None);
    };
    let id: &AccountId = &account.id;
    let now = state.runtime.clock().now_ms(id).await?;
    let (year, month) = colombian_year_month(now);
    let mut months = Vec::new();
    for back in (0..MONTHS).rev() {
        let (y, m) = months_before(year, month, back);
        let Some((_, end)) = colombian_month(y, m) else {
            continue;
        };
        months.push((month_label(y, m, locale), end.min(now + 1)));
    }
    let instants: Vec<i64> = months.iter().map(|(_, at)| *at).collect();
    let mrr = state.store.mrr_at(id, &instants).await?;
    let points: Vec<(String, i64)> = months
        .iter()
        .map(|(label, _)| label.clone())
        .zip(mrr)
        .collect();
    // The axis names the months alone (twelve labels with years do not fit a phone); the
    // table beside it gives the years.
    let axis: Vec<(String, i64)> = points
        .iter()
        .map(|(label, mrr)| (label.split(' ').next().unwrap_or("").to_owned(), *mrr))
        .collect();
    let summary = match colombian_month(year, month) {
        Some(bounds) => state.store.revenue_summary(id, bounds, now).await?,
        None => Default::default(),
    };
    let words: [&str; 6] = if spanish {
        [
            "nuevas",
            "expansión",
            "reactivación",
            "contracción",
            "bajas: voluntarias",
            "bajas: pago fallido",
        ]
    } else {
        [
            "new",
            "expansion",
            "reactivation",
            "contraction",
            "churn: left",
            "churn: failed",
        ]
    };
    let amounts = [
        summary.new_cents,
        summary.expansion_cents,
        summary.reactivation_cents,
        -summary.contraction_cents,
        -summary.churn_voluntary_cents,
        -summary.churn_failed_payment_cents,
    ];
    let bars: Vec<(String, i64)> = words
        .iter()
        .map(|word| (*word).to_owned())
        .zip(amounts)
        .collect();
    // The operator's dashboard keeps plain figures; a person's page, their language's.
    let shown = |cents: i64| {
        if spanish {
            crate::documents::sheet::money(cents, locale)
        } else {
            pesos(cents)
        }
    };
    let this_month = month_label(year, month, locale);
    Ok(Some(RevenueView {
        mrr_chart: mrr_line(
            &axis,
            &if spanish {
                format!(
                    "MRR al final de cada uno de los últimos {MONTHS} meses, {this_month} hasta hoy"
                )
            } else {
                format!(
                    "MRR at the end of each of the last {MONTHS} months, {this_month} as of now"
                )
            },
        ),
        movements_chart: movement_bars(
            &bars,
            &if spanish {
                format!("Movimientos del MRR de {this_month}")
            } else {
                format!("MRR movements of {this_month}")
            },
        ),
        months: points
            .iter()
            .map(|(label, cents)| (label.clone(), shown(*cents)))
            .collect(),
        movements: bars
            .iter()
            .map(|(label, cents)| (label.clone(), shown(*cents)))
            .collect(),
        account: id.as_str().to_owned(),
        name: account.name.clone(),
        accounts: accounts
            .iter()
            .map(|a| (a.id.as_str().to_owned(), a.name.clone()))
            .collect(),
        month: this_month,
    }))
}

/// The Colombian calendar month of `ms`.
fn colombian_year_month(ms: i64) -> (i32, u32) {
    use chrono::Datelike;
    let local = crate::domain::time::from_millis(ms).with_timezone(&crate::domain::dian::COLOMBIA);
    (local.year(), local.month())
}

/// The month `back` months before `year`-`month`.
fn months_before(year: i32, month: u32, back: u32) -> (i32, u32) {
    let index = i64::from(year) * 12 + i64::from(month) - 1 - i64::from(back);
    (
        i32::try_from(index.div_euclid(12)).unwrap_or(year),
        u32::try_from(index.rem_euclid(12)).unwrap_or(0) + 1,
    )
}

fn month_label(year: i32, month: u32, locale: Locale) -> String {
    const NAMES: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    const NOMBRES: [&str; 12] = [
        "ene", "feb", "mar", "abr", "may", "jun", "jul", "ago", "sep", "oct", "nov", "dic",
    ];
    let names = if locale == Locale::Es { NOMBRES } else { NAMES };
    let name = names[usize::try_from(month.clamp(1, 12) - 1).unwrap_or(0)];
    format!("{name} {:02}", year.rem_euclid(100))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_count_back_across_years() {
        assert_eq!(months_before(2026, 3, 0), (2026, 3));
        assert_eq!(months_before(2026, 3, 2), (2026, 1));
        assert_eq!(months_before(2026, 3, 3), (2025, 12));
        assert_eq!(months_before(2026, 1, 11), (2025, 2));
        assert_eq!(months_before(2026, 1, 25), (2023, 12));
        assert_eq!(month_label(2025, 12, Locale::En), "Dec 25");
        assert_eq!(month_label(2025, 12, Locale::Es), "dic 25");
    }

    #[test]
    fn a_colombian_month_starts_at_five_in_the_morning_utc() {
        // 2026-12-01 04:59:59.999 UTC is still November 30th in Bogotá.
        let (start, _) = colombian_month(2026, 12).expect("month");
        assert_eq!(colombian_year_month(start - 1), (2026, 11));
        assert_eq!(colombian_year_month(start), (2026, 12));
    }
}
