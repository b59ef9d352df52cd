//! The error responses an operation can answer before or around its handler: from the layers of
//! its group (authentication, rate limit, Idempotency-Key) and from the extractors of its inputs
//! (a JSON body, a query string, an id in the path). They are written into the OpenAPI document
//! here, once per group, so that each handler's annotation lists only what the handler itself
//! decides; a status the handler already lists gets the extra error types added to its
//! description. Every error response gets examples here too (`exemplify`): one body per error
//! type it can carry, as the server sends it.

use crate::http::error::{ApiError, ErrorType};
use axum::http::StatusCode;
use utoipa::openapi::example::ExampleBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Schema};
use utoipa::openapi::security::SecurityRequirement;
use utoipa::openapi::{
    Components, Content, HttpMethod, OpenApi, Ref, RefOr, Required, Response, ResponseBuilder, Type,
};

/// A layer that an operation's group of routes goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// `Authorization: Bearer <key or token>`, with failed attempts limited per client address.
    Bearer,
    /// The per-key limit of requests in any 60 seconds.
    RateLimit,
    /// `Idempotency-Key` on POSTs.
    Idempotency,
}

/// One error response: its status, the error types it can carry there and when.
struct ErrorResponse {
    status: u16,
    types: &'static str,
    retry_after: bool,
}

const fn error(status: u16, types: &'static str) -> ErrorResponse {
    ErrorResponse {
        status,
        types,
        retry_after: false,
    }
}

const BAD_BODY: ErrorResponse = error(
    400,
    "invalid_request: malformed JSON, a wrong type, a missing required field or an unknown field (named in `param`)",
);
const BODY_TOO_LARGE: ErrorResponse = error(413, "invalid_request: the body is over 1 MiB");
const BAD_QUERY: ErrorResponse = error(
    400,
    "invalid_request: a query parameter out of range, of the wrong type or unknown (named in `param`)",
);
const UNKNOWN_ID: ErrorResponse = error(
    404,
    "invalid_request: no object with this id belongs to the caller",
);
const UNAUTHENTICATED: ErrorResponse = error(
    401,
    "authentication_error: the bearer credential is missing or wrong",
);
const TOO_MANY_FAILED_AUTHENTICATIONS: ErrorResponse = ErrorResponse {
    status: 429,
    types: "rate_limit: too many failed authentications from this address (see `Retry-After`)",
    retry_after: true,
};
const TOO_MANY_REQUESTS: ErrorResponse = ErrorResponse {
    status: 429,
    types: "rate_limit: over the key's requests per 60 seconds (see `Retry-After`)",
    retry_after: true,
};
const IDEMPOTENCY_MISMATCH: ErrorResponse = error(
    400,
    "idempotency_error: this Idempotency-Key was used with another body; invalid_request: the Idempotency-Key is not 1 to 255 printable ASCII characters (`param` Idempotency-Key)",
);
const IDEMPOTENCY_IN_FLIGHT: ErrorResponse = error(
    409,
    "idempotency_error: the first request with this Idempotency-Key is still running",
);
const SHARD_MOVING: ErrorResponse = ErrorResponse {
    status: 503,
    types: "api_error: the object's shard is moving between nodes; with `Retry-After`, nothing was done: retry after that many seconds; without it, the move came after part of the request was done, which stays done, and the Idempotency-Key keeps this answer",
    retry_after: true,
};
const INTERNAL: ErrorResponse = error(
    500,
    "api_error: an internal failure; whether anything was changed is unknown, so retry with the same Idempotency-Key",
);

/// Adds to every operation of `openapi` the error responses that `layers` and the operation's
/// own inputs can answer, and the `Idempotency-Key` header to the POSTs that take it.
/// Also marks optional the bodies that may be left out: `ApiJson` reads an empty body as `{}`,
/// which a body with no required field accepts.
pub fn document(openapi: &mut OpenApi, layers: &[Layer]) {
    let components = openapi.components.as_ref();
    for item in openapi.paths.paths.values_mut() {
        for (method, operation) in operations(item) {
            if method == HttpMethod::Post && layers.contains(&Layer::Idempotency) {
                operation
                    .parameters
                    .get_or_insert_with(Vec::new)
                    .push(idempotency_key().into());
            }
            for response in inherent(method, operation, layers) {
                add(operation, &response);
            }
            if let Some(RefOr::T(body)) = operation.request_body.as_mut()
                && body
                    .content
                    .values()
                    .all(|content| accepts_empty_object(components, content))
            {
                body.required = Some(Required::False);
            }
        }
    }
}

