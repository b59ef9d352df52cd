//! OpenAPI schemas for wire values that are strings on the Rust side and parsed by the handler:
//! enumerations (`cycle`, the statuses a list filters by), display names and URLs. Used with
//! `#[schema(schema_with = …)]` and `#[param(schema_with = …)]` so that the document refuses
//! exactly what the handler refuses.

use crate::domain::charge_purpose::ChargePurpose;
use crate::domain::charge_status::{ChargeStatus, RefundStatus};
use crate::domain::subscription::Status;
use crate::domain::tax::TaxCode;
use crate::domain::time::Cycle;
use serde_json::Value;
use utoipa::openapi::schema::{
    AdditionalProperties, AllOfBuilder, AnyOfBuilder, Array, ArrayBuilder, Object, ObjectBuilder,
    OneOfBuilder, Schema, SchemaType, Type,
};
use utoipa::openapi::{OpenApi, Ref, RefOr};

/// `monthly` or `annual`.
pub const CYCLES: &[&str] = Cycle::WORDS;

/// A subscription's statuses.
pub const SUBSCRIPTION_STATUSES: &[&str] = Status::WORDS;

/// A checkout session's statuses.
pub const SESSION_STATUSES: [&str; 3] = ["open", "complete", "expired"];

/// A charge attempt's statuses.
pub const CHARGE_STATUSES: &[&str] = ChargeStatus::WORDS;

/// What a charge is for (`domain::charge_purpose`).
pub const CHARGE_PURPOSES: &[&str] = ChargePurpose::WORDS;

/// A refund's statuses.
pub const REFUND_STATUSES: &[&str] = RefundStatus::WORDS;

/// A webhook delivery's statuses.
pub const DELIVERY_STATUSES: [&str; 3] = ["pending", "delivered", "failed"];

/// The kinds of balance transaction: an operator's top-up, a charge's fee.
pub const BALANCE_TRANSACTION_TYPES: [&str; 2] = ["top_up", "fee"];

