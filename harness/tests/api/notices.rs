//! Issue 47, notices by e-mail (CONTRACT §15), against a real SMTP server in this process
//! (mailin-embedded) and read back as a customer's mail program reads them (Python's `email`
//! package, the PDF by poppler's `pdftotext`): the settings merge and never answer their
//! secrets; an approved charge's invoice reaches the customer once, with its PDF; a 5xx
//! reply ends a notice `failed` with the reply, a 4xx leaves it to be tried again; a
//! declined charge's notice waits for the hours Ley 2300 allows.

use crate::common::{TestApp, eventually, read};
use billing::domain::collection_hours::allowed;
use mailin_embedded::response::{OK, Response};
use mailin_embedded::{Handler, Server, SslConfig};
use reqwest::Method;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

crate::db_tests!(config = crate::notices::quick_notices;
    the_settings_merge_and_never_answer_their_secrets,
    an_approved_charges_invoice_reaches_the_customer_once_with_its_pdf,
    a_refusing_server_fails_the_notice_and_a_busy_one_has_it_tried_again,
    a_declined_charges_notice_keeps_the_hours_the_law_allows,
    a_hard_declines_notice_promises_no_retry_and_asks_for_a_new_card,
);

/// Notices looked for every 50 ms, an SMTP answer awaited 2 s.
pub(crate) fn quick_notices(config: &mut billing::config::Config) {
    crate::common::default_config(config);
    config.notices_interval_ms = 50;
    config.smtp_timeout_ms = 2_000;
}

/// What the SMTP sink answers to each recipient.
#[derive(Clone, Copy)]
pub(crate) enum Answer {
    Accept,
    /// 554: the server refuses for good.
    Refuse,
    /// 451: try again later.
    Busy,
}

#[derive(Clone)]
struct Sink {
    received: Arc<Mutex<Vec<Vec<u8>>>>,
    answer: Arc<Mutex<Answer>>,
    buffer: Vec<u8>,
}

impl Handler for Sink {
    fn rcpt(&mut self, _to: &str) -> Response {
        match *self.answer.lock().expect("lock") {
            Answer::Accept => OK,
            Answer::Refuse => Response::custom(554, "5.7.1 Message rejected as spam".to_owned()),
            Answer::Busy => Response::custom(451, "4.3.0 Try again later".to_owned()),
        }
    }

    fn data_start(
        &mut self,
        _domain: &str,
        _from: &str,
        _is8bit: bool,
        _to: &[String],
    ) -> Response {
        self.buffer.clear();
        OK
    }

    fn data(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.buffer.extend_from_slice(buf);
        Ok(())
    }

    fn data_end(&mut self) -> Response {
        let message = std::mem::take(&mut self.buffer);
        self.received.lock().expect("lock").push(message);
        OK
    }
}

/// A real SMTP server on a free loopback port, in a thread of its own.
pub(crate) struct SmtpSink {
    port: u16,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
    answer: Arc<Mutex<Answer>>,
}

impl SmtpSink {
    pub(crate) fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let answer = Arc::new(Mutex::new(Answer::Accept));
        let handler = Sink {
            received: Arc::clone(&received),
            answer: Arc::clone(&answer),
            buffer: Vec::new(),
        };
        let mut server = Server::new(handler);
        server
            .with_name("sink.example.co")
            .with_ssl(SslConfig::None)
            .expect("no TLS")
            .with_tcp_listener(listener);
        std::thread::spawn(move || {
            let _ = server.serve();
        });
        Self {
            port,
            received,
            answer,
        }
    }

    pub(crate) fn answer(&self, answer: Answer) {
        *self.answer.lock().expect("lock") = answer;
    }

    pub(crate) fn messages(&self) -> Vec<Vec<u8>> {
        self.received.lock().expect("lock").clone()
    }
}