/// Gives every response of the whole document a description where its annotation gave none:
/// OpenAPI requires one on each response, and generators (openapi-python-client, for one)
/// refuse a document without. The status's reason phrase ("OK", "Created", …) is the least a
/// reader needs, and the annotations give better ones where they have something to say.
pub fn describe(openapi: &mut OpenApi) {
    for item in openapi.paths.paths.values_mut() {
        for (_, operation) in operations(item) {
            for (status, response) in operation.responses.responses.iter_mut() {
                if let RefOr::T(response) = response
                    && response.description.trim().is_empty()
                {
                    response.description = status
                        .parse::<u16>()
                        .ok()
                        .and_then(|code| axum::http::StatusCode::from_u16(code).ok())
                        .and_then(|code| code.canonical_reason())
                        .unwrap_or("The response.")
                        .to_owned();
                }
            }
        }
    }
}

/// Writes the operations that take no credential (`security(())`, which utoipa writes as one
/// empty requirement, `[{}]`: "anonymous allowed") as OpenAPI's own way of lifting the
/// document's requirement, an empty list: generators (openapi-python-client, for one) read `[{}]`
/// as a requirement and ask for a token the operation never reads.
pub fn lift_empty_security(openapi: &mut OpenApi) {
    for item in openapi.paths.paths.values_mut() {
        for (_, operation) in operations(item) {
            if let Some(security) = operation.security.as_mut()
                && security
                    .iter()
                    .all(|requirement| *requirement == SecurityRequirement::default())
            {
                security.clear();
            }
        }
    }
}

/// Whether `content`'s schema is an object schema (in the components) with no required field.
fn accepts_empty_object(components: Option<&Components>, content: &RefOr<Content>) -> bool {
    let RefOr::T(Content {
        schema: Some(RefOr::Ref(reference)),
        ..
    }) = content
    else {
        return false;
    };
    let name = reference
        .ref_location
        .rsplit('/')
        .next()
        .unwrap_or_default();
    matches!(
        components.and_then(|components| components.schemas.get(name)),
        Some(RefOr::T(Schema::Object(object))) if object.required.is_empty()
    )
}

fn operations(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = (HttpMethod, &mut Operation)> {
    [
        (HttpMethod::Get, item.get.as_mut()),
        (HttpMethod::Post, item.post.as_mut()),
        (HttpMethod::Put, item.put.as_mut()),
        (HttpMethod::Patch, item.patch.as_mut()),
        (HttpMethod::Delete, item.delete.as_mut()),
    ]
    .into_iter()
    .filter_map(|(method, operation)| operation.map(|operation| (method, operation)))
}

/// The error responses `operation` can answer whatever its handler does.
fn inherent(method: HttpMethod, operation: &Operation, layers: &[Layer]) -> Vec<ErrorResponse> {
    let takes = |place: ParameterIn| {
        operation.parameters.iter().flatten().any(
            |parameter| matches!(parameter, RefOr::T(parameter) if parameter.parameter_in == place),
        )
    };
    let mut responses = Vec::new();
    if layers.contains(&Layer::Bearer) {
        responses.extend([UNAUTHENTICATED, TOO_MANY_FAILED_AUTHENTICATIONS]);
    }
    if layers.contains(&Layer::RateLimit) {
        responses.push(TOO_MANY_REQUESTS);
    }
    if operation.request_body.is_some() {
        responses.extend([BAD_BODY, BODY_TOO_LARGE]);
    }
    if takes(ParameterIn::Query) {
        responses.push(BAD_QUERY);
    }
    if takes(ParameterIn::Path) {
        responses.push(UNKNOWN_ID);
    }
    if method == HttpMethod::Post && layers.contains(&Layer::Idempotency) {
        responses.extend([IDEMPOTENCY_MISMATCH, IDEMPOTENCY_IN_FLIGHT]);
    }
    responses.push(INTERNAL);
    responses
}

/// Lists `error` on `operation`, or adds its types to the description of the response the
/// handler already lists with that status.
fn add(operation: &mut Operation, error: &ErrorResponse) {
    let responses = &mut operation.responses.responses;
    match responses.get_mut(&error.status.to_string()) {
        Some(RefOr::T(existing)) => {
            if !existing.description.contains(error.types) {
                existing.description = if existing.description.is_empty() {
                    error.types.to_owned()
                } else {
                    format!("{}; {}", existing.description, error.types)
                };
            }
            if existing.content.is_empty() {
                existing
                    .content
                    .insert("application/json".to_owned(), error_body().into());
            }
            if error.retry_after {
                existing
                    .headers
                    .insert("Retry-After".to_owned(), retry_after().into());
            }
        }
        Some(RefOr::Ref(_)) => {}
        None => {
            let mut response = ResponseBuilder::new()
                .description(error.types)
                .content("application/json", error_body());
            if error.retry_after {
                response = response.header("Retry-After", retry_after());
            }
            let response: Response = response.build();
            responses.insert(error.status.to_string(), response.into());
        }
    }
}

/// The optional `Idempotency-Key` header: what `idempotency::parse_key` accepts, less the
/// leading and trailing spaces that HTTP strips from a header value.
fn idempotency_key() -> utoipa::openapi::path::Parameter {
    ParameterBuilder::new()
        .name("Idempotency-Key")
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(
            "Makes a retry safe: the first answer under a key is replayed for 24 hours.",
        ))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(crate::http::idempotency::MAX_KEY_LEN))
                .pattern(Some("^[!-~]([ -~]*[!-~])?$")),
        ))
        .build()
}