/// A display name as `domain::text::Name` parses it: some character other than white space,
/// and no C0 or C1 control character (nor DEL) but tab and newline (CONTRACT §12a). U+0085,
/// NEL, white space to Rust's `trim`, is one of C1. The same literal stands in the fields'
/// `#[schema(pattern)]` attributes (an attribute takes no constant).
pub const NAME_PATTERN: &str = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*[^\s\u0000-\u001F\u007F-\u009F][^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$";

/// An absolute http(s) URL as the `url` crate reads it: a host name whose labels are
/// ASCII letters, digits and the sub-delimiters (the last one not starting with a digit, so
/// that it never reads as an IP address), an optional port up to 65535, then any path, query
/// and fragment.
const WEB_URL_PATTERN: &str = concat!(
    r"^https?://([A-Za-z0-9!$&'()*+,;=_~-]+\.)*[A-Za-z!$&'()*+,;=_~-][A-Za-z0-9!$&'()*+,;=_~-]*\.?",
    r"(:([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])?)?",
    r"([/?#]\S*)?$",
);

pub fn web_url() -> Object {
    url_schema(false)
}

pub fn optional_web_url() -> Object {
    url_schema(true)
}

fn url_schema(nullable: bool) -> Object {
    ObjectBuilder::new()
        .schema_type(string_type(nullable))
        .pattern(Some(WEB_URL_PATTERN))
        .build()
}

fn string_type(nullable: bool) -> SchemaType {
    if nullable {
        SchemaType::from_iter([Type::String, Type::Null])
    } else {
        SchemaType::Type(Type::String)
    }
}

fn strings(values: &[&str], nullable: bool) -> Object {
    let values = values
        .iter()
        .map(|value| Value::from(*value))
        .chain(nullable.then_some(Value::Null));
    ObjectBuilder::new()
        .schema_type(string_type(nullable))
        .enum_values(Some(values))
        .build()
}

/// The enumerations of the document, each a component of its own: a generated client then has
/// one type for a value wherever it appears (the `status` of a subscription is the type its
/// list filters by, the `cycle` of a plan's subscription the type a subscription is created
/// with).
const ENUMERATIONS: [(&str, &[&str]); 10] = [
    ("TaxCode", TaxCode::WORDS),
    ("CouponDuration", crate::domain::discount::Duration::WORDS),
    ("Cycle", CYCLES),
    ("SubscriptionStatus", SUBSCRIPTION_STATUSES),
    ("CheckoutSessionStatus", &SESSION_STATUSES),
    ("ChargeStatus", CHARGE_STATUSES),
    ("ChargePurpose", CHARGE_PURPOSES),
    ("RefundStatus", REFUND_STATUSES),
    ("DeliveryStatus", &DELIVERY_STATUSES),
    ("BalanceTransactionType", &BALANCE_TRANSACTION_TYPES),
];

/// Adds the enumerations that the schemas below refer to.
pub fn add_enumerations(openapi: &mut OpenApi) {
    let components = openapi.components.get_or_insert_with(Default::default);
    for (name, values) in ENUMERATIONS {
        components
            .schemas
            .insert(name.to_owned(), strings(values, false).into());
    }
}

pub fn cycle() -> Ref {
    Ref::from_schema_name("Cycle")
}

pub fn optional_cycle() -> Object {
    strings(CYCLES, true)
}

pub fn subscription_status() -> Ref {
    Ref::from_schema_name("SubscriptionStatus")
}

pub fn session_status() -> Ref {
    Ref::from_schema_name("CheckoutSessionStatus")
}

pub fn coupon_duration() -> Ref {
    Ref::from_schema_name("CouponDuration")
}

pub fn tax_code() -> Ref {
    Ref::from_schema_name("TaxCode")
}

/// A NIT as `domain::tax_id::TaxId::parse` reads one: 6 to 15 digits, optionally `-` and a
/// check digit (whether it is DIAN's depends on the digits, which no pattern can say).
pub const NIT_PATTERN: &str = "^[0-9]{6,15}(-[0-9])?$";

/// The seller's NIT (`PATCH /v1/account/invoicing`).
pub fn optional_nit() -> Object {
    ObjectBuilder::new()
        .schema_type(string_type(true))
        .pattern(Some(NIT_PATTERN))
        .build()
}

/// The numbers each kind of identity document takes, as `TaxId::parse` checks them.
const TAX_ID_NUMBERS: [(&[&str], &str); 3] = [
    (&["NIT"], NIT_PATTERN),
    (&["CC", "TI"], "^[0-9]{3,15}$"),
    (&["CE", "PP", "DIE"], "^[0-9A-Za-z]{3,20}$"),
];

/// Makes `TaxIdIn` say what its `type` asks of its `number`: one of three shapes, told apart
/// by `type`, each with its number's pattern (the derive can give the number one pattern only).
pub fn tax_id_in(openapi: &mut OpenApi) {
    let Some(components) = openapi.components.as_mut() else {
        return;
    };
    let Some(RefOr::T(Schema::Object(derived))) = components.schemas.remove("TaxIdIn") else {
        return;
    };
    let shapes = TAX_ID_NUMBERS
        .iter()
        .fold(OneOfBuilder::new(), |one_of, (kinds, pattern)| {
            one_of.item(
                ObjectBuilder::new()
                    .property("type", strings(kinds, false))
                    .required("type")
                    .property(
                        "number",
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .pattern(Some(*pattern)),
                    )
                    .required("number")
                    .additional_properties(Some(AdditionalProperties::FreeForm(false))),
            )
        });
    let mut schema = shapes
        .description(derived.description.clone())
        .examples(derived.examples.clone())
        .build();
    schema.title = derived.title.clone();
    components
        .schemas
        .insert("TaxIdIn".to_owned(), Schema::OneOf(schema).into());
}

/// Adds to the body schema `name` that at most one of two optional fields is sent (null counts
/// as not sent): either is absent or null.
pub fn at_most_one_of(openapi: &mut OpenApi, name: &str, fields: [&str; 2]) {
    let absent = |field: &str| {
        ObjectBuilder::new().property(field, ObjectBuilder::new().schema_type(Type::Null))
    };
    let rule = AnyOfBuilder::new()
        .item(absent(fields[0]))
        .item(absent(fields[1]))
        .build();
    constrain(openapi, name, rule.into());
}

/// Adds to a checkout session's body that `allow_promotion_codes: true` comes with neither a
/// coupon nor a code (the page's field is for the customer's own).
pub fn code_field_or_coupon(openapi: &mut OpenApi, name: &str) {
    let field_off = ObjectBuilder::new().property(
        "allow_promotion_codes",
        one_of_values([Value::Bool(false), Value::Null]),
    );
    let no_coupon = ObjectBuilder::new()
        .property("coupon_id", ObjectBuilder::new().schema_type(Type::Null))
        .property(
            "promotion_code",
            ObjectBuilder::new().schema_type(Type::Null),
        );
    let rule = AnyOfBuilder::new().item(field_off).item(no_coupon).build();
    constrain(openapi, name, rule.into());
}

pub fn smtp_security() -> Object {
    strings(crate::domain::notices::SmtpSecurity::WORDS, false)
}

pub fn optional_smtp_security() -> Object {
    strings(crate::domain::notices::SmtpSecurity::WORDS, true)
}

pub fn optional_notice_locale() -> Object {
    strings(crate::domain::notices::NoticeLocale::WORDS, true)
}

pub fn optional_notice_kind() -> Object {
    strings(crate::domain::notices::NoticeKind::WORDS, true)
}

pub fn optional_notice_status() -> Object {
    strings(crate::domain::notices::NoticeStatus::WORDS, true)
}

pub fn optional_movement_type() -> Object {
    strings(crate::domain::mrr::MovementType::WORDS, true)
}

pub fn movement_type() -> Object {
    strings(crate::domain::mrr::MovementType::WORDS, false)
}

pub fn movement_reason() -> Object {
    strings(crate::domain::mrr::MovementReason::WORDS, false)
}

pub fn tax_id_kind() -> Object {
    strings(crate::domain::tax_id::TaxIdKind::WORDS, false)
}

pub fn optional_tax_regime() -> Object {
    strings(crate::domain::tax::TaxRegime::WORDS, true)
}

pub fn optional_tax_code() -> Object {
    strings(TaxCode::WORDS, true)
}

pub fn charge_status() -> Ref {
    Ref::from_schema_name("ChargeStatus")
}

pub fn charge_purpose() -> Ref {
    Ref::from_schema_name("ChargePurpose")
}

pub fn refund_status() -> Ref {
    Ref::from_schema_name("RefundStatus")
}

pub fn delivery_status() -> Ref {
    Ref::from_schema_name("DeliveryStatus")
}

pub fn balance_transaction_type() -> Ref {
    Ref::from_schema_name("BalanceTransactionType")
}

/// The kinds of actor under the supervision tree, as `actors` registers them.
pub fn actor_kind() -> Object {
    strings(&["subscription", "webhook_endpoint"], false)
}

/// A known event type.
pub fn event_type() -> Object {
    strings(crate::webhooks::EVENT_TYPES, false)
}

/// At least one known event type, or `*` for every type.
pub fn event_types() -> Array {
    event_type_list(false)
}

pub fn optional_event_types() -> Array {
    event_type_list(true)
}

fn event_type_list(nullable: bool) -> Array {
    let names: Vec<&str> = std::iter::once("*")
        .chain(crate::webhooks::EVENT_TYPES.iter().copied())
        .collect();
    let schema_type = if nullable {
        SchemaType::from_iter([Type::Array, Type::Null])
    } else {
        SchemaType::Type(Type::Array)
    };
    ArrayBuilder::new()
        .schema_type(schema_type)
        .items(strings(&names, false))
        .min_items(Some(1))
        .build()
}

/// One of `values`, whatever their JSON type (a schema with no `type`: `ObjectBuilder` alone
/// would make it an object, which no such value is).
pub fn one_of_values<V: Into<Value>>(values: impl IntoIterator<Item = V>) -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .enum_values(Some(values.into_iter().map(Into::into)))
        .build()
}