pub(crate) async fn turn_email_on(app: &TestApp, sink: &SmtpSink) -> Value {
    // The tests poll the notices' list.
    app.lift_rate_limit().await;
    let (status, settings) = read(
        app.request(Method::PATCH, "/v1/account/notices")
            .json(
                &json!({"email": {"enabled": true, "from_address": "cobros@tienda.example.co",
                "from_name": "Tienda Ejemplo", "reply_to": "ayuda@tienda.example.co",
                "smtp": {"host": "127.0.0.1", "port": sink.port, "security": "none"}}}),
            )
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{settings}");
    settings
}

/// A customer with a card of `number`, subscribed monthly to a 30,000 COP plan.
async fn subscribe(app: &TestApp, email: &str, number: &str) -> (Value, Value) {
    app.top_up(100_000_000).await;
    let plan = app.create_plan("Plan Pro", 3_000_000, 30_000_000).await;
    let (_, customer) = read(
        app.post(
            "/v1/customers",
            json!({"email": email, "name": "Ana Gómez"}),
        )
        .await,
    )
    .await;
    let token = crate::common::card_token(app, number).await;
    let (status, method) = read(
        app.post(
            &format!(
                "/v1/customers/{}/payment-methods",
                customer["id"].as_str().expect("id")
            ),
            token.payment_method(),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{method}");
    let (status, sub) = read(
        app.post(
            "/v1/subscriptions",
            json!({"customer_id": customer["id"], "plan_id": plan["id"], "cycle": "monthly",
                "payment_method_id": method["id"]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{sub}");
    (customer, sub)
}

pub(crate) async fn notices(app: &TestApp, query: &str) -> Vec<Value> {
    let (status, page) = read(app.get(&format!("/v1/notices?{query}")).await).await;
    assert_eq!(status, 200, "{page}");
    page["data"].as_array().expect("data").clone()
}

/// `raw` read by Python's `email` package, as a mail program reads it: the headers, each
/// part's type, the text, and the attachments written to `dir`.
pub(crate) fn as_read(raw: &[u8], dir: &std::path::Path) -> Value {
    let path = dir.join("message.eml");
    std::fs::write(&path, raw).expect("write");
    let script = r#"
import email, email.policy, json, sys, os
message = email.message_from_bytes(open(sys.argv[1], 'rb').read(), policy=email.policy.default)
out = {"subject": message["subject"], "message_id": message["message-id"],
       "from": message["from"], "to": message["to"], "reply_to": message["reply-to"],
       "types": [part.get_content_type() for part in message.walk()], "attachments": []}
out["text"] = message.get_body(preferencelist=("plain",)).get_content()
out["html"] = message.get_body(preferencelist=("html",)).get_content()
for part in message.iter_attachments():
    name = part.get_filename()
    data = part.get_content()
    open(os.path.join(sys.argv[2], name), "wb").write(data)
    out["attachments"].append({"name": name, "type": part.get_content_type(), "size": len(data)})
print(json.dumps(out))
"#;
    let output = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .arg(dir)
        .output()
        .expect("python3");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("json")
}

async fn the_settings_merge_and_never_answer_their_secrets(app: TestApp) {
    let (status, defaults) = read(app.get("/v1/account/notices").await).await;
    assert_eq!(status, 200, "{defaults}");
    assert_eq!(
        defaults["email"]["enabled"], false,
        "nothing is sent until turned on"
    );
    assert_eq!(defaults["whatsapp"]["enabled"], false);
    assert_eq!(defaults["kinds"]["receipt"], true);
    let sink = SmtpSink::start();
    let settings = turn_email_on(&app, &sink).await;
    assert_eq!(settings["email"]["smtp"]["password_set"], false);
    let (status, settings) = read(
        app.request(Method::PATCH, "/v1/account/notices")
            .json(&json!({"email": {"smtp": {"username": "cobros", "password": "secreto-smtp"}}}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{settings}");
    assert_eq!(settings["email"]["smtp"]["password_set"], true);
    let text = settings.to_string();
    assert!(
        !text.contains("secreto-smtp"),
        "the password is never answered: {text}"
    );
    let (_, changed) = read(
        app.request(Method::PATCH, "/v1/account/notices")
            .json(&json!({"kinds": {"card_expiring": false}, "email": {"smtp": {"port": 2525}}}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(changed["email"]["smtp"]["port"], 2525);
    assert_eq!(
        changed["email"]["smtp"]["host"], "127.0.0.1",
        "merged, not replaced"
    );
    assert_eq!(changed["email"]["smtp"]["password_set"], true);
    assert_eq!(changed["kinds"]["card_expiring"], false);
    assert_eq!(changed["kinds"]["receipt"], true);
    let (status, refused) = read(
        app.request(Method::PATCH, "/v1/account/notices")
            .json(&json!({"whatsapp": {"enabled": true}}))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "whatsapp");
    let (_, logs_safe) = read(app.get("/v1/account/notices").await).await;
    assert!(!logs_safe.to_string().contains("secreto-smtp"));
}

async fn an_approved_charges_invoice_reaches_the_customer_once_with_its_pdf(app: TestApp) {
    let sink = SmtpSink::start();
    turn_email_on(&app, &sink).await;
    let (customer, sub) = subscribe(&app, "ana@example.co", "4242424242424242").await;
    let sub_id = sub["id"].as_str().expect("id");
    eventually(Duration::from_secs(20), || async {
        !sink.messages().is_empty()
    })
    .await;
    let listed = notices(&app, &format!("subscription_id={sub_id}&kind=receipt")).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    eventually(Duration::from_secs(10), || async {
        notices(&app, &format!("subscription_id={sub_id}&kind=receipt")).await[0]["status"]
            == "sent"
    })
    .await;
    let notice = &notices(&app, &format!("subscription_id={sub_id}")).await[0];
    assert_eq!(notice["channel"], "email");
    assert_eq!(notice["to"], "ana@example.co");
    assert_eq!(notice["attempts"], 1);
    assert_eq!(notice["customer_id"], customer["id"]);
    let (_, invoices) = read(
        app.get(&format!("/v1/invoices?subscription_id={sub_id}"))
            .await,
    )
    .await;
    let invoice = &invoices["data"][0];
    assert_eq!(notice["invoice_id"], invoice["id"]);
    let (status, one) = read(
        app.get(&format!(
            "/v1/notices/{}",
            notice["id"].as_str().expect("id")
        ))
        .await,
    )
    .await;
    assert_eq!((status, &one), (200, notice));

    let dir = tempfile::tempdir().expect("dir");
    let messages = sink.messages();
    assert_eq!(messages.len(), 1, "once");
    let read_back = as_read(&messages[0], dir.path());
    let number = invoice["number"].as_str().expect("number");
    assert_eq!(
        read_back["subject"],
        format!("Recibo de Test account: factura {number}"),
        "{read_back}"
    );
    assert_eq!(notice["subject"], read_back["subject"]);
    assert!(
        read_back["from"]
            .as_str()
            .expect("from")
            .contains("cobros@tienda.example.co")
    );
    assert!(
        read_back["reply_to"]
            .as_str()
            .expect("reply")
            .contains("ayuda@tienda.example.co")
    );
    assert!(
        read_back["message_id"]
            .as_str()
            .expect("id")
            .contains(notice["id"].as_str().expect("id"))
    );
    let types: Vec<&str> = read_back["types"]
        .as_array()
        .expect("types")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        types.contains(&"text/plain") && types.contains(&"text/html"),
        "{types:?}"
    );
    assert!(
        read_back["text"]
            .as_str()
            .expect("text")
            .contains("$ 30.000,00"),
        "{read_back}"
    );
    assert!(
        read_back["html"]
            .as_str()
            .expect("html")
            .contains("Gracias por tu pago")
    );
    let attachment = &read_back["attachments"][0];
    assert_eq!(attachment["type"], "application/pdf", "{read_back}");
    let pdf = dir.path().join(attachment["name"].as_str().expect("name"));
    if let Ok(output) = std::process::Command::new("pdftotext")
        .arg(&pdf)
        .arg("-")
        .output()
    {
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.contains(number), "the invoice's PDF: {text}");
    } else {
        assert!(
            std::env::var("BILLING_REQUIRE_PDF_TOOLS").as_deref() != Ok("1"),
            "pdftotext"
        );
    }
}

async fn a_refusing_server_fails_the_notice_and_a_busy_one_has_it_tried_again(app: TestApp) {
    let sink = SmtpSink::start();
    turn_email_on(&app, &sink).await;
    sink.answer(Answer::Refuse);
    let (_, refused_sub) = subscribe(&app, "bea@example.co", "4242424242424242").await;
    let refused_id = refused_sub["id"].as_str().expect("id").to_owned();
    eventually(Duration::from_secs(20), || async {
        notices(&app, &format!("subscription_id={refused_id}")).await[0]["status"] == "failed"
    })
    .await;
    let failed = &notices(&app, &format!("subscription_id={refused_id}")).await[0];
    assert!(
        failed["last_error"]
            .as_str()
            .expect("error")
            .contains("554"),
        "{failed}"
    );
    assert_eq!(failed["attempts"], 1, "a 5xx is not tried again");
    // Operators see it on the dashboard, and in the metrics.
    let page = crate::admin::dashboard_page(&app, "/dashboard").await;
    let section = &page[page.find("id=\"notices\"").expect("the notices' section")..];
    assert!(section.contains("<td>failed</td><td>1</td>"), "{section}");
    let metrics = app.get("/metrics").await.text().await.expect("metrics");
    assert!(
        metrics.lines().any(|l| l.starts_with("notices_total")
            && l.contains("status=\"failed\"")
            && l.contains("kind=\"receipt\"")),
        "{metrics}"
    );

    sink.answer(Answer::Busy);
    let (_, busy_sub) = subscribe(&app, "cami@example.co", "4242424242424242").await;
    let busy_id = busy_sub["id"].as_str().expect("id").to_owned();
    eventually(Duration::from_secs(20), || async {
        notices(&app, &format!("subscription_id={busy_id}")).await[0]["last_error"].is_string()
    })
    .await;
    let busy = &notices(&app, &format!("subscription_id={busy_id}")).await[0];
    assert_eq!(busy["status"], "scheduled", "a 4xx is tried again: {busy}");
    assert!(
        busy["last_error"].as_str().expect("error").contains("451"),
        "{busy}"
    );
    // A minute later by the account's clock the server takes it.
    sink.answer(Answer::Accept);
    let (status, _) = read(
        app.post("/v1/test-helpers/clock/advance", json!({"seconds": 61}))
            .await,
    )
    .await;
    assert_eq!(status, 200);
    let busy = &notices(&app, &format!("subscription_id={busy_id}")).await[0];
    assert_eq!(busy["status"], "sent", "{busy}");
    assert_eq!(busy["attempts"], 2);
    assert_eq!(
        sink.messages().len(),
        1,
        "the refused one never arrived, the busy one once"
    );
}

async fn a_declined_charges_notice_keeps_the_hours_the_law_allows(app: TestApp) {
    let sink = SmtpSink::start();
    turn_email_on(&app, &sink).await;
    let (_, sub) = subscribe(&app, "dora@example.co", "4111111111111111").await;
    let sub_id = sub["id"].as_str().expect("id").to_owned();
    eventually(Duration::from_secs(20), || async {
        !notices(
            &app,
            &format!("subscription_id={sub_id}&kind=payment_failed"),
        )
        .await
        .is_empty()
    })
    .await;
    let notice = &notices(
        &app,
        &format!("subscription_id={sub_id}&kind=payment_failed"),
    )
    .await[0];
    let scheduled =
        chrono::DateTime::parse_from_rfc3339(notice["scheduled_for"].as_str().expect("at"))
            .expect("rfc3339")
            .with_timezone(&chrono::Utc);
    assert!(
        allowed(scheduled),
        "scheduled within Ley 2300's hours: {notice}"
    );
    // Two days on, at the first instant the law allows then (by the account's clock), it is
    // sent.
    let (_, clock) = read(app.get("/v1/test-helpers/clock").await).await;
    let now = chrono::DateTime::parse_from_rfc3339(clock["now"].as_str().expect("now"))
        .expect("rfc3339")
        .with_timezone(&chrono::Utc);
    let target = billing::domain::collection_hours::next_allowed(now + chrono::Duration::days(2));
    let seconds = (target - now).num_seconds() + 1;
    let (status, _) = read(
        app.post(
            "/v1/test-helpers/clock/advance",
            json!({"seconds": seconds}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    // The first decline's (the list is newest first; the retries' have notices of their own).
    let listed = notices(
        &app,
        &format!("subscription_id={sub_id}&kind=payment_failed"),
    )
    .await;
    let notice = listed.last().expect("the first decline's");
    assert_eq!(notice["status"], "sent", "{notice}");
    let sent = chrono::DateTime::parse_from_rfc3339(notice["sent_at"].as_str().expect("sent"))
        .expect("rfc3339")
        .with_timezone(&chrono::Utc);
    assert!(allowed(sent), "sent within the hours: {notice}");
    let dir = tempfile::tempdir().expect("dir");
    let mail = sink
        .messages()
        .iter()
        .map(|raw| as_read(raw, dir.path()))
        .find(|m| {
            m["subject"]
                .as_str()
                .is_some_and(|s| s.starts_with("No pudimos cobrar"))
        })
        .expect("the payment_failed e-mail");
    let text = mail["text"].as_str().expect("text");
    assert!(text.contains("$ 30.000,00"), "{mail}");
    // Its link opens the portal's card update for this subscription while it is past due.
    let link = text
        .split_whitespace()
        .find(|word| word.contains("/pay/pay_"))
        .expect("a /pay/ link")
        .to_owned();
    assert!(
        mail["html"].as_str().expect("html").contains(&link),
        "the button too"
    );
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let opened = no_redirects.get(&link).send().await.expect("send");
    assert_eq!(opened.status(), 303);
    assert_eq!(opened.headers()["cache-control"], "no-store");
    let portal = opened.headers()["location"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(portal.contains("/portal/bpt_"), "{portal}");
    let page = app.client.get(&portal).send().await.expect("portal");
    assert_eq!(page.status(), 200);
    let forged = format!("{}x", &link[..link.len() - 1]);
    assert_eq!(
        no_redirects
            .get(&forged)
            .send()
            .await
            .expect("send")
            .status(),
        404
    );
    // Once the subscription is no longer past due, the link says there is nothing to pay.
    let (status, _) = read(
        app.post(
            &format!("/v1/subscriptions/{sub_id}/cancel"),
            json!({"at_period_end": false}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        no_redirects.get(&link).send().await.expect("send").status(),
        404
    );
}

/// A stolen card's decline (hard) is not retried: its notice says there is no next attempt
/// and asks for a new card, with the cancellation date; a soft decline's names its retry date.
async fn a_hard_declines_notice_promises_no_retry_and_asks_for_a_new_card(app: TestApp) {
    let sink = SmtpSink::start();
    turn_email_on(&app, &sink).await;
    let (_, hard) = subscribe(&app, "eva@example.co", "4000000000009979").await;
    let (_, soft) = subscribe(&app, "fer@example.co", "4000000000009995").await;
    for sub in [&hard, &soft] {
        let sub_id = sub["id"].as_str().expect("id").to_owned();
        eventually(Duration::from_secs(20), || async {
            !notices(
                &app,
                &format!("subscription_id={sub_id}&kind=payment_failed"),
            )
            .await
            .is_empty()
        })
        .await;
    }
    // To the first instant the law allows (by the account's clock), where both are sent.
    let (_, clock) = read(app.get("/v1/test-helpers/clock").await).await;
    let now = chrono::DateTime::parse_from_rfc3339(clock["now"].as_str().expect("now"))
        .expect("rfc3339")
        .with_timezone(&chrono::Utc);
    let target = billing::domain::collection_hours::next_allowed(now);
    let seconds = (target - now).num_seconds().max(0) + 1;
    let (status, _) = read(
        app.post(
            "/v1/test-helpers/clock/advance",
            json!({"seconds": seconds}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    eventually(Duration::from_secs(20), || async {
        sink.messages().len() >= 2
    })
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let mails: Vec<Value> = sink
        .messages()
        .iter()
        .map(|raw| as_read(raw, dir.path()))
        .collect();
    let text_to = |to: &str| {
        mails
            .iter()
            .find(|m| m["to"].as_str().is_some_and(|t| t.contains(to)))
            .and_then(|m| m["text"].as_str())
            .unwrap_or_else(|| panic!("a mail to {to}: {mails:?}"))
            .to_owned()
    };
    let hard_text = text_to("eva@example.co");
    assert!(
        hard_text.contains("Motivo: Tarjeta reportada como robada"),
        "{hard_text}"
    );
    assert!(
        hard_text.contains("Próximo intento: Ninguno: no volveremos a intentar con esta tarjeta"),
        "{hard_text}"
    );
    assert!(
        hard_text.contains("Agrega una tarjeta nueva"),
        "{hard_text}"
    );
    assert!(hard_text.contains("Se cancela el:"), "{hard_text}");
    let soft_text = text_to("fer@example.co");
    assert!(
        soft_text.contains("Motivo: Fondos insuficientes"),
        "{soft_text}"
    );
    assert!(!soft_text.contains("Ninguno"), "{soft_text}");
    assert!(soft_text.contains("Próximo intento:"), "{soft_text}");
}

/// The receipt as a customer's mail program shows it: its HTML part opened in Chromium at a
/// phone's width and a desktop's, nothing wider than the screen, nothing axe-core (WCAG 2 AA)
/// finds; screenshots in `test-artifacts/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_reads_well_on_a_phone_and_a_desktop() {
    let Some(browser) = crate::common::browser::Browser::start().await else {
        return;
    };
    let app = crate::common::spawn_app_with(crate::common::Backend::Sqlite, quick_notices)
        .await
        .expect("sqlite");
    let sink = SmtpSink::start();
    turn_email_on(&app, &sink).await;
    subscribe(&app, "ana@example.co", "4242424242424242").await;
    eventually(Duration::from_secs(20), || async {
        !sink.messages().is_empty()
    })
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let mail = as_read(&sink.messages()[0], dir.path());
    let html = dir.path().join("receipt.html");
    std::fs::write(&html, mail["html"].as_str().expect("html")).expect("write");
    let url = format!("file://{}", html.display());
    for (width, height, name) in [(412, 915, "phone"), (1280, 900, "desktop")] {
        browser
            .client
            .set_window_size(width, height)
            .await
            .expect("resize");
        browser.client.goto(&url).await.expect("open the e-mail");
        browser.wait_for_text("h1", "Gracias por tu pago").await;
        let wider: Value = browser
            .client
            .execute(
                "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
                vec![],
            )
            .await
            .expect("widths");
        assert_eq!(wider, json!(0), "nothing wider than the {name}'s screen");
        if let Some(violations) = browser.accessibility_violations().await {
            assert!(violations.is_empty(), "axe-core, {name}: {violations:#?}");
        }
        browser.screenshot(&format!("notice-receipt-{name}")).await;
    }
    browser.close().await;
}
