//! The accountant's exports over HTTP (CONTRACT §16): `GET /v1/exports/invoices.csv` and
//! `GET /v1/exports/documents.zip`, and the Colombian dates the invoice and credit note lists
//! filter by (`issued_bounds`). The handlers check the query, then start the export
//! (`crate::exports`) in a task of its own writing into a bounded channel that is the
//! response's body: the answer's headers go out at once, its rows or files as they are made.
//! A client that stops reading stalls only its export; one that goes away ends it.

use crate::domain::calendar::{Window, day_start_ms, days_inclusive, parse_date, parse_month};
use crate::exports::{CHANNEL_CHUNKS, ExportError};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiQuery;
use crate::http::state::AppState;
use crate::store::issued::IssuedBounds;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{Days, NaiveDate};
use serde::Deserialize;
use std::future::Future;
use tokio_stream::wrappers::ReceiverStream;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

/// The longest range of days one CSV covers (a leap year).
pub const MAX_DAYS: i64 = 366;

/// How many exports one account may have running at once: each holds a task and, for the ZIP,
/// one blocking thread at a time drawing a PDF, for as long as its client reads. Past it, 429.
pub const EXPORTS_AT_ONCE: usize = 2;

/// The exports running, per account.
static RUNNING: std::sync::LazyLock<dashmap::DashMap<crate::ids::AccountId, usize>> =
    std::sync::LazyLock::new(dashmap::DashMap::new);

/// One running export of an account, counted until it ends (dropped).
struct Running(crate::ids::AccountId);

impl Running {
    /// Counts an export of `account`, unless it has `EXPORTS_AT_ONCE` running: 429 then.
    fn start(account: &crate::ids::AccountId) -> ApiResult<Self> {
        let mut running = RUNNING.entry(account.clone()).or_insert(0);
        if *running >= EXPORTS_AT_ONCE {
            return Err(ApiError::RateLimited {
                retry_after_secs: 10,
            });
        }
        *running += 1;
        Ok(Self(account.clone()))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.remove_if_mut(&self.0, |_, running| {
            *running = running.saturating_sub(1);
            *running == 0
        });
    }
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(export_invoices_csv))
        .routes(routes!(export_documents_zip))
}

/// `param`'s value as a Colombian date, or a 400 naming it.
fn date_param(value: &str, param: &str) -> ApiResult<NaiveDate> {
    parse_date(value).ok_or_else(|| {
        ApiError::bad_request(format!(
            "`{param}` must be a date as YYYY-MM-DD (a Colombian calendar day)."
        ))
        .param(param)
    })
}

