//! Issue 49, the merchant's console over real HTTP on both databases: a person invited by the
//! API sets their password and signs in (cookie, session row, CSRF token), is limited when
//! guessing, signs out everywhere; a support person acts on a subscription after confirming
//! and cannot refund even with a forged form; an admin refunds once however often the form is
//! posted; an accountant reads and exports but cannot act; one account's person never reaches
//! another's objects. The browser's view of the same pages is `console_browser.rs`.

use crate::common::{TestApp, read};
use crate::subscriptions::{get, shop, subscribe};
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Client, Method, redirect};
use serde_json::{Value, json};

crate::db_tests!(
    a_person_invited_sets_a_password_signs_in_and_out,
    guessing_is_limited_before_any_password_is_checked,
    support_acts_after_confirming_and_cannot_refund_even_with_a_forged_form,
    an_admin_refunds_once_however_often_the_form_is_posted,
    an_accountant_reads_and_exports_but_cannot_act,
    a_person_finds_customers_and_never_another_accounts_objects,
    a_portal_link_and_a_test_message_reach_a_real_mail_server,
    a_portal_link_the_mail_server_put_off_is_sent_again_on_its_own,
    an_operator_invites_an_accounts_first_admin,
    an_admin_switches_the_settings_and_support_cannot,
    an_admin_sets_the_mail_server_and_the_sellers_data_and_no_secret_comes_back,
);

pub(crate) const PASSWORD: &str = "una clave bien larga";

/// A browser of the console: its cookie, as the server set it.
pub(crate) struct Person {
    client: Client,
    base: String,
    pub(crate) email: String,
    cookie: String,
}

fn no_redirects() -> Client {
    Client::builder()
        .redirect(redirect::Policy::none())
        .build()
        .expect("client")
}

/// The value the response's `Set-Cookie` gives `name`, if any.
fn set_cookie(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| {
            let (pair, _) = v.split_once(';').unwrap_or((v, ""));
            let (found, value) = pair.split_once('=')?;
            (found == name).then(|| value.to_owned())
        })
}

fn form(fields: &[(&str, &str)]) -> String {
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in fields {
        out.append_pair(name, value);
    }
    out.finish()
}

/// Invites `email` as `role` through the API: the invitation's URL.
pub(crate) async fn invite(app: &TestApp, email: &str, role: &str) -> String {
    let (status, user) = read(
        app.post("/v1/console-users", json!({"email": email, "role": role}))
            .await,
    )
    .await;
    assert_eq!(status, 201, "{user}");
    assert_eq!(user["status"], "invited");
    user["invitation_url"].as_str().expect("url").to_owned()
}

/// Accepts the invitation at `url` with `PASSWORD`: the person, signed in.
pub(crate) async fn accept(app: &TestApp, url: &str, email: &str) -> Person {
    let client = no_redirects();
    let response = client
        .post(url)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form(&[("password", PASSWORD), ("again", PASSWORD)]))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 303, "accepting signs in");
    assert_eq!(response.headers()[LOCATION], "/console");
    let raw = response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("billing_console="))
        .expect("the session's cookie")
        .to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(raw.contains(attribute), "{raw}");
    }
    let cookie = set_cookie(&response, "billing_console").expect("cookie");
    Person {
        client,
        base: app.base.clone(),
        email: email.to_owned(),
        cookie,
    }
}

/// A person of `app`'s account with `role`, signed in.
pub(crate) async fn person(app: &TestApp, email: &str, role: &str) -> Person {
    let url = invite(app, email, role).await;
    accept(app, &url, email).await
}

impl Person {
    pub(crate) async fn page(&self, path: &str) -> (u16, String) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .header(COOKIE, format!("billing_console={}", self.cookie))
            .send()
            .await
            .expect("send");
        (
            response.status().as_u16(),
            response.text().await.expect("text"),
        )
    }

    pub(crate) async fn post(&self, path: &str, fields: &[(&str, &str)]) -> (u16, String) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header(COOKIE, format!("billing_console={}", self.cookie))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form(fields))
            .send()
            .await
            .expect("send");
        (
            response.status().as_u16(),
            response.text().await.expect("text"),
        )
    }
}

/// The value of the first hidden input named `name` on a page.
pub(crate) fn hidden(html: &str, name: &str) -> String {
    let needle = format!("name=\"{name}\" value=\"");
    let at = html
        .find(&needle)
        .unwrap_or_else(|| panic!("no {name} in {html}"))
        + needle.len();
    html[at..at + html[at..].find('"').expect("end")].to_owned()
}

