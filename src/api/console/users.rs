//! `/v1/console-users`: the people of an account who sign in to the console. Creating one
//! answers their invitation link once (only its hash is kept); it opens a page where they set
//! their password, for seven days. Removing one ends their sessions at once.

use super::Role;
use crate::api::webhook_endpoints::DeletedOut;
use crate::domain::time::{from_millis, rfc3339};
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::extract::ApiJson;
use crate::http::list::ListOut;
use crate::http::state::AppState;
use crate::ids::{AccountId, ConsoleUserId};
use crate::secrets::{random_token, sha256_hex};
use crate::store::console::{ConsoleInvitation, ConsoleUser, NewUserError};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// How long an invitation's link opens.
pub const INVITATION_TTL_MS: i64 = 7 * 24 * 3600 * 1000;
pub(super) const INVITATION_PREFIX: &str = "bci_";
pub(super) const INVITATION_LEN: usize = 43;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_console_user, list_console_users))
        .routes(routes!(delete_console_user))
        .routes(routes!(reinvite_console_user))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"email": "laura@tienda.example.co", "role": "support"})))]
pub struct ConsoleUserIn {
    /// One person of this deployment: an address another console user has is refused.
    #[schema(format = Email, max_length = 254)]
    pub email: String,
    /// `admin` (everything), `support` (acts on subscriptions and customers; no refunds, no
    /// settings) or `accountant` (reads and exports).
    #[schema(schema_with = crate::api::openapi::schemas::console_role)]
    pub role: String,
    /// `es` (the default) or `en`: the language of their pages.
    #[schema(schema_with = crate::api::openapi::schemas::optional_locale)]
    pub locale: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(examples(json!({
    "id": "csu_0193a1fa0b1c7d2e8f3a4b5c6d7e8f9a",
    "email": "laura@tienda.example.co",
    "role": "support",
    "locale": "es",
    "status": "invited",
    "invitation_url": "https://billing.example.co/console/invitation/bci_Q7m2Kx9PzR4tW8yB3nD6fH1jL5vC0sEaGh2Jk4Lm6Np",
    "invitation_expires_at": "2026-12-10T15:30:00Z",
    "created_at": "2026-12-03T15:30:00Z"
})))]
pub struct ConsoleUserOut {
    pub id: String,
    pub email: String,
    pub role: String,
    pub locale: String,
    /// `invited` (no password yet), `active` or `removed`.
    pub status: String,
    /// The page where they set their password: answered once, when the invitation is made.
    pub invitation_url: Option<String>,
    #[schema(format = DateTime)]
    pub invitation_expires_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

fn out(user: ConsoleUser, invitation: Option<(String, i64)>) -> ConsoleUserOut {
    let status = if user.removed_at.is_some() {
        "removed"
    } else if user.password_hash.is_some() {
        "active"
    } else {
        "invited"
    };
    ConsoleUserOut {
        id: user.id.into_string(),
        email: user.email,
        role: user.role,
        locale: user.locale,
        status: status.to_owned(),
        invitation_url: invitation.as_ref().map(|(url, _)| url.clone()),
        invitation_expires_at: invitation.map(|(_, at)| rfc3339(from_millis(at))),
        created_at: rfc3339(from_millis(user.created_at)),
    }
}

/// A new invitation of `user`: the row to store and its link.
fn invitation(state: &AppState, user: &ConsoleUser, now: i64) -> (ConsoleInvitation, String) {
    let token = random_token(INVITATION_PREFIX, INVITATION_LEN);
    let row = ConsoleInvitation {
        token_hash: sha256_hex(&token),
        account_id: user.account_id.clone(),
        user_id: user.id.clone(),
        expires_at: now + INVITATION_TTL_MS,
        used_at: None,
        created_at: now,
    };
    let url = format!("{}/console/invitation/{token}", state.config.public_url());
    (row, url)
}

/// Invite a person to the account's console: the answer holds the link where they set their
/// password (seven days, once).
#[utoipa::path(post, path = "/v1/console-users", tag = "console", request_body = ConsoleUserIn,
    responses((status = 201, body = ConsoleUserOut), (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn create_console_user(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<ConsoleUserIn>,
) -> ApiResult<(StatusCode, Json<ConsoleUserOut>)> {
    invite(&state, caller.account_id(), body).await
}

/// An operator's invitation of a person to an account's console (its first admin, say).
#[utoipa::path(post, path = "/admin/accounts/{id}/console-users", tag = "admin", request_body = ConsoleUserIn,
    responses((status = 201, body = ConsoleUserOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn create_console_user_admin(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ConsoleUserIn>,
) -> ApiResult<(StatusCode, Json<ConsoleUserOut>)> {
    let account = state
        .store
        .account(&AccountId::given(id.as_str()))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No account with id `{id}`.")).param("id"))?;
    invite(&state, &account.id, body).await
}

/// The operator's routes (behind the admin token).
pub fn admin_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create_console_user_admin))
}

async fn invite(
    state: &AppState,
    account: &AccountId,
    body: ConsoleUserIn,
) -> ApiResult<(StatusCode, Json<ConsoleUserOut>)> {
    let email = crate::api::customers::parse_email(&body.email)?.to_lowercase();
    let role = Role::parse(&body.role).ok_or_else(|| {
        ApiError::bad_request(format!("role must be one of {}.", Role::WORDS.join(", ")))
            .param("role")
    })?;
    let locale = match body.locale.as_deref() {
        None | Some("es") => "es",
        Some("en") => "en",
        Some(_) => {
            return Err(ApiError::bad_request("locale must be `es` or `en`.").param("locale"));
        }
    };
    let now = state.runtime.clock().now_ms(account).await?;
    let user = ConsoleUser {
        id: ConsoleUserId::generate(),
        account_id: account.clone(),
        email,
        role: role.as_str().to_owned(),
        password_hash: None,
        locale: locale.to_owned(),
        created_at: now,
        activated_at: None,
        removed_at: None,
    };
    let (row, url) = invitation(state, &user, now);
    let expires = row.expires_at;
    match state.store.create_console_user(user, row).await {
        Ok(user) => Ok((StatusCode::CREATED, Json(out(user, Some((url, expires)))))),
        Err(NewUserError::EmailTaken) => {
            Err(ApiError::conflict("Another console user has this e-mail address.").param("email"))
        }
        Err(NewUserError::Store(err)) => Err(err.into()),
    }
}

/// The account's console users, removed ones included, oldest first (one page: an account
/// has at most a thousand).
#[utoipa::path(get, path = "/v1/console-users", tag = "console",
    responses((status = 200, body = ListOut<ConsoleUserOut>)))]