/// The 503 of an operation that acts on a subscription through its actor (`actors`, and the
/// ingress applying a charge's outcome): the subscription's shard is moving between nodes and
/// this node no longer writes it; nothing was done (`Retry-After`), or, without `Retry-After`,
/// part of an action was done before the move (`ApiError::MovedMidway`). Listed as
/// `(status = 503, response = inline(ShardMoving))`.
pub struct ShardMoving;

impl<'s> utoipa::ToResponse<'s> for ShardMoving {
    fn response() -> (&'s str, RefOr<Response>) {
        let response = ResponseBuilder::new()
            .description(SHARD_MOVING.types)
            .content("application/json", error_body())
            .header("Retry-After", retry_after())
            .build();
        ("ShardMoving", response.into())
    }
}

/// Gives every error response of the whole document (those the annotations list and those
/// `document` adds) one example per error type its description names, or else the type its
/// status usually carries: each the body the server answers, about this operation's objects.
pub fn exemplify(openapi: &mut OpenApi) {
    for (path, item) in openapi.paths.paths.iter_mut() {
        for (_, operation) in operations(item) {
            let about = About::of(path, operation);
            for (status, response) in operation.responses.responses.iter_mut() {
                let (Ok(status), RefOr::T(response)) = (status.parse::<u16>(), response) else {
                    continue;
                };
                let Some(RefOr::T(content)) = response.content.get_mut("application/json") else {
                    continue;
                };
                if !is_error_body(content) || content.example.is_some() {
                    continue;
                }
                for kind in types_named(&response.description, status) {
                    let Some(error) = about.error(status, kind) else {
                        continue;
                    };
                    let Ok(value) = serde_json::to_value(error.body()) else {
                        continue;
                    };
                    let name = wire_name(kind);
                    let summary = when(&response.description, &name).unwrap_or(&name);
                    let example = ExampleBuilder::new()
                        .summary(summary)
                        .value(Some(value))
                        .build();
                    content.examples.entry(name).or_insert(example.into());
                }
            }
        }
    }
}

/// What a description says of the error type `name` (`name: when; …`), if it names it.
fn when<'d>(description: &'d str, name: &str) -> Option<&'d str> {
    description
        .split("; ")
        .find_map(|part| part.strip_prefix(name)?.strip_prefix(": "))
}

const ERROR_TYPES: [ErrorType; 7] = [
    ErrorType::InvalidRequest,
    ErrorType::AuthenticationError,
    ErrorType::InsufficientBalance,
    ErrorType::ProcessorError,
    ErrorType::RateLimit,
    ErrorType::IdempotencyError,
    ErrorType::ApiError,
];

fn wire_name(kind: ErrorType) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|name| name.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The error types a response's description names (`type: when; type: when`), or the one its
/// status carries when it names none.
fn types_named(description: &str, status: u16) -> Vec<ErrorType> {
    let named: Vec<ErrorType> = ERROR_TYPES
        .into_iter()
        .filter(|kind| description.contains(&format!("{}:", wire_name(*kind))))
        .collect();
    if !named.is_empty() {
        return named;
    }
    vec![match status {
        401 => ErrorType::AuthenticationError,
        429 => ErrorType::RateLimit,
        500.. => ErrorType::ApiError,
        _ => ErrorType::InvalidRequest,
    }]
}

