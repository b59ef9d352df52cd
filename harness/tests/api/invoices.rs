//! Invoices (CONTRACT §11) through the API on both databases: every approved charge has exactly
//! one, with the plan's and the add-ons' lines, IVA split out at each line's tax code, sums that
//! add up to the charge, numbers without gaps; a declined charge has none; `invoice.created`
//! is an event like any other; a tax code outside the vocabulary is refused; refunds are credit
//! notes that add up to the invoice.

use crate::common::{TestApp, assert_invariants, eventually, read};
use crate::subscriptions::{advance, events, shop, subscribe};
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

crate::db_tests!(
    every_approved_charge_has_one_invoice_with_its_iva_split_out,
    a_declined_charge_has_no_invoice_and_numbers_stay_gapless,
    a_tax_code_outside_the_vocabulary_is_refused_and_nothing_is_stored,
    refunds_in_parts_are_credit_notes_that_add_up_to_the_invoice,
    a_customers_tax_identity_is_checked_and_invoices_keep_it_as_it_was,
    the_sellers_settings_are_checked_and_set_the_default_tax_code,
    documents_are_dated_by_the_accounts_clock,
);

async fn customer_count(app: &TestApp) -> usize {
    let (_, page) = read(app.get("/v1/customers?limit=100").await).await;
    page["data"].as_array().map(Vec::len).unwrap_or(0)
}

pub(crate) async fn invoices(app: &TestApp, query: &str) -> Vec<Value> {
    let (status, page) = read(app.get(&format!("/v1/invoices?{query}")).await).await;
    assert_eq!(status, 200, "{page}");
    page["data"].as_array().expect("data").clone()
}