async fn list_console_users(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<ListOut<ConsoleUserOut>>> {
    let users = state.store.console_users(caller.account_id()).await?;
    Ok(Json(ListOut {
        data: users.into_iter().map(|user| out(user, None)).collect(),
        has_more: false,
        next_cursor: None,
    }))
}

/// A new invitation link for a person who has not set their password yet; earlier links stop
/// opening.
#[utoipa::path(post, path = "/v1/console-users/{id}/invitation", tag = "console",
    responses((status = 200, body = ConsoleUserOut), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn reinvite_console_user(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<ConsoleUserOut>> {
    let account = caller.account_id();
    let user = state
        .store
        .console_user(account, &ConsoleUserId::given(id.as_str()))
        .await?
        .filter(|user| user.removed_at.is_none())
        .ok_or_else(|| {
            ApiError::not_found(format!("No console user with id `{id}`.")).param("id")
        })?;
    if user.password_hash.is_some() {
        return Err(ApiError::bad_request(
            "This person has set their password; remove them and invite them again to reset it.",
        ));
    }
    let now = state.runtime.clock().now_ms(account).await?;
    let (row, url) = invitation(&state, &user, now);
    let expires = row.expires_at;
    state.store.reinvite_console_user(row).await?;
    Ok(Json(out(user, Some((url, expires)))))
}

/// Remove a person: they can no longer sign in and every session of theirs ends now. What
/// they did stays recorded.
#[utoipa::path(delete, path = "/v1/console-users/{id}", tag = "console",
    responses((status = 200, body = DeletedOut), (status = 404, body = ErrorBody)))]
async fn delete_console_user(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<DeletedOut>> {
    let account = caller.account_id();
    let now = state.runtime.clock().now_ms(account).await?;
    let user_id = ConsoleUserId::given(id.as_str());
    if !state
        .store
        .remove_console_user(account, &user_id, now)
        .await?
    {
        return Err(ApiError::not_found(format!("No console user with id `{id}`.")).param("id"));
    }
    Ok(Json(DeletedOut { id, deleted: true }))
}