/// The Idempotency-Key a page's form for `action` carries.
fn key_for(html: &str, action: &str) -> String {
    let suffix = format!("-{action}\"");
    let end = html
        .find(&suffix)
        .unwrap_or_else(|| panic!("no {action} form in {html}"));
    let start = html[..end].rfind("value=\"").expect("value") + "value=\"".len();
    format!("{}-{action}", &html[start..end])
}

async fn login(app: &TestApp, email: &str, password: &str) -> (u16, Option<String>) {
    let client = no_redirects();
    let page = client
        .get(app.url("/console/login"))
        .send()
        .await
        .expect("send");
    let nonce_cookie = set_cookie(&page, "billing_console_login").expect("the form's cookie");
    let html = page.text().await.expect("html");
    let nonce = hidden(&html, "nonce");
    assert_eq!(nonce, nonce_cookie);
    let response = client
        .post(app.url("/console/login"))
        .header(COOKIE, format!("billing_console_login={nonce_cookie}"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form(&[
            ("nonce", &nonce),
            ("email", email),
            ("password", password),
        ]))
        .send()
        .await
        .expect("send");
    let status = response.status().as_u16();
    (status, set_cookie(&response, "billing_console"))
}

async fn a_person_invited_sets_a_password_signs_in_and_out(app: TestApp) {
    let url = invite(&app, "Laura@Tienda.example.co", "admin").await;
    let (status, body) = read(
        app.post(
            "/v1/console-users",
            json!({"email": "laura@tienda.example.co", "role": "support"}),
        )
        .await,
    )
    .await;
    assert_eq!(
        status, 409,
        "one person per address, whatever its case: {body}"
    );
    let client = no_redirects();
    let page = client.get(&url).send().await.expect("send");
    assert_eq!(page.status(), 200);
    assert!(
        page.text()
            .await
            .expect("html")
            .contains("laura@tienda.example.co")
    );
    let short = client
        .post(&url)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form(&[("password", "corta"), ("again", "corta")]))
        .send()
        .await
        .expect("send");
    assert_eq!(short.status(), 400, "a short password is refused");
    assert!(short.text().await.expect("html").contains("al menos 12"));

    let laura = accept(&app, &url, "laura@tienda.example.co").await;
    let (status, home) = laura.page("/console").await;
    assert_eq!(status, 200, "{home}");
    assert!(home.contains("Resumen") && home.contains("laura@tienda.example.co"));
    let again = client
        .post(&url)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form(&[("password", PASSWORD), ("again", PASSWORD)]))
        .send()
        .await
        .expect("send");
    assert_eq!(again.status(), 404, "an invitation opens once");
    let (_, listed) = read(app.get("/v1/console-users").await).await;
    assert_eq!(listed["data"][0]["status"], "active");
    assert!(
        listed["data"][0]["invitation_url"].is_null(),
        "the link is answered once: {listed}"
    );

    assert_eq!(
        login(&app, "laura@tienda.example.co", "otra clave cualquiera")
            .await
            .0,
        401
    );
    assert_eq!(
        login(&app, "nadie@tienda.example.co", PASSWORD).await.0,
        401
    );
    let (status, second) = login(&app, "LAURA@tienda.example.co", PASSWORD).await;
    assert_eq!(status, 303);
    assert!(second.is_some());

    let csrf = hidden(&home, "csrf");
    let (status, _) = laura
        .post("/console/logout-everywhere", &[("csrf", "csrf_wrong")])
        .await;
    assert_eq!(status, 403, "a sign-out needs the session's token");
    let (status, _) = laura
        .post("/console/logout-everywhere", &[("csrf", &csrf)])
        .await;
    assert_eq!(status, 200);
    let (status, _) = laura.page("/console").await;
    assert_eq!(status, 303, "the session is gone");
    let other = Person {
        client: no_redirects(),
        base: app.base.clone(),
        email: laura.email.clone(),
        cookie: second.expect("cookie"),
    };
    assert_eq!(
        other.page("/console").await.0,
        303,
        "and so is every other of hers"
    );

    let id = listed["data"][0]["id"].as_str().expect("id");
    let (status, _) = read(
        app.request(Method::DELETE, &format!("/v1/console-users/{id}"))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        login(&app, "laura@tienda.example.co", PASSWORD).await.0,
        401,
        "removed"
    );
    let again = invite(&app, "laura@tienda.example.co", "accountant").await;
    accept(&app, &again, "laura@tienda.example.co").await;
    assert_eq!(
        login(&app, "laura@tienda.example.co", PASSWORD).await.0,
        303,
        "a removed person may be invited again"
    );
}