fn is_error_body(content: &Content) -> bool {
    matches!(&content.schema, Some(RefOr::Ref(reference)) if reference.ref_location == error_body_ref())
}

fn error_body_ref() -> String {
    Ref::from_schema_name("ErrorBody").ref_location
}

/// What an operation is about, for the messages of its examples: the kind of object its path
/// names last, with an id of that kind, and the inputs it reads.
struct About {
    noun: &'static str,
    id: String,
    param: String,
    body: bool,
    limit: bool,
}

impl About {
    fn of(path: &str, operation: &Operation) -> Self {
        let segments: Vec<&str> = path.split('/').collect();
        let last_param = segments
            .iter()
            .rposition(|segment| segment.starts_with('{'))
            .map(|at| (at, segments[at].trim_matches(['{', '}'])));
        let collection = last_param
            .and_then(|(at, _)| at.checked_sub(1))
            .map_or("customers", |at| segments[at]);
        let (noun, prefix) = match collection {
            "subscriptions" => ("subscription", "sub_"),
            "plans" => ("plan", "plan_"),
            "addons" => ("add-on", "addon_"),
            "charges" => ("charge", "ch_"),
            "refunds" => ("refund", "re_"),
            "checkout-sessions" | "checkout" => ("checkout session", "cs_"),
            "events" => ("event", "evt_"),
            "webhook-endpoints" => ("webhook endpoint", "we_"),
            "accounts" => ("account", "acct_"),
            "coupons" => ("coupon", "co_"),
            "promotion-codes" => ("promotion code", "promo_"),
            _ => ("customer", "cus_"),
        };
        let takes =
            |name: &str| {
                operation.parameters.iter().flatten().any(
                    |parameter| matches!(parameter, RefOr::T(parameter) if parameter.name == name),
                )
            };
        Self {
            noun,
            id: format!("{prefix}0193a1f7b2c37d5e8f6a7b8c9d0e1f2a"),
            // Without an id in the path, the body names the object (`customer_id`).
            param: last_param.map_or_else(|| "customer_id".to_owned(), |(_, name)| name.to_owned()),
            body: operation.request_body.is_some(),
            limit: takes("limit"),
        }
    }

    /// The error this operation answers with `status` and `kind`, as the server words it.
    fn error(&self, status: u16, kind: ErrorType) -> Option<ApiError> {
        let code = StatusCode::from_u16(status).ok()?;
        Some(match kind {
            ErrorType::InvalidRequest => self.invalid(code),
            ErrorType::AuthenticationError => ApiError::Authentication,
            ErrorType::InsufficientBalance => ApiError::InsufficientBalance(
                "The prepaid balance does not cover the fee of this charge.".into(),
            ),
            ErrorType::ProcessorError => {
                ApiError::Processor("The payment processor rejected the charge (DECLINED).".into())
            }
            ErrorType::RateLimit => ApiError::RateLimited {
                retry_after_secs: 12,
            },
            ErrorType::IdempotencyError if status == 409 => ApiError::Idempotency {
                status: code,
                message: "A request with this Idempotency-Key is still being processed; retry \
                          after it finishes to get its response."
                    .into(),
            },
            ErrorType::IdempotencyError => ApiError::Idempotency {
                status: code,
                message: "This Idempotency-Key was already used with a different request.".into(),
            },
            ErrorType::ApiError if status == 503 => ApiError::Unavailable {
                retry_after_secs: 1,
            },
            ErrorType::ApiError => ApiError::Internal("example".into()),
        })
    }

    /// An `invalid_request` with `status` about this operation's inputs or objects.
    fn invalid(&self, status: StatusCode) -> ApiError {
        let message = |text: &str| ApiError::invalid(status, text);
        match status.as_u16() {
            400 if self.body => {
                message("Malformed JSON body: EOF while parsing an object at line 1 column 1")
            }
            400 if self.limit => message("limit must be between 1 and 100.").param("limit"),
            404 => message(&format!("No {} with id `{}`.", self.noun, self.id)).param(&self.param),
            409 if self.noun == "subscription" => message("The subscription is canceled."),
            409 => message(
                "The object changed while this request ran; nothing was changed. Try again.",
            ),
            413 => message("Request body too large."),
            _ => message("The request is not valid for this object."),
        }
    }
}

fn error_body() -> Content {
    Content::new(Some(Ref::from_schema_name("ErrorBody")))
}

fn retry_after() -> utoipa::openapi::header::Header {
    HeaderBuilder::new()
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(0)),
        ))
        .description(Some("Seconds to wait before retrying."))
        .build()
}