/// Makes the body schema `name` require exactly one of two optional fields, each given as its
/// name and the JSON type it has when sent (null counts as not sent).
pub fn require_one_of(openapi: &mut OpenApi, name: &str, fields: [(&str, Type); 2]) {
    let sent = |(field, schema_type): (&str, Type)| {
        ObjectBuilder::new()
            .property(field, ObjectBuilder::new().schema_type(schema_type))
            .required(field)
    };
    let exactly_one = fields
        .into_iter()
        .fold(OneOfBuilder::new(), |one_of, field| {
            one_of.item(sent(field))
        });
    constrain(openapi, name, exactly_one.build().into());
}

/// Adds a rule across fields to the body schema `name`, which its derive cannot say: the body
/// must match both the derived schema and `rule`. The derived schema's examples move up to the
/// whole, so that they are read (and checked) against the rule too.
pub fn constrain(openapi: &mut OpenApi, name: &str, rule: Schema) {
    let Some(components) = openapi.components.as_mut() else {
        return;
    };
    let Some(mut body) = components.schemas.remove(name) else {
        return;
    };
    // A body constrained before gets one more rule beside the others, not a nested `allOf`
    // (a generated client names its models from the first level).
    if let RefOr::T(Schema::AllOf(all)) = &mut body {
        all.items.push(rule.into());
        components.schemas.insert(name.to_owned(), body);
        return;
    }
    let examples = match &mut body {
        RefOr::T(Schema::Object(object)) => std::mem::take(&mut object.examples),
        _ => Vec::new(),
    };
    let mut schema = AllOfBuilder::new().item(body).item(rule).build();
    schema.examples = examples;
    components
        .schemas
        .insert(name.to_owned(), RefOr::T(Schema::AllOf(schema)));
}