async fn guessing_is_limited_before_any_password_is_checked(app: TestApp) {
    person(&app, "ana@tienda.example.co", "support").await;
    for _ in 0..10 {
        assert_eq!(
            login(&app, "ana@tienda.example.co", "no es la clave, no")
                .await
                .0,
            401
        );
    }
    assert_eq!(
        login(&app, "ana@tienda.example.co", PASSWORD).await.0,
        429,
        "past the limit even the right password is not checked"
    );
}

/// A subscription with one approved charge, and the id of that charge.
async fn charged(app: &TestApp) -> (String, String, String) {
    let (shop, method) = shop(app, "4242424242424242").await;
    let sub = subscribe(app, &shop, &method, json!({})).await;
    let id = sub["id"].as_str().expect("id").to_owned();
    let (_, charges) = read(app.get(&format!("/v1/charges?subscription_id={id}")).await).await;
    let charge = charges["data"][0]["id"]
        .as_str()
        .expect("charge")
        .to_owned();
    assert_eq!(charges["data"][0]["status"], "approved");
    (id, charge, shop.customer)
}

async fn refunds_of(app: &TestApp, charge: &str) -> Vec<Value> {
    let (_, list) = read(app.get(&format!("/v1/charges/{charge}/refunds")).await).await;
    list["data"].as_array().cloned().unwrap_or_default()
}

