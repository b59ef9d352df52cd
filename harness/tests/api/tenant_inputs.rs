//! What a tenant or a customer types, at every door it enters by (issue 46): names, legal
//! names, address lines and descriptions refuse control characters (CONTRACT §12a), at the
//! API, the checkout and the portal, because they end up in signed XML that XML 1.0 forbids
//! them in.

use crate::checkout::{new_session, plan};
use crate::common::{TestApp, card_token, read};
use crate::portal::{open, path_of};
use crate::subscriptions::shop;
use reqwest::Method;
use serde_json::{Value, json};

crate::db_tests!(control_characters_are_refused_where_names_and_addresses_enter,);

/// Asserts `answer` is a 400 naming `param`.
fn refused(what: &str, (status, answer): (u16, Value), param: &str) {
    assert_eq!(status, 400, "{what}: {answer}");
    assert_eq!(answer["error"]["param"], param, "{what}: {answer}");
}

async fn send(app: &TestApp, method: Method, path: &str, body: Value) -> (u16, Value) {
    read(
        app.request(method, path)
            .json(&body)
            .send()
            .await
            .expect("send"),
    )
    .await
}

async fn control_characters_are_refused_where_names_and_addresses_enter(app: TestApp) {
    let address = |line: &str| json!({"line": line, "city_code": "11001", "country": "CO"});
    // The API's customers: a C0 character, a C1 one (NEL), an escape in an address.
    for (body, param) in [
        (
            json!({"email": "ana@example.co", "name": "Ana\u{1}Gómez"}),
            "name",
        ),
        (
            json!({"email": "ana@example.co", "name": "Ana\u{0}"}),
            "name",
        ),
        (
            json!({"email": "ana@example.co", "name": "Ana", "legal_name": "Gómez\u{85}S.A.S."}),
            "legal_name",
        ),
        (
            json!({"email": "ana@example.co", "name": "Ana", "address": address("Calle\u{1b}93")}),
            "address.line",
        ),
        (
            json!({"email": "ana\u{7}@example.co", "name": "Ana"}),
            "email",
        ),
    ] {
        refused(
            &body.to_string(),
            send(&app, Method::POST, "/v1/customers", body.clone()).await,
            param,
        );
    }
    // A tab and a newline inside are text, not control.
    let (status, customer) = send(
        &app,
        Method::POST,
        "/v1/customers",
        json!({"email": "ana@example.co", "name": "Ana\tGómez",
            "address": address("Calle 93\nApto 201")}),
    )
    .await;
    assert_eq!(status, 201, "{customer}");
    let customer = customer["id"].as_str().expect("id");
    refused(
        "PATCH customer",
        send(
            &app,
            Method::PATCH,
            &format!("/v1/customers/{customer}"),
            json!({"legal_name": "X\u{9b}Y"}),
        )
        .await,
        "legal_name",
    );
    // The catalog's and the coupons' names are the invoices' descriptions.
    for (path, body) in [
        (
            "/v1/plans",
            json!({"name": "Pro\u{8}", "monthly_amount_cents": 100, "annual_amount_cents": 1000}),
        ),
        (
            "/v1/addons",
            json!({"name": "Extra\u{1f}", "monthly_amount_cents": 100, "annual_amount_cents": 1000}),
        ),
        (
            "/v1/coupons",
            json!({"name": "Bienvenida\u{c}", "percent_off_bps": 1000, "duration": "once"}),
        ),
    ] {
        refused(path, send(&app, Method::POST, path, body).await, "name");
    }
    // The seller.
    for (body, param) in [
        (json!({"legal_name": "Tienda\u{1f}S.A.S."}), "legal_name"),
        (
            json!({"address": address("Carrera 7\r# 71-21")}),
            "address.line",
        ),
    ] {
        refused(
            &body.to_string(),
            send(&app, Method::PATCH, "/v1/account/invoicing", body.clone()).await,
            param,
        );
    }
    // The checkout: the session's new customer, and the name typed on the page.
    let plan = plan(&app, true).await;
    refused(
        "checkout session",
        send(
            &app,
            Method::POST,
            "/v1/checkout-sessions",
            json!({"plan_id": plan, "cycle": "monthly",
                "customer": {"email": "ana@example.co", "name": "Ana\u{2}"}}),
        )
        .await,
        "customer.name",
    );
    let session = new_session(&app, &plan, json!({})).await;
    let token = card_token(&app, "4242424242424242").await;
    let mut body = token.payment_method();
    body["customer_name"] = json!("Ana\u{3}Gómez");
    let response = app
        .client
        .post(app.url(&format!(
            "/checkout/{}/complete",
            session["id"].as_str().expect("id")
        )))
        .json(&body)
        .send()
        .await
        .expect("send");
    refused("checkout complete", read(response).await, "customer_name");
    // The portal's invoicing data.
    let (shop, _) = shop(&app, "4242424242424242").await;
    let portal = path_of(&app, &open(&app, &shop.customer, json!({})).await);
    for (body, param) in [
        (json!({"legal_name": "Gómez\u{90}Asociados"}), "legal_name"),
        (json!({"address": address("Calle\u{0}1")}), "address.line"),
    ] {
        let response = app
            .client
            .patch(app.url(&format!("{portal}/api/customer")))
            .json(&body)
            .send()
            .await
            .expect("send");
        refused(&body.to_string(), read(response).await, param);
    }
}

/// The operator's admin token opens every account: a weak one is refused at start, before the
/// service listens (it used to serve with `admin`, to be guessed without end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_refuses_to_start_with_a_weak_admin_token() {
    for weak in ["admin", "0123456789", &"a".repeat(32)] {
        let database_url = crate::common::database_url(crate::common::Backend::Sqlite)
            .await
            .expect("sqlite");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let mut config = billing::config::Config::new(database_url);
        config.admin_token = Some(weak.to_owned());
        let started = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            billing::run(config, listener, std::future::pending()),
        )
        .await
        .expect("the service stopped at once instead of serving");
        let err = started.expect_err("a weak admin token was refused");
        assert!(format!("{err:#}").contains("admin token"), "{err:#}");
    }
}