/// `issued_from` and `issued_to` of a list (Colombian dates, inclusive) as bounds on the
/// instant of issue: from the start of the first day to the end of the last.
pub(in crate::api) fn issued_bounds(
    from: Option<&str>,
    to: Option<&str>,
) -> ApiResult<IssuedBounds> {
    let from_ms = match from {
        Some(from) => Some(day_start_ms(date_param(from, "issued_from")?)),
        None => None,
    };
    let before_ms = match to {
        Some(to) => {
            let last = date_param(to, "issued_to")?;
            let after = last.checked_add_days(Days::new(1)).unwrap_or(last);
            Some(day_start_ms(after))
        }
        None => None,
    };
    Ok(IssuedBounds { from_ms, before_ms })
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CsvQuery {
    /// The first Colombian calendar day of the range (`YYYY-MM-DD`), included.
    #[param(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", format = Date, example = "2026-11-01")]
    pub from: String,
    /// The last Colombian calendar day of the range, included: at most 366 days after `from`
    /// counted inclusively, and not before it.
    #[param(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", format = Date, example = "2026-11-30")]
    pub to: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ZipQuery {
    /// The Colombian calendar month (`YYYY-MM`).
    #[param(pattern = r"^[0-9]{4}-(0[1-9]|1[0-2])$", example = "2026-11")]
    pub month: String,
}

/// The CSV, UTF-8, a header row then one row per document.
#[derive(ToSchema)]
#[schema(value_type = String, example = "type,number,issued_at,customer_name,tax_id_type,tax_id_number,check_digit,subtotal,iva_19,iva_5,exempt,excluded,total,currency,dian_status,cufe_or_cude,invoice_number,charge_id\ninvoice,FV-1,2026-11-24T04:15:43-05:00,Ana Gómez,CC,222222222222,,41932.77,7967.23,0.00,0.00,0.00,49900.00,COP,,,,ch_0193a1f8a9b07c1d8e2f3a4b5c6d7e8f\ncredit_note,NC-1,2026-11-25T05:00:00-05:00,Ana Gómez,CC,222222222222,,8403.36,1596.64,0.00,0.00,0.00,10000.00,COP,,,FV-1,ch_0193a1f8a9b07c1d8e2f3a4b5c6d7e8f\n")]
pub struct CsvFile(pub String);

/// A ZIP archive, as bytes.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary, example = "PK\u{3}\u{4}…")]
pub struct ZipFile(pub Vec<u8>);

/// A streamed download: `content_type`, an attachment named `filename`, and the body `export`
/// writes into the channel, in a task of its own.
fn streamed<F>(
    running: Running,
    content_type: &'static str,
    filename: &str,
    export: impl FnOnce(crate::exports::Sink) -> F,
) -> Response
where
    F: Future<Output = Result<(), ExportError>> + Send + 'static,
{
    let (sink, chunks) = tokio::sync::mpsc::channel(CHANNEL_CHUNKS);
    let work = export(sink);
    let name = filename.to_owned();
    tokio::spawn(async move {
        // Counted until the export ends, or its client goes away and ends it.
        let _running = running;
        if let Err(err) = work.await {
            // Headers are sent: the client sees the body cut short, the log says why.
            tracing::error!(error = %err, export = %name, "an export stopped before its end");
        }
    });
    let body = Body::from_stream(ReceiverStream::new(chunks));
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // The name is built of the query's dates, checked to be digits and dashes.
    if let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{filename}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Every invoice and credit note issued in a range of Colombian days, as CSV (UTF-8, a header
/// row, in issue order): `type` (`invoice`, `credit_note`), `number`, `issued_at` (Colombian
/// time, `-05:00`), the customer (`customer_name`, `tax_id_type`, `tax_id_number`,
/// `check_digit` of a NIT), the amounts in pesos with a dot and two decimals (`subtotal`, the
/// taxable base of every line; `iva_19`, `iva_5`; `exempt`, `excluded`, the bases at those
/// codes; `total` = subtotal + iva_19 + iva_5), `currency`, with DIAN `dian_status` and
/// `cufe_or_cude`, a credit note's `invoice_number`, and `charge_id`. Streamed as it is read.
#[utoipa::path(get, path = "/v1/exports/invoices.csv", tag = "exports", params(CsvQuery),
    responses((status = 200, content_type = "text/csv", body = CsvFile,
        description = "The CSV, as an attachment named `invoices_<from>_<to>.csv`.",
        headers(("Content-Disposition" = String, description = "`attachment; filename=\"invoices_<from>_<to>.csv\"`"))),
        (status = 400, body = ErrorBody, description = "A date that is not YYYY-MM-DD, `to` before `from`, or more than 366 days."),
        (status = 429, body = ErrorBody, description = "The account has two exports running already; retry after `Retry-After`.")))]
async fn export_invoices_csv(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<CsvQuery>,
) -> ApiResult<Response> {
    let first = date_param(&query.from, "from")?;
    let last = date_param(&query.to, "to")?;
    if last < first {
        return Err(ApiError::bad_request("`to` must not be before `from`.").param("to"));
    }
    if days_inclusive(first, last) > MAX_DAYS {
        return Err(ApiError::bad_request(format!(
            "A CSV covers at most {MAX_DAYS} days: ask for a shorter range."
        ))
        .param("to"));
    }
    let window = Window::days(first, last);
    let store = state.store.clone();
    let account = caller.account_id().clone();
    let running = Running::start(&account)?;
    Ok(streamed(
        running,
        "text/csv; charset=utf-8",
        &format!("invoices_{first}_{last}.csv"),
        move |sink| crate::exports::table::write(store, account, window, sink),
    ))
}

/// Every invoice and credit note issued in a Colombian calendar month, as a ZIP: each one's
/// PDF (`invoices/<number>.pdf`, `credit-notes/<number>.pdf`), and for a document with an
/// electronic one its signed XML (`<number>.xml`) and, for an invoice DIAN accepted, its
/// AttachedDocument (`invoices/<number>-attached.xml`). Streamed: produced while it is sent,
/// one document at a time.
#[utoipa::path(get, path = "/v1/exports/documents.zip", tag = "exports", params(ZipQuery),
    responses((status = 200, content_type = "application/zip", body = ZipFile,
        description = "The ZIP, as an attachment named `documents_<month>.zip`.",
        headers(("Content-Disposition" = String, description = "`attachment; filename=\"documents_<month>.zip\"`"))),
        (status = 400, body = ErrorBody, description = "A month that is not YYYY-MM."),
        (status = 429, body = ErrorBody, description = "The account has two exports running already; retry after `Retry-After`.")))]
async fn export_documents_zip(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ZipQuery>,
) -> ApiResult<Response> {
    let first_day = parse_month(&query.month).ok_or_else(|| {
        ApiError::bad_request("`month` must be a month as YYYY-MM (a Colombian calendar month).")
            .param("month")
    })?;
    let seller = state
        .store
        .account(caller.account_id())
        .await?
        .ok_or_else(|| ApiError::Internal("the caller's account is gone".into()))?;
    let window = Window::month(first_day);
    let store = state.store.clone();
    let running = Running::start(caller.account_id())?;
    Ok(streamed(
        running,
        "application/zip",
        &format!("documents_{}.zip", first_day.format("%Y-%m")),
        move |sink| crate::exports::bundle::write(store, seller, window, sink),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_runs_two_exports_at_once_and_a_third_waits() {
        let (one, other) = (
            crate::ids::AccountId::generate(),
            crate::ids::AccountId::generate(),
        );
        let first = Running::start(&one).expect("first");
        let second = Running::start(&one).expect("second");
        let refused = Running::start(&one).map(drop);
        assert!(
            matches!(refused, Err(ApiError::RateLimited { .. })),
            "{refused:?}"
        );
        // Another account is not held back by this one's.
        let theirs = Running::start(&other).expect("another account's");
        drop(first);
        let again = Running::start(&one).expect("one ended: another may start");
        drop((second, again, theirs));
        assert!(!RUNNING.contains_key(&one) && !RUNNING.contains_key(&other));
    }
}