/// A string with some character other than white space (what `trim().is_empty()` refuses;
/// U+0085, NEL, is white space to Rust's `trim` and spelled out for generators that miss it).
pub fn not_blank() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(r"[^\s\u0085]"))
        .build()
}

/// Null, or a string of white space only: a field the server reads as not sent.
pub fn blank() -> Object {
    ObjectBuilder::new()
        .schema_type(string_type(true))
        .pattern(Some(r"^\s*$"))
        .build()
}

/// Null or absent.
pub fn null() -> Object {
    ObjectBuilder::new().schema_type(Type::Null).build()
}

pub fn portal_flow() -> Object {
    strings(crate::domain::portal::FlowKind::WORDS, false)
}

pub fn console_role() -> Object {
    strings(&crate::domain::console::Role::WORDS, false)
}

pub fn optional_locale() -> Object {
    strings(&["es", "en"], true)
}

pub fn cancel_mode() -> Object {
    strings(crate::domain::portal::CancelMode::WORDS, false)
}

pub fn optional_cancel_mode() -> Object {
    strings(crate::domain::portal::CancelMode::WORDS, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::checkout::SessionStatus;
    use crate::domain::subscription::Status;
    use crate::domain::time::Cycle;

    #[test]
    fn every_documented_value_is_one_the_server_parses() {
        for cycle in CYCLES {
            assert!(Cycle::parse(cycle).is_some(), "{cycle}");
        }
        for status in SUBSCRIPTION_STATUSES {
            assert!(Status::parse(status).is_some(), "{status}");
        }
        for status in SESSION_STATUSES {
            assert!(SessionStatus::parse(status).is_some(), "{status}");
        }
    }
}
