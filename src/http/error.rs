//! `ApiError`: the only error that becomes an HTTP response, always in the contract's shape
//! `{"error": {"type", "message", "param"}}`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The error envelope every failure is answered with.
#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "error": {
        "type": "invalid_request",
        "message": "No subscription with id `sub_0193a1f7b2c37d5e8f6a7b8c9d0e1f2a`.",
        "param": "id"
    }
})))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    #[serde(rename = "type")]
    pub kind: ErrorType,
    pub message: String,
    /// The request field the error is about, or null.
    pub param: Option<String>,
}

/// What kind of failure an error is; each response of the document names the ones it can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    /// The request is wrong: its fields, the object's state, an unknown id or path (400, 404,
    /// 405, 409, 413, 422).
    InvalidRequest,
    /// 401: the bearer credential is missing or wrong.
    AuthenticationError,
    /// 422: the account's prepaid balance cannot cover the fee.
    InsufficientBalance,
    /// 422: the payment processor refused.
    ProcessorError,
    /// 429, with `Retry-After`.
    RateLimit,
    /// 400 or 409: about the `Idempotency-Key`.
    IdempotencyError,
    /// 500 or 503: ours.
    ApiError,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400, 404, 405, 409 or 422 `invalid_request`.
    #[error("{message}")]
    InvalidRequest {
        status: StatusCode,
        message: String,
        param: Option<String>,
    },
    /// 401 `authentication_error`.
    #[error("authentication failed")]
    Authentication,
    /// 401 `authentication_error`: a customer portal token that is unknown or has expired.
    #[error("portal session unknown or expired")]
    PortalSession,
    /// 422 `insufficient_balance`.
    #[error("{0}")]
    InsufficientBalance(String),
    /// 422 `processor_error`, keeping the processor's message.
    #[error("{0}")]
    Processor(String),
    /// 429 `rate_limit` with `Retry-After`.
    #[error("too many requests")]
    RateLimited { retry_after_secs: u64 },
    /// 429 `rate_limit` with `Retry-After`: an unknown credential from a client address that
    /// failed to authenticate too often (`api::auth_failures`); valid credentials still pass.
    #[error("too many failed authentications")]
    TooManyFailedAuthentications { retry_after_secs: u64 },
    /// 400 (or 409 while the first request runs) `idempotency_error`.
    #[error("{message}")]
    Idempotency { status: StatusCode, message: String },
    /// 500 `api_error`; the cause is logged, never sent. Whether the request committed
    /// anything is unknown, so its Idempotency-Key keeps this answer (`api::idempotency`).
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// 503 `api_error` with `Retry-After`: the subscription's shard is moving between nodes
    /// (`cluster`); nothing was written, so its Idempotency-Key is released. Only for a
    /// failure known to come before the request's first commit (`ActionError::Moving`, a
    /// single write that was fenced).
    #[error("the object's node is changing")]
    Unavailable { retry_after_secs: u64 },
    /// 503 `api_error` with `Retry-After`: a peer's report about something this server is
    /// still writing (a WhatsApp status naming a message whose send has not yet recorded its
    /// id). What could be recorded was; the peer sends the report again.
    #[error("not yet")]
    NotYet {
        message: &'static str,
        retry_after_secs: u64,
    },
    /// 503 `api_error`, without `Retry-After`: the subscription's shard moved to another node
    /// once part of the request may have been committed (`ActionError::MovedMidway`). What was
    /// done stays done, so the answer is kept for its Idempotency-Key: a retry under the key
    /// replays it instead of doing the first part twice.
    #[error("the object's node changed while the request ran")]
    MovedMidway,
    /// 500 `api_error` from a failure known to come before the request's first write (its
    /// checks, or a transaction that rolled back): the response carries `NothingCommitted`,
    /// so its Idempotency-Key is released and a retry runs the request again.
    #[error("internal error")]
    Uncommitted(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::invalid(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::invalid(StatusCode::NOT_FOUND, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::invalid(StatusCode::CONFLICT, message)
    }

    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::invalid(StatusCode::UNPROCESSABLE_ENTITY, message)
    }

    pub fn invalid(status: StatusCode, message: impl Into<String>) -> Self {
        Self::InvalidRequest {
            status,
            message: message.into(),
            param: None,
        }
    }

    /// Names the request field the error is about.
    pub fn param(self, name: impl Into<String>) -> Self {
        match self {
            Self::InvalidRequest {
                status, message, ..
            } => Self::InvalidRequest {
                status,
                message,
                param: Some(name.into()),
            },
            other => other,
        }
    }

    pub fn internal(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Internal(Box::new(err))
    }

    /// Marks a failure that happened before the request wrote anything: a 500 becomes
    /// `Uncommitted` (its Idempotency-Key is released); any other error is unchanged (a 4xx
    /// is kept for its key as it is: it committed nothing and would be answered the same).
    pub fn before_any_write(self) -> Self {
        match self {
            Self::Internal(cause) => Self::Uncommitted(cause),
            other => other,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest { status, .. } | Self::Idempotency { status, .. } => *status,
            Self::Authentication | Self::PortalSession => StatusCode::UNAUTHORIZED,
            Self::InsufficientBalance(_) | Self::Processor(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::RateLimited { .. } | Self::TooManyFailedAuthentications { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Self::Internal(_) | Self::Uncommitted(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable { .. } | Self::MovedMidway | Self::NotYet { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }

    /// The body this error is answered with.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.detail(),
        }
    }

    fn detail(&self) -> ErrorDetail {
        let (kind, message, param) = match self {
            Self::InvalidRequest { message, param, .. } => {
                (ErrorType::InvalidRequest, message.clone(), param.clone())
            }
            Self::Authentication => (
                ErrorType::AuthenticationError,
                "Missing or invalid API key: send `Authorization: Bearer <key>`.".to_owned(),
                None,
            ),
            Self::PortalSession => (
                ErrorType::AuthenticationError,
                "This portal link is unknown or has expired: ask for a new one.".to_owned(),
                None,
            ),
            Self::InsufficientBalance(message) => {
                (ErrorType::InsufficientBalance, message.clone(), None)
            }
            Self::Processor(message) => (ErrorType::ProcessorError, message.clone(), None),
            Self::RateLimited { retry_after_secs } => (
                ErrorType::RateLimit,
                format!("Too many requests; retry after {retry_after_secs} s."),
                None,
            ),
            Self::TooManyFailedAuthentications { retry_after_secs } => (
                ErrorType::RateLimit,
                format!(
                    "Too many failed authentications from this address; retry after {retry_after_secs} s."
                ),
                None,
            ),
            Self::Idempotency { message, .. } => {
                (ErrorType::IdempotencyError, message.clone(), None)
            }
            Self::Internal(_) | Self::Uncommitted(_) => (
                ErrorType::ApiError,
                "An internal error occurred.".to_owned(),
                None,
            ),
            Self::Unavailable { retry_after_secs } => (
                ErrorType::ApiError,
                format!(
                    "This object is moving to another node; nothing was changed. Retry after {retry_after_secs} s."
                ),
                None,
            ),
            Self::NotYet { message, .. } => (ErrorType::ApiError, (*message).to_owned(), None),
            Self::MovedMidway => (
                ErrorType::ApiError,
                "This object moved to another node while the request ran, once part of it may \
                 have been done; what was done stays done. Read the object to see where it \
                 stands before acting again."
                    .to_owned(),
                None,
            ),
        };
        ErrorDetail {
            kind,
            message,
            param,
        }
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(err: crate::store::StoreError) -> Self {
        match err {
            // Another writer changed the row first; nothing of this request was written.
            crate::store::StoreError::Conflict(_) => Self::conflict(
                "The object changed while this request ran; nothing was changed. Try again.",
            ),
            // This node lost the shard while the request ran; the write changed nothing.
            crate::store::StoreError::Fenced(_) => Self::Unavailable {
                retry_after_secs: 1,
            },
            err => Self::internal(err),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Internal(cause) | Self::Uncommitted(cause) = &self {
            // Logged once, inside the request's span; the client learns nothing internal.
            tracing::error!(error = %cause, source = ?cause.source(), "request failed");
        }
        let nothing_committed = matches!(self, Self::Uncommitted(_) | Self::Unavailable { .. });
        let status = self.status();
        let mut response = (status, axum::Json(self.body())).into_response();
        if nothing_committed {
            response.extensions_mut().insert(NothingCommitted);
        }
        if let Self::RateLimited { retry_after_secs }
        | Self::TooManyFailedAuthentications { retry_after_secs }
        | Self::Unavailable { retry_after_secs }
        | Self::NotYet {
            retry_after_secs, ..
        } = self
            && let Ok(value) = HeaderValue::from_str(&retry_after_secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// A processor's refusal or failure as the API answers it: 422 `processor_error` with the
/// processor's message, or saying that it could not be reached.
pub fn processor_error(err: crate::processor::client::ProcessorError) -> ApiError {
    use crate::processor::client::ProcessorError;
    match err {
        ProcessorError::Rejected { message, .. } => ApiError::Processor(message),
        ProcessorError::EnvironmentMismatch => ApiError::Processor(err.to_string()),
        other => ApiError::Processor(format!(
            "The payment processor could not be reached: {other}"
        )),
    }
}

/// A response extension saying that its request committed nothing: a 5xx that carries it
/// releases its Idempotency-Key instead of being kept (`http::idempotency`).
/// `ApiError::Uncommitted` sets it.
#[derive(Clone, Copy, Debug)]
pub struct NothingCommitted;

/// A refused redemption as the 400 naming the field it came from.
pub fn redeem_error(
    err: crate::store::coupons::RedeemError,
    what: &crate::store::coupons::Redeem,
) -> ApiError {
    let param = match what {
        crate::store::coupons::Redeem::Coupon(_) => "coupon_id",
        crate::store::coupons::Redeem::Code(_) => "promotion_code",
    };
    match err {
        crate::store::coupons::RedeemError::Store(err) => err.into(),
        other => ApiError::bad_request(other.to_string()).param(param),
    }
}