async fn charges_of(app: &TestApp, subscription: &str) -> Vec<Value> {
    let (status, page) = read(
        app.get(&format!("/v1/charges?subscription_id={subscription}"))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    page["data"].as_array().expect("data").clone()
}

/// The invoice's own arithmetic: lines add up to the total, bases and taxes to the subtotal
/// and the tax, each line's split is the contract's rule, the breakdown sums its code's lines.
fn assert_adds_up(invoice: &Value) {
    let lines = invoice["lines"].as_array().expect("lines");
    let sum = |key: &str| {
        lines
            .iter()
            .map(|l| l[key].as_i64().expect(key))
            .sum::<i64>()
    };
    assert_eq!(
        sum("amount_cents"),
        invoice["total_cents"].as_i64().expect("total")
    );
    assert_eq!(
        sum("taxable_base_cents"),
        invoice["subtotal_cents"].as_i64().expect("sub")
    );
    assert_eq!(
        sum("tax_cents"),
        invoice["tax_cents"].as_i64().expect("tax")
    );
    for line in lines {
        let amount = i128::from(line["amount_cents"].as_i64().expect("amount"));
        let rate = i128::from(line["tax_rate_bps"].as_i64().expect("rate"));
        // round half away from zero of amount × 10 000 / (10 000 + rate), in integers.
        let base = (2 * amount * 10_000 + (10_000 + rate)) / (2 * (10_000 + rate));
        assert_eq!(
            i128::from(line["taxable_base_cents"].as_i64().expect("base")),
            base
        );
        assert_eq!(
            i128::from(line["tax_cents"].as_i64().expect("tax")),
            amount - base,
            "{line}"
        );
    }
    for entry in invoice["tax_breakdown"].as_array().expect("breakdown") {
        let of_code: Vec<&Value> = lines
            .iter()
            .filter(|l| l["tax_code"] == entry["tax_code"])
            .collect();
        assert!(!of_code.is_empty());
        let tax: i64 = of_code
            .iter()
            .map(|l| l["tax_cents"].as_i64().expect("t"))
            .sum();
        assert_eq!(entry["tax_cents"].as_i64(), Some(tax), "{entry}");
    }
}

async fn every_approved_charge_has_one_invoice_with_its_iva_split_out(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    // An excluded add-on beside the plan at the default 19 %.
    let (status, addon) = read(
        app.post(
            "/v1/addons",
            json!({"name": "Soporte", "monthly_amount_cents": 1_000_001,
                   "annual_amount_cents": 10_000_000, "tax_code": "iva_excluded"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{addon}");
    assert_eq!(addon["tax_code"], "iva_excluded");
    let (_, plan) = read(app.get(&format!("/v1/plans/{}", shop.plan)).await).await;
    assert_eq!(plan["tax_code"], "iva_19", "the account's default");

    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id");
    let first = invoices(&app, &format!("subscription_id={id}")).await;
    assert_eq!(first.len(), 1, "{first:?}");
    let invoice = &first[0];
    assert_eq!(invoice["number"], "FV-1");
    assert_eq!(invoice["status"], "paid");
    assert_eq!(invoice["currency"], "COP");
    assert_eq!(invoice["total_cents"], 3_000_000);
    assert_eq!(invoice["lines"].as_array().map(Vec::len), Some(1));
    assert_eq!(invoice["lines"][0]["plan_id"], shop.plan);
    assert_eq!(invoice["lines"][0]["tax_code"], "iva_19");
    // 30.000,00 with 19 % IVA: base 25.210,08, IVA 4.789,92.
    assert_eq!(invoice["subtotal_cents"], 2_521_008);
    assert_eq!(invoice["tax_cents"], 478_992);
    assert_eq!(invoice["customer"]["tax_id"]["number"], "222222222222");
    assert_eq!(invoice["dian"], Value::Null);
    assert_adds_up(invoice);
    let charges = charges_of(&app, id).await;
    assert_eq!(invoice["charge_id"], charges[0]["id"]);

    let (status, attached) = read(
        app.post(
            &format!("/v1/subscriptions/{id}/addons"),
            json!({"addon_id": addon["id"], "prorate": false}),
        )
        .await,
    )
    .await;
    assert!(status == 200 || status == 201, "{attached}");
    // The renewal: the plan's line and the add-on's, each at its own code.
    advance(&app, 31 * 86_400).await;
    let query = format!("subscription_id={id}");
    eventually(Duration::from_secs(20), || async {
        invoices(&app, &query).await.len() == 2
    })
    .await;
    let all = invoices(&app, &query).await;
    let renewal = &all[0];
    assert_eq!(renewal["number"], "FV-2");
    assert_eq!(renewal["total_cents"], 3_000_000 + 1_000_001);
    let lines = renewal["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 2, "{renewal}");
    assert_eq!(lines[1]["addon_id"], addon["id"]);
    assert_eq!(lines[1]["tax_code"], "iva_excluded");
    assert_eq!(lines[1]["tax_cents"], 0);
    assert_eq!(lines[1]["taxable_base_cents"], 1_000_001);
    let codes: Vec<&Value> = renewal["tax_breakdown"]
        .as_array()
        .expect("breakdown")
        .iter()
        .map(|e| &e["tax_code"])
        .collect();
    assert_eq!(codes, vec!["iva_19", "iva_excluded"]);
    assert_adds_up(renewal);

    // Exactly one invoice per approved charge, each found by its charge.
    for charge in charges_of(&app, id).await {
        let of_charge = invoices(
            &app,
            &format!("charge_id={}", charge["id"].as_str().expect("id")),
        )
        .await;
        let expected = usize::from(charge["status"] == "approved");
        assert_eq!(of_charge.len(), expected, "{charge}");
        if let Some(invoice) = of_charge.first() {
            assert_eq!(invoice["total_cents"], charge["amount_cents"]);
        }
    }
    let (status, one) = read(
        app.get(&format!(
            "/v1/invoices/{}",
            renewal["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(&one, renewal);
    let created: Vec<Value> = events(&app, id)
        .await
        .into_iter()
        .filter(|e| e["type"] == "invoice.created")
        .collect();
    assert_eq!(created.len(), 2);
    assert_eq!(created[1]["data"]["invoice_id"], renewal["id"]);
    assert_eq!(created[1]["data"]["amount_in_cents"], 4_000_001);
    assert_eq!(created[1]["data"]["metadata"], json!({"order": "A-1"}));
    assert_invariants(&app).await;
}

async fn a_declined_charge_has_no_invoice_and_numbers_stay_gapless(app: TestApp) {
    let (good, method) = shop(&app, "4242424242424242").await;
    subscribe(&app, &good, &method, json!({})).await;
    // The sandbox declines this card: its subscription goes past due and has no invoice.
    let (bad, declining) = shop(&app, "4111111111111111").await;
    let declined = subscribe(&app, &bad, &declining, json!({})).await;
    let declined = declined["id"].as_str().expect("id");
    advance(&app, 60).await;
    let (_, sub) = read(app.get(&format!("/v1/subscriptions/{declined}")).await).await;
    assert_eq!(sub["status"], "past_due", "{sub}");
    subscribe(&app, &good, &method, json!({})).await;
    let all = invoices(&app, "limit=100").await;
    let numbers: Vec<&str> = all
        .iter()
        .map(|i| i["number"].as_str().expect("n"))
        .collect();
    assert_eq!(numbers, vec!["FV-2", "FV-1"], "newest first, no gap");
    assert!(
        invoices(&app, &format!("subscription_id={declined}"))
            .await
            .is_empty()
    );
    assert_invariants(&app).await;
}

async fn patch(app: &TestApp, path: &str, body: Value) -> (u16, Value) {
    read(
        app.request(Method::PATCH, path)
            .json(&body)
            .send()
            .await
            .expect("send"),
    )
    .await
}

async fn a_tax_code_outside_the_vocabulary_is_refused_and_nothing_is_stored(app: TestApp) {
    let (status, body) = read(
        app.post(
            "/v1/plans",
            json!({"name": "Pro", "monthly_amount_cents": 100, "annual_amount_cents": 1000,
                   "tax_code": "iva_16"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "tax_code", "{body}");
    let (_, plans) = read(app.get("/v1/plans").await).await;
    assert_eq!(plans["data"].as_array().map(Vec::len), Some(0));
    let plan = app.create_plan("Pro", 100, 1000).await;
    let id = plan["id"].as_str().expect("id");
    let (status, patched) = patch(
        &app,
        &format!("/v1/plans/{id}"),
        json!({"tax_code": "iva_5"}),
    )
    .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["tax_code"], "iva_5");
    let (status, _) = patch(
        &app,
        &format!("/v1/plans/{id}"),
        json!({"tax_code": "exento"}),
    )
    .await;
    assert_eq!(status, 400);
}

/// A refund in two parts: two credit notes against the invoice, numbered in their own series,
/// each spread over the invoice's lines; together they give back the invoice exactly, base and
/// IVA, and each has its `credit_note.created`.
async fn refunds_in_parts_are_credit_notes_that_add_up_to_the_invoice(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id");
    let invoice = invoices(&app, &format!("subscription_id={id}")).await[0].clone();
    let charge = invoice["charge_id"].as_str().expect("charge");
    let (status, first) =
        crate::refunds::refund(&app, charge, json!({"amount_cents": 1_000_001})).await;
    assert_eq!(status, 201, "{first}");
    let first = crate::refunds::settled(&app, first["id"].as_str().expect("id")).await;
    assert_eq!(first["status"], "approved", "{first}");
    let (status, rest) = crate::refunds::refund(&app, charge, json!({})).await;
    assert_eq!(status, 201, "{rest}");
    let rest = crate::refunds::settled(&app, rest["id"].as_str().expect("id")).await;
    assert_eq!(rest["status"], "approved", "{rest}");

    let (status, page) = read(
        app.get(&format!(
            "/v1/credit-notes?invoice_id={}",
            invoice["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let mut notes = page["data"].as_array().expect("data").clone();
    notes.reverse();
    assert_eq!(notes.len(), 2, "{page}");
    assert_eq!(notes[0]["number"], "NC-1");
    assert_eq!(notes[1]["number"], "NC-2");
    assert_eq!(notes[0]["refund_id"], first["id"]);
    assert_eq!(notes[0]["total_cents"], 1_000_001);
    assert_eq!(notes[1]["total_cents"], 3_000_000 - 1_000_001);
    for note in &notes {
        let lines = note["lines"].as_array().expect("lines");
        let sum = |key: &str| {
            lines
                .iter()
                .map(|l| l[key].as_i64().expect(key))
                .sum::<i64>()
        };
        assert_eq!(
            sum("amount_cents"),
            note["total_cents"].as_i64().expect("total")
        );
        assert_eq!(
            sum("taxable_base_cents"),
            note["subtotal_cents"].as_i64().expect("sub")
        );
        assert_eq!(sum("tax_cents"), note["tax_cents"].as_i64().expect("tax"));
    }
    let total = |key: &str| {
        notes
            .iter()
            .map(|n| n[key].as_i64().expect(key))
            .sum::<i64>()
    };
    assert_eq!(
        total("total_cents"),
        invoice["total_cents"].as_i64().expect("t")
    );
    assert_eq!(
        total("subtotal_cents"),
        invoice["subtotal_cents"].as_i64().expect("s")
    );
    assert_eq!(
        total("tax_cents"),
        invoice["tax_cents"].as_i64().expect("x")
    );
    let (status, one) = read(
        app.get(&format!(
            "/v1/credit-notes/{}",
            notes[0]["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(one, notes[0]);
    let created: Vec<Value> = events(&app, id)
        .await
        .into_iter()
        .filter(|e| e["type"] == "credit_note.created")
        .collect();
    assert_eq!(created.len(), 2);
    assert_eq!(created[0]["data"]["credit_note_id"], notes[0]["id"]);
    assert_eq!(created[0]["data"]["amount_in_cents"], 1_000_001);
    // Nothing is left to refund, and no third credit note can exist.
    let (status, _) = crate::refunds::refund(&app, charge, json!({})).await;
    assert_eq!(status, 400);
    assert_invariants(&app).await;
}

/// A customer's tax identity: a NIT with a wrong check digit, an unknown document or an address
/// without a DANE city code is a 400 naming the field, and nothing is stored; a valid NIT
/// answers its check digit; an invoice keeps the customer as they were when it was issued.
async fn a_customers_tax_identity_is_checked_and_invoices_keep_it_as_it_was(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let before = customer_count(&app).await;
    for (body, param) in [
        (
            json!({"tax_id": {"type": "NIT", "number": "900123456-7"}}),
            "tax_id",
        ),
        (
            json!({"tax_id": {"type": "RUT", "number": "900123456"}}),
            "tax_id",
        ),
        (
            json!({"address": {"line": "Calle 93 # 11-26", "city_code": "Bogotá", "country": "CO"}}),
            "address.city_code",
        ),
    ] {
        let mut full = json!({"email": "e@example.co", "name": "Empresa"});
        for (k, v) in body.as_object().expect("object") {
            full[k] = v.clone();
        }
        let (status, error) = read(app.post("/v1/customers", full).await).await;
        assert_eq!(status, 400, "{error}");
        assert_eq!(error["error"]["param"], param, "{error}");
    }
    assert_eq!(customer_count(&app).await, before, "nothing stored");
    let (status, company) = read(
        app.post(
            "/v1/customers",
            json!({"email": "e@example.co", "name": "Empresa",
                   "tax_id": {"type": "NIT", "number": "800197268"},
                   "legal_name": "Empresa S.A.S.",
                   "address": {"line": "Calle 93 # 11-26", "city_code": "11001", "country": "CO"}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{company}");
    assert_eq!(company["tax_id"]["check_digit"], 4);
    assert_eq!(company["address"]["city_code"], "11001");

    // Ana (no tax id) is invoiced to the final consumer; after her PATCH, as herself.
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id");
    let (status, patched) = patch(
        &app,
        &format!("/v1/customers/{}", shop.customer),
        json!({"tax_id": {"type": "CC", "number": "1020304050"}}),
    )
    .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["tax_id"]["type"], "CC");
    assert_eq!(patched["tax_id"]["check_digit"], Value::Null);
    advance(&app, 31 * 86_400).await;
    let query = format!("subscription_id={id}");
    eventually(Duration::from_secs(20), || async {
        invoices(&app, &query).await.len() == 2
    })
    .await;
    let all = invoices(&app, &query).await;
    assert_eq!(
        all[0]["customer"]["tax_id"],
        json!({"type": "CC", "number": "1020304050"})
    );
    assert_eq!(
        all[1]["customer"]["tax_id"]["number"], "222222222222",
        "as it was at issue"
    );
    let (status, _) = patch(&app, "/v1/customers/cus_missing", json!({"name": "X"})).await;
    assert_eq!(status, 404);
}

/// The seller's settings: read, changed field by field, refused with the field named; the
/// default tax code is what a plan created without one gets.
async fn the_sellers_settings_are_checked_and_set_the_default_tax_code(app: TestApp) {
    let (status, settings) = read(app.get("/v1/account/invoicing").await).await;
    assert_eq!(status, 200, "{settings}");
    assert_eq!(settings["default_tax_code"], "iva_19");
    assert_eq!(settings["legal_name"], Value::Null);
    assert_eq!(settings["dian"], Value::Null);
    for (body, param) in [
        (json!({"nit": "900123456-1"}), "nit"),
        (json!({"tax_regime": "simplificado"}), "tax_regime"),
        (json!({"default_tax_code": "iva_16"}), "default_tax_code"),
        (json!({"dian": {"environment": "test"}}), "dian.software_id"),
    ] {
        let (status, error) = patch(&app, "/v1/account/invoicing", body).await;
        assert_eq!(status, 400, "{error}");
        assert_eq!(error["error"]["param"], param, "{error}");
    }
    let (_, unchanged) = read(app.get("/v1/account/invoicing").await).await;
    assert_eq!(unchanged, settings, "a refused change stores nothing");
    let (status, set) = patch(
        &app,
        "/v1/account/invoicing",
        json!({"legal_name": "Tienda Ejemplo S.A.S.", "nit": "900123456",
               "address": {"line": "Carrera 7 # 71-21", "city_code": "11001", "country": "CO"},
               "tax_regime": "responsable_iva", "default_tax_code": "iva_5"}),
    )
    .await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["nit"], json!({"number": "900123456", "check_digit": 8}));
    assert_eq!(set["tax_regime"], "responsable_iva");
    let (_, again) = read(app.get("/v1/account/invoicing").await).await;
    assert_eq!(again, set);
    let plan = app.create_plan("Cinco", 105, 1_050).await;
    assert_eq!(plan["tax_code"], "iva_5");
}

fn instant(value: &Value) -> chrono::DateTime<chrono::FixedOffset> {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("an instant, not {value}"));
    chrono::DateTime::parse_from_rfc3339(text).expect("RFC 3339")
}

/// With the test clock a month ahead, the renewal's invoice, its `invoice.created` and a
/// refund's credit note are dated by the account's clock (the renewal's period, what the
/// customer and DIAN see), never by the machine's time a month before.
async fn documents_are_dated_by_the_accounts_clock(app: TestApp) {
    let (shop, method) = shop(&app, "4242424242424242").await;
    let sub = subscribe(&app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id");
    advance(&app, 31 * 86_400).await;
    let (_, renewed) = read(app.get(&format!("/v1/subscriptions/{id}")).await).await;
    let period_start = instant(&renewed["current_period_start"]);
    let all = invoices(&app, &format!("subscription_id={id}")).await;
    assert_eq!(all.len(), 2, "{all:?}");
    let renewal = all
        .iter()
        .max_by_key(|i| instant(&i["issued_at"]))
        .expect("the renewal's invoice")
        .clone();
    assert!(
        instant(&renewal["issued_at"]) >= period_start,
        "issued {} before its period began {period_start}",
        renewal["issued_at"]
    );
    let created = events(&app, id)
        .await
        .into_iter()
        .filter(|e| e["type"] == "invoice.created")
        .find(|e| e["data"]["invoice_id"] == renewal["id"])
        .expect("its invoice.created");
    assert!(instant(&created["created"]) >= period_start, "{created}");

    let charge = renewal["charge_id"].as_str().expect("charge");
    let (status, refund) = crate::refunds::refund(&app, charge, json!({})).await;
    assert_eq!(status, 201, "{refund}");
    let refund = crate::refunds::settled(&app, refund["id"].as_str().expect("id")).await;
    assert_eq!(refund["status"], "approved", "{refund}");
    let (_, notes) = read(
        app.get(&format!(
            "/v1/credit-notes?invoice_id={}",
            renewal["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    let note = &notes["data"][0];
    assert!(instant(&note["issued_at"]) >= period_start, "{note}");
    assert_invariants(&app).await;
}