async fn support_acts_after_confirming_and_cannot_refund_even_with_a_forged_form(app: TestApp) {
    app.lift_rate_limit().await;
    let (sub, charge, _) = charged(&app).await;
    let pablo = person(&app, "pablo@tienda.example.co", "support").await;
    let (status, html) = pablo.page(&format!("/console/subscriptions/{sub}")).await;
    assert_eq!(status, 200, "{html}");
    assert!(!html.contains("/refund\""), "no refund form for support");
    let csrf = hidden(&html, "csrf");
    let forged = [
        ("csrf", csrf.as_str()),
        ("key", "con_forged-refund"),
        ("confirm", "yes"),
        ("amount_cents", "100"),
        ("subscription_id", sub.as_str()),
    ];
    let (status, _) = pablo
        .post(&format!("/console/charges/{charge}/refund"), &forged)
        .await;
    assert_eq!(status, 403, "the server refuses support's refund");
    assert!(refunds_of(&app, &charge).await.is_empty());

    let key = key_for(&html, "cancel");
    let (status, _) = pablo
        .post(
            &format!("/console/subscriptions/{sub}/cancel"),
            &[("csrf", "csrf_stale"), ("key", &key)],
        )
        .await;
    assert_eq!(
        status, 403,
        "a form without the session's token changes nothing"
    );
    let (status, confirm) = pablo
        .post(
            &format!("/console/subscriptions/{sub}/cancel"),
            &[("csrf", &csrf), ("key", &key)],
        )
        .await;
    assert_eq!(status, 200);
    assert!(confirm.contains("¿Cancelar esta suscripción?"), "{confirm}");
    assert_eq!(
        get(&app, &sub).await["cancel_at_period_end"],
        false,
        "not before it is confirmed"
    );
    let (status, done) = pablo
        .post(
            &format!("/console/subscriptions/{sub}/cancel"),
            &[
                ("csrf", &csrf),
                ("key", &key),
                ("confirm", "yes"),
                ("at_period_end", "true"),
            ],
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert!(done.contains("Hecho."), "{done}");
    assert!(
        done.contains("Cancelación · pablo@tienda.example.co · hecho"),
        "who did it: {done}"
    );
    assert_eq!(get(&app, &sub).await["cancel_at_period_end"], true);
    // Who did it is an event of the API's too, about the subscription.
    let actions = console_events(&app, &sub).await;
    assert_eq!(actions.len(), 1, "{actions:?}");
    let data = &actions[0]["data"];
    assert_eq!(
        (
            data["action"].clone(),
            data["object_id"].clone(),
            data["http_status"].clone(),
            data["console_user"]["email"].clone(),
            data["console_user"]["role"].clone(),
            data["idempotency_key"].clone(),
        ),
        (
            json!("cancel"),
            json!(sub),
            json!(200),
            json!("pablo@tienda.example.co"),
            json!("support"),
            json!(key),
        ),
        "{data}"
    );
}

/// The account's `console.action` events, newest first; with `subscription`, only its.
async fn console_events(app: &TestApp, subscription: &str) -> Vec<Value> {
    let mut path = "/v1/events?type=console.action&limit=100".to_owned();
    if !subscription.is_empty() {
        path.push_str(&format!("&subscription_id={subscription}"));
    }
    let (status, page) = read(app.get(&path).await).await;
    assert_eq!(status, 200, "{page}");
    page["data"].as_array().expect("data").clone()
}

async fn an_admin_refunds_once_however_often_the_form_is_posted(app: TestApp) {
    app.lift_rate_limit().await;
    let (sub, charge, _) = charged(&app).await;
    let bigger = app.create_plan("Empresarial", 9_000_000, 90_000_000).await;
    let bigger = bigger["id"].as_str().expect("id");
    let marta = person(&app, "marta@tienda.example.co", "admin").await;
    let (_, html) = marta.page(&format!("/console/subscriptions/{sub}")).await;
    let csrf = hidden(&html, "csrf");
    let key = key_for(&html, &format!("refund-{charge}"));
    let path = format!("/console/charges/{charge}/refund");
    let (status, confirm) = marta
        .post(
            &path,
            &[
                ("csrf", &csrf),
                ("key", &key),
                ("amount", "10.000"),
                ("subscription_id", &sub),
            ],
        )
        .await;
    assert_eq!(status, 200, "{confirm}");
    assert!(
        confirm.contains("$ 10.000,00"),
        "the amount to confirm: {confirm}"
    );
    assert!(
        refunds_of(&app, &charge).await.is_empty(),
        "nothing before it is confirmed"
    );
    let confirmed = [
        ("csrf", csrf.as_str()),
        ("key", key.as_str()),
        ("confirm", "yes"),
        ("amount_cents", "1000000"),
        ("subscription_id", sub.as_str()),
        ("reason", "Cobro doble"),
    ];
    for _ in 0..3 {
        let (status, done) = marta.post(&path, &confirmed).await;
        assert_eq!(status, 200, "{done}");
        assert!(done.contains("Reembolso solicitado."), "{done}");
    }
    let refunds = refunds_of(&app, &charge).await;
    assert_eq!(
        refunds.len(),
        1,
        "one refund however often it was posted: {refunds:?}"
    );
    assert_eq!(refunds[0]["amount_cents"], 1_000_000);
    assert_eq!(refunds[0]["reason"], "Cobro doble");
    let refunded: Vec<Value> = console_events(&app, "")
        .await
        .into_iter()
        .filter(|e| e["data"]["action"] == "refund")
        .collect();
    assert_eq!(refunded.len(), 1, "one action, one event: {refunded:?}");
    assert_eq!(refunded[0]["data"]["object_id"], json!(charge));
    assert_eq!(
        refunded[0]["data"]["console_user"]["email"],
        "marta@tienda.example.co"
    );

    let change = format!("/console/subscriptions/{sub}/change-plan");
    let key = key_for(&html, "change-plan");
    let (status, preview) = marta
        .post(
            &change,
            &[("csrf", &csrf), ("key", &key), ("plan_id", bigger)],
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert!(
        preview.contains("Se cobra ahora:"),
        "the preview's amount: {preview}"
    );
    assert_ne!(
        get(&app, &sub).await["plan_id"],
        bigger,
        "not before it is confirmed"
    );
    let proration = hidden(&preview, "proration_date");
    let (status, done) = marta
        .post(
            &change,
            &[
                ("csrf", &csrf),
                ("key", &key),
                ("plan_id", bigger),
                ("proration_date", &proration),
                ("confirm", "yes"),
            ],
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(get(&app, &sub).await["plan_id"], bigger);
}

async fn an_accountant_reads_and_exports_but_cannot_act(app: TestApp) {
    app.lift_rate_limit().await;
    let (sub, _, customer) = charged(&app).await;
    let lucia = person(&app, "lucia@contadores.example.co", "accountant").await;
    let (status, html) = lucia.page(&format!("/console/subscriptions/{sub}")).await;
    assert_eq!(status, 200);
    assert!(!html.contains("/cancel\""), "no action for an accountant");
    let csrf = hidden(&html, "csrf");
    let (status, _) = lucia
        .post(
            &format!("/console/subscriptions/{sub}/pause"),
            &[("csrf", &csrf), ("key", "con_x-pause"), ("confirm", "yes")],
        )
        .await;
    assert_eq!(status, 403);
    assert_eq!(get(&app, &sub).await["status"], "active");
    assert_eq!(
        lucia.page("/console/settings").await.0,
        403,
        "settings are an admin's"
    );
    let (status, page) = lucia.page(&format!("/console/customers/{customer}")).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("/console/documents/invoices/"),
        "the invoice's PDF: {page}"
    );
    let pdf = page
        .split("/console/documents/invoices/")
        .nth(1)
        .expect("link");
    let pdf = format!(
        "/console/documents/invoices/{}",
        &pdf[..pdf.find('"').expect("end")]
    );
    let response = lucia
        .client
        .get(format!("{}{pdf}", lucia.base))
        .header(COOKIE, format!("billing_console={}", lucia.cookie))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()[CONTENT_TYPE], "application/pdf");
    let month = chrono::Utc::now()
        .with_timezone(&chrono::FixedOffset::west_opt(5 * 3600).expect("tz"))
        .format("%Y-%m")
        .to_string();
    let response = lucia
        .client
        .get(format!(
            "{}/console/exports/download?month={month}&format=csv",
            lucia.base
        ))
        .header(COOKIE, format!("billing_console={}", lucia.cookie))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 200);
    let csv = response.text().await.expect("csv");
    assert!(csv.starts_with("type,number,"), "{csv}");
    assert_eq!(
        csv.lines().filter(|l| l.starts_with("invoice,")).count(),
        1,
        "{csv}"
    );
}

async fn a_person_finds_customers_and_never_another_accounts_objects(app: TestApp) {
    app.lift_rate_limit().await;
    let (sub, _, customer) = charged(&app).await;
    let (status, body) = read(
        app.post(
            "/v1/customers",
            json!({"email": "compras@ferreteria.example.co", "name": "Ferretería El Tornillo",
                "tax_id": {"type": "NIT", "number": "900123456"}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let sofia = person(&app, "sofia@tienda.example.co", "support").await;
    for (q, found, not) in [
        (
            "ferreteria.example",
            "Ferretería El Tornillo",
            "ana@example.co",
        ),
        ("TORNILLO", "Ferretería El Tornillo", "ana@example.co"),
        ("900123", "Ferretería El Tornillo", "ana@example.co"),
        ("ana@", "ana@example.co", "Tornillo"),
        ("%", "—none—", "Tornillo"),
    ] {
        let (status, html) = sofia
            .page(&format!(
                "/console/customers?q={}",
                url::form_urlencoded::byte_serialize(q.as_bytes()).collect::<String>()
            ))
            .await;
        assert_eq!(status, 200);
        if found != "—none—" {
            assert!(html.contains(found), "{q}: {html}");
        }
        assert!(!html.contains(not), "{q} finds only what it names");
    }
    let other = app.create_account("Otra tienda").await;
    let other = app.as_account(&other);
    let stranger = person(&other, "intruso@otra.example.co", "admin").await;
    assert_eq!(
        stranger
            .page(&format!("/console/subscriptions/{sub}"))
            .await
            .0,
        404
    );
    assert_eq!(
        stranger
            .page(&format!("/console/customers/{customer}"))
            .await
            .0,
        404
    );
    let (_, html) = stranger.page("/console/customers?q=ana").await;
    assert!(!html.contains("ana@example.co"));
    let (_, html) = stranger.page("/console").await;
    let csrf = hidden(&html, "csrf");
    let (status, _) = stranger
        .post(
            &format!("/console/subscriptions/{sub}/cancel"),
            &[("csrf", &csrf), ("key", "con_x-cancel"), ("confirm", "yes")],
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(get(&app, &sub).await["cancel_at_period_end"], false);
}

async fn a_portal_link_and_a_test_message_reach_a_real_mail_server(app: TestApp) {
    app.lift_rate_limit().await;
    let (sub, _, _) = charged(&app).await;
    let pablo = person(&app, "pablo@tienda.example.co", "support").await;
    let (_, html) = pablo.page(&format!("/console/subscriptions/{sub}")).await;
    let csrf = hidden(&html, "csrf");
    let key = key_for(&html, "portal-link");
    let path = format!("/console/subscriptions/{sub}/portal-link");
    let (status, done) = pablo
        .post(&path, &[("csrf", &csrf), ("key", &key), ("confirm", "yes")])
        .await;
    assert_eq!(status, 200, "{done}");
    assert!(
        done.contains("La cuenta no envía correos"),
        "an account without e-mail says so: {done}"
    );

    let sink = crate::notices::SmtpSink::start();
    crate::notices::turn_email_on(&app, &sink).await;
    let (_, html) = pablo.page(&format!("/console/subscriptions/{sub}")).await;
    let key = key_for(&html, "portal-link");
    let (status, confirm) = pablo.post(&path, &[("csrf", &csrf), ("key", &key)]).await;
    assert_eq!(status, 200);
    assert!(
        confirm.contains("¿Enviar el enlace del portal a ana@example.co"),
        "{confirm}"
    );
    assert!(sink.messages().is_empty(), "nothing before it is confirmed");
    let confirmed = [
        ("csrf", csrf.as_str()),
        ("key", key.as_str()),
        ("confirm", "yes"),
    ];
    let (status, done) = pablo.post(&path, &confirmed).await;
    assert_eq!(status, 200, "{done}");
    assert!(done.contains("Correo enviado a ana@example.co"), "{done}");
    // The same form again is the same notice: nothing more is sent.
    let (status, again) = pablo.post(&path, &confirmed).await;
    assert_eq!(status, 200, "{again}");
    assert!(again.contains("Correo enviado a ana@example.co"), "{again}");
    let messages = sink.messages();
    assert_eq!(messages.len(), 1);
    let (_, notices) = read(app.get("/v1/notices?kind=portal_link").await).await;
    let notices = notices["data"].as_array().expect("data").clone();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["status"], "sent");
    let mail = String::from_utf8_lossy(&messages[0]).replace("=\r\n", "");
    assert!(mail.contains("To: Ana <ana@example.co>"), "{mail}");
    assert_eq!(
        portal_link_opens(&app, &mail).await,
        200,
        "the link the customer got opens their portal"
    );

    let marta = person(&app, "marta@tienda.example.co", "admin").await;
    let (status, settings) = marta.page("/console/settings").await;
    assert_eq!(status, 200);
    let key = key_for(&settings, "test-email");
    let csrf = hidden(&settings, "csrf");
    let (status, done) = marta
        .post(
            "/console/settings/test-email",
            &[
                ("csrf", &csrf),
                ("key", &key),
                ("to", "contador@tienda.example.co"),
            ],
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert!(
        done.contains("Correo enviado a contador@tienda.example.co"),
        "{done}"
    );
    let messages = sink.messages();
    assert_eq!(messages.len(), 2);
    assert!(String::from_utf8_lossy(&messages[1]).contains("contador@tienda.example.co"));
    let (status, _) = pablo
        .post(
            "/console/settings/test-email",
            &[("csrf", &csrf), ("key", &key)],
        )
        .await;
    assert_eq!(status, 403, "a test message is an admin's");
}

async fn an_operator_invites_an_accounts_first_admin(app: TestApp) {
    let (status, user) = read(
        app.admin(
            Method::POST,
            &format!("/admin/accounts/{}/console-users", app.account_id),
        )
        .json(&json!({"email": "duena@tienda.example.co", "role": "admin"}))
        .send()
        .await
        .expect("send"),
    )
    .await;
    assert_eq!(status, 201, "{user}");
    let url = user["invitation_url"].as_str().expect("url");
    let duena = accept(&app, url, "duena@tienda.example.co").await;
    assert_eq!(duena.page("/console/settings").await.0, 200);
    let (status, _) = read(
        app.admin(
            Method::POST,
            "/admin/accounts/acct_00000000000000000000000000000000/console-users",
        )
        .json(&json!({"email": "x@tienda.example.co", "role": "admin"}))
        .send()
        .await
        .expect("send"),
    )
    .await;
    assert_eq!(status, 404);
}

async fn an_admin_switches_the_settings_and_support_cannot(app: TestApp) {
    app.lift_rate_limit().await;
    let marta = person(&app, "marta@tienda.example.co", "admin").await;
    let (status, html) = marta.page("/console/settings").await;
    assert_eq!(status, 200, "{html}");
    let csrf = hidden(&html, "csrf");
    let key = key_for(&html, "switches");
    let on = [
        ("csrf", csrf.as_str()),
        ("key", key.as_str()),
        ("receipt", "on"),
        ("portal_method", "on"),
    ];
    let (status, done) = marta.post("/console/settings/switches", &on).await;
    assert_eq!(status, 200, "{done}");
    assert!(done.contains("Guardado."), "{done}");
    assert!(
        done.contains(r#"id="switch-receipt" name="receipt" value="on" checked"#),
        "the page shows the switch as saved: {done}"
    );
    let (_, notices) = read(app.get("/v1/account/notices").await).await;
    assert_eq!(notices["kinds"]["receipt"], true);
    assert_eq!(
        notices["kinds"]["payment_failed"], false,
        "unticked is off: {notices}"
    );
    let (_, portal) = read(app.get("/v1/account/portal").await).await;
    assert_eq!(portal["cancel"]["enabled"], false);
    assert_eq!(portal["payment_method_update"]["enabled"], true);
    let pablo = person(&app, "pablo@tienda.example.co", "support").await;
    let (_, page) = pablo.page("/console").await;
    let theirs = hidden(&page, "csrf");
    let forged = [
        ("csrf", theirs.as_str()),
        ("key", "con_forged-switches"),
        ("payment_failed", "on"),
    ];
    let (status, _) = pablo.post("/console/settings/switches", &forged).await;
    assert_eq!(
        status, 403,
        "settings are an admin's, even for a forged form"
    );
    let (_, notices) = read(app.get("/v1/account/notices").await).await;
    assert_eq!(notices["kinds"]["payment_failed"], false);
}

/// The settings' forms save through the API's PATCHes: the e-mail server (its password kept,
/// never shown again), the seller's invoicing data; an empty field changes nothing; the API's
/// refusal is said in its words; support's forged form is refused.
async fn an_admin_sets_the_mail_server_and_the_sellers_data_and_no_secret_comes_back(app: TestApp) {
    app.lift_rate_limit().await;
    let marta = person(&app, "marta@tienda.example.co", "admin").await;
    let (status, html) = marta.page("/console/settings").await;
    assert_eq!(status, 200, "{html}");
    let csrf = hidden(&html, "csrf");
    let key = key_for(&html, "form-email");
    let secret = "correo-secreto-9931";
    let mail = [
        ("csrf", csrf.as_str()),
        ("key", key.as_str()),
        ("from_address", "cobros@tienda.example.co"),
        ("from_name", "Tienda Ejemplo"),
        ("smtp_host", "127.0.0.1"),
        ("smtp_port", "587"),
        ("smtp_username", "cobros"),
        ("smtp_password", secret),
        ("smtp_security", "starttls"),
        ("reply_to", ""),
    ];
    let (status, done) = marta.post("/console/settings/forms/email", &mail).await;
    assert_eq!(status, 200, "{done}");
    assert!(done.contains("Guardado."), "{done}");
    assert!(!done.contains(secret), "the password is never shown");
    assert!(done.contains("Hay uno guardado"), "it says one is kept");
    let (_, notices) = read(app.get("/v1/account/notices").await).await;
    assert_eq!(
        (
            notices["email"]["from_address"].clone(),
            notices["email"]["smtp"]["host"].clone(),
            notices["email"]["smtp"]["port"].clone(),
            notices["email"]["smtp"]["password_set"].clone(),
            notices["email"]["reply_to"].clone(),
        ),
        (
            json!("cobros@tienda.example.co"),
            json!("127.0.0.1"),
            json!(587),
            json!(true),
            Value::Null,
        ),
        "{notices}"
    );

    // Only the port typed: the password stays as it was.
    let key = key_for(&done, "form-email");
    let (status, done) = marta
        .post(
            "/console/settings/forms/email",
            &[
                ("csrf", csrf.as_str()),
                ("key", key.as_str()),
                ("smtp_port", "465"),
                ("smtp_security", "tls"),
                ("smtp_password", ""),
            ],
        )
        .await;
    assert_eq!(status, 200, "{done}");
    let (_, notices) = read(app.get("/v1/account/notices").await).await;
    assert_eq!(notices["email"]["smtp"]["port"], 465);
    assert_eq!(notices["email"]["smtp"]["password_set"], true);

    let key = key_for(&done, "form-seller");
    let seller = [
        ("csrf", csrf.as_str()),
        ("key", key.as_str()),
        ("legal_name", "Tienda Ejemplo S.A.S."),
        ("nit", "900123456-8"),
        ("address_line", "Carrera 7 # 71-21"),
        ("city_code", "11001"),
        ("country", "CO"),
        ("tax_regime", "responsable_iva"),
    ];
    let (status, done) = marta.post("/console/settings/forms/seller", &seller).await;
    assert_eq!(status, 200, "{done}");
    assert!(done.contains("Guardado."), "{done}");
    assert!(
        done.contains("<dd>Tienda Ejemplo S.A.S.</dd>"),
        "the page shows what was saved: {done}"
    );
    let (_, invoicing) = read(app.get("/v1/account/invoicing").await).await;
    assert_eq!(invoicing["legal_name"], "Tienda Ejemplo S.A.S.");
    assert_eq!(invoicing["nit"]["number"], "900123456");
    assert_eq!(invoicing["address"]["city_code"], "11001");

    // A NIT whose check digit is not DIAN's: the API's refusal, nothing changed.
    let key = key_for(&done, "form-seller");
    let (status, refused) = marta
        .post(
            "/console/settings/forms/seller",
            &[
                ("csrf", csrf.as_str()),
                ("key", key.as_str()),
                ("nit", "900123456-1"),
            ],
        )
        .await;
    assert_eq!(status, 200, "{refused}");
    assert!(
        refused.contains("flash bad"),
        "said as a refusal: {refused}"
    );
    let (_, invoicing) = read(app.get("/v1/account/invoicing").await).await;
    assert_eq!(invoicing["nit"]["check_digit"], 8);
    let changes: Vec<Value> = console_events(&app, "")
        .await
        .into_iter()
        .filter(|e| e["data"]["action"] == "settings_seller")
        .collect();
    assert_eq!(changes.len(), 2, "{changes:?}");

    let pablo = person(&app, "pablo@tienda.example.co", "support").await;
    let (_, page) = pablo.page("/console").await;
    let theirs = hidden(&page, "csrf");
    let (status, _) = pablo
        .post(
            "/console/settings/forms/email",
            &[
                ("csrf", theirs.as_str()),
                ("key", "con_forged-email"),
                ("smtp_host", "evil.example"),
            ],
        )
        .await;
    assert_eq!(status, 403, "an admin's, even for a forged form");
    let (_, notices) = read(app.get("/v1/account/notices").await).await;
    assert_eq!(notices["email"]["smtp"]["host"], "127.0.0.1");
}

/// A portal link whose mail server answers 451 (try later): the page says it is not known
/// whether it arrived and that it is tried again on its own; the notices' worker sends it at
/// its next attempt, once, and the customer's link opens their portal.
async fn a_portal_link_the_mail_server_put_off_is_sent_again_on_its_own(app: TestApp) {
    app.lift_rate_limit().await;
    let (sub, _, _) = charged(&app).await;
    let sink = crate::notices::SmtpSink::start();
    crate::notices::turn_email_on(&app, &sink).await;
    sink.answer(crate::notices::Answer::Busy);
    let pablo = person(&app, "pablo@tienda.example.co", "support").await;
    let (_, html) = pablo.page(&format!("/console/subscriptions/{sub}")).await;
    let csrf = hidden(&html, "csrf");
    let key = key_for(&html, "portal-link");
    let path = format!("/console/subscriptions/{sub}/portal-link");
    let (status, done) = pablo
        .post(&path, &[("csrf", &csrf), ("key", &key), ("confirm", "yes")])
        .await;
    assert_eq!(status, 200, "{done}");
    assert!(done.contains("no se sabe si llegó"), "{done}");
    assert!(sink.messages().is_empty());
    let (_, notices) = read(app.get("/v1/notices?kind=portal_link").await).await;
    assert_eq!(notices["data"][0]["status"], "scheduled", "{notices}");

    sink.answer(crate::notices::Answer::Accept);
    crate::subscriptions::advance(&app, 61).await;
    let messages = sink.messages();
    assert_eq!(messages.len(), 1, "sent at its next attempt, once");
    let (_, notices) = read(app.get("/v1/notices?kind=portal_link").await).await;
    assert_eq!(notices["data"][0]["status"], "sent", "{notices}");
    let mail = String::from_utf8_lossy(&messages[0]).replace("=\r\n", "");
    assert_eq!(
        portal_link_opens(&app, &mail).await,
        200,
        "the link opens the portal"
    );
    let (_, timeline) = pablo.page(&format!("/console/subscriptions/{sub}")).await;
    assert!(
        timeline.contains("pablo@tienda.example.co"),
        "who sent it: {timeline}"
    );
}

/// The status of opening the portal link `mail` carries.
async fn portal_link_opens(app: &TestApp, mail: &str) -> u16 {
    let start = mail.find("/portal/bpt_").expect("the link");
    let token: String = mail[start + "/portal/".len()..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    app.client
        .get(app.url(&format!("/portal/{token}")))
        .send()
        .await
        .expect("send")
        .status()
        .as_u16()
}
