//! DIAN in a fault run (`billing chaos --dian`). The standalone sandbox DIAN runs as its own
//! process, so what it accepted outlives the server's kill and can be compared with our rows
//! afterwards; a fault proxy stands between it and the server (the service URL the server is
//! given); the shop's account turns DIAN on before setup (a certificate made by `openssl` for
//! the run, never kept; a numbering range told to both sides), so every invoice of the run is
//! an electronic one, numbered in its charge's settlement and filed while the burst, the
//! faults and the kill go on.
//!
//! Two things a merchant's first year brings happen in every run (CONTRACT §12a): DIAN already
//! holds one number of the burst for another document (`take_number`: the merchant's previous
//! software used it), and the software's PIN changes after the kill (`change_pin`: habilitación
//! to production), with documents numbered and signed under the old PIN still to file.
//!
//! The judges, once the faults are off and everything settled: every document of the account
//! ends `accepted` (an unknown answer never became a rejection, a number sent twice would
//! have been refused as a duplicate), but the one whose number DIAN held for another, which
//! ends `rejected` with DIAN's rule 90; DIAN holds each of our other numbers once, with our
//! CUFE; and DIAN holds no number of ours we do not know of.

use super::processes::start_peer;
use super::proxy::Fault;
use super::shop::{Shop, send};
use crate::audit::queries::Breach;
use anyhow::Context;
use billing::dian::sandbox::{AcceptedDocument, SERVICE_PATH};
use billing::domain::dian::DianStatus;
use billing::ids::AccountId;
use billing::store::entities::dian_document;
use billing::store::{Scoped, Store, StoreResult};
use sea_orm::{ColumnTrait, PaginatorTrait, QueryFilter};
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::Child;

const SOFTWARE_ID: &str = "chaos-software";
const PIN: &str = "chaos-pin-12345";
/// The PIN the software has after `change_pin`.
const NEW_PIN: &str = "chaos-pin-67890";
const PREFIX: &str = "SETP";
const PASSWORD: &str = "chaos-clave";
/// The seller's NIT as DIAN keys it (without the check digit).
const NIT: &str = "900123456";
const TECHNICAL_KEY: &str = "fc8eac422eba16e22ffd8c6f94b3f40a6e38162c";

/// The standalone sandbox DIAN (`billing sandbox-dian`).
pub struct DianPeer {
    child: Child,
    /// Its root (`http://ADDR`): the service under `SERVICE_PATH`, `_sandbox` beside it.
    pub root: String,
    admin_token: String,
}

impl DianPeer {
    pub async fn start(binary: &Path, admin_token: &str) -> anyhow::Result<Self> {
        let args = ["sandbox-dian", "--bind", "127.0.0.1:0"];
        let (child, service) = start_peer(binary, &args, admin_token, "sandbox DIAN at ").await?;
        let root = service
            .strip_suffix(SERVICE_PATH)
            .context("the sandbox DIAN's address")?
            .to_owned();
        Ok(Self {
            child,
            root,
            admin_token: admin_token.to_owned(),
        })
    }

    /// Everything it accepted.
    pub async fn accepted(&self, http: &reqwest::Client) -> anyhow::Result<Vec<AcceptedDocument>> {
        let answer = send(
            http.get(format!("{}/_sandbox/documents", self.root))
                .bearer_auth(&self.admin_token),
        )
        .await?;
        Ok(serde_json::from_value(answer)?)
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The faults of DIAN's calls, `rate` of them in all, in equal shares: DIAN acted and its
/// answer was lost, came too late or became a 500; the call held past the timeout before it
/// reached DIAN; a 500 or a reset that never reached it.
pub fn faults(rate: f64, timeout: Duration) -> Vec<(Fault, f64)> {
    let past_timeout = timeout + Duration::from_millis(300);
    let faults = [
        Fault::ForwardThenDrop,
        Fault::ForwardThenDelay(past_timeout),
        Fault::ForwardThenAnswer(500),
        Fault::DelayThenForward(past_timeout),
        Fault::Answer(500, json!({})),
        Fault::Reset,
    ];
    let share = rate / faults.len() as f64;
    faults.into_iter().map(|f| (f, share)).collect()
}

/// What the account filed with, to change its PIN later.
pub struct DianAccount {
    p12_base64: String,
}

/// Turns DIAN on for the shop's account (seller, software, certificate) and adds a numbering
/// range, telling the sandbox DIAN of the software and the range as DIAN's habilitación would.
pub async fn turn_on(
    shop: &Shop,
    peer: &DianPeer,
    http: &reqwest::Client,
    scratch: &Path,
) -> anyhow::Result<DianAccount> {
    let certificate = Certificate::make(scratch, PASSWORD)?;
    let admin = |path: &str| {
        http.post(format!("{}/_sandbox/{path}", peer.root))
            .bearer_auth(&peer.admin_token)
    };
    send(admin("software").json(&json!({"software_id": SOFTWARE_ID, "pin": PIN}))).await?;
    let range = json!({"resolution_number": "18760000001", "prefix": "SETP",
        "from": 990_000_000, "to": 995_000_000, "valid_from": "2019-01-19",
        "valid_to": "2030-01-19", "technical_key": TECHNICAL_KEY});
    let mut told = range.clone();
    told["seller_nit"] = json!(NIT);
    send(admin("ranges").json(&told)).await?;
    let account = DianAccount {
        p12_base64: certificate.p12_base64.clone(),
    };
    shop.call(
        reqwest::Method::PATCH,
        "/v1/account/invoicing",
        invoicing(&account, PIN),
    )
    .await?;
    shop.call(
        reqwest::Method::POST,
        "/v1/account/invoicing/numbering-ranges",
        range,
    )
    .await?;
    Ok(account)
}

/// The invoice settings with the software's PIN `pin`.
fn invoicing(account: &DianAccount, pin: &str) -> serde_json::Value {
    json!({
        "legal_name": "Tienda Caos S.A.S.",
        "nit": format!("{NIT}-8"),
        "address": {"line": "Carrera 7 # 71-21", "city_code": "11001", "country": "CO"},
        "tax_regime": "responsable_iva",
        "dian": {"environment": "test", "software_id": SOFTWARE_ID, "software_pin": pin,
            "certificate": {"p12_base64": account.p12_base64, "password": PASSWORD}}
    })
}

/// Makes DIAN hold the number `ahead` past the highest the account has issued, for another
/// document (the merchant's previous software used it): the burst's invoice of that number is
/// refused by rule 90. Answers the number.
pub async fn take_number(
    store: &Store,
    account: &AccountId,
    peer: &DianPeer,
    http: &reqwest::Client,
    ahead: i64,
) -> anyhow::Result<String> {
    let highest = dian_document::Entity::scoped(account)
        .all(crate::Raw(store).conn())
        .await?
        .into_iter()
        .filter_map(|doc| doc.number?.strip_prefix(PREFIX)?.parse::<i64>().ok())
        .max()
        .context("the setup issued no electronic invoice")?;
    let number = format!("{PREFIX}{}", highest + ahead);
    send(
        http.post(format!("{}/_sandbox/documents", peer.root))
            .bearer_auth(&peer.admin_token)
            .json(&json!({"seller_nit": NIT, "number": number,
                "key": format!("otro-software-{number}")})),
    )
    .await?;
    Ok(number)
}

/// The software's PIN changes, at DIAN and in the account, at one moment: DIAN is kept out of
/// reach (every call answered 503 by the proxy, never forwarded) from before the change until
/// after it, so that no document signed with one PIN reaches DIAN while it expects the other.
/// `held` is the longest the proxy holds a call before forwarding it.
pub async fn change_pin(
    shop: &Shop,
    peer: &DianPeer,
    proxy: &super::proxy::Proxy,
    http: &reqwest::Client,
    account: &DianAccount,
    held: Duration,
) -> anyhow::Result<()> {
    proxy.always("POST", SERVICE_PATH, Fault::Answer(503, json!({})));
    // A call the proxy held before the rule reaches DIAN within `held`; none after.
    tokio::time::sleep(held + Duration::from_millis(200)).await;
    send(
        http.post(format!("{}/_sandbox/software", peer.root))
            .bearer_auth(&peer.admin_token)
            .json(&json!({"software_id": SOFTWARE_ID, "pin": NEW_PIN})),
    )
    .await?;
    shop.call(
        reqwest::Method::PATCH,
        "/v1/account/invoicing",
        invoicing(account, NEW_PIN),
    )
    .await?;
    // A filing pass that read the old PIN before the PATCH sends within a call's timeout.
    tokio::time::sleep(held + Duration::from_millis(200)).await;
    proxy.clear();
    Ok(())
}

/// A self-signed certificate made by the `openssl` command for a run or a test (never
/// committed): its folder (`cert.pem`, for `xmlsec1 --trusted-pem`, and room for scratch
/// files) and its PKCS#12 file (PBES2/AES) in base64, under `password`. The folder goes with it.
pub struct Certificate {
    pub dir: PathBuf,
    pub p12_base64: String,
}

impl Certificate {
    /// Makes one in a new folder under `scratch`.
    pub fn make(scratch: &Path, password: &str) -> anyhow::Result<Self> {
        let dir = scratch.join(format!("dian-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        // Owned from here: an error below removes the folder.
        let mut made = Self {
            dir,
            p12_base64: String::new(),
        };
        let pass = format!("pass:{password}");
        let steps: [&[&str]; 2] = [
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "key.pem",
                "-out",
                "cert.pem",
                "-days",
                "30",
                "-subj",
                "/C=CO/O=Tienda Ejemplo S.A.S./CN=Tienda",
                // A serial of 19 digits: libxml2's `xs:integer` (xmllint, on the signature's
                // `X509SerialNumber`) stops at 24 digits, below the 160 bits openssl draws.
                "-set_serial",
                "8133765940878140376",
            ],
            &[
                "pkcs12", "-export", "-inkey", "key.pem", "-in", "cert.pem", "-out", "c.p12",
                "-passout", &pass,
            ],
        ];
        for args in steps {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(&made.dir)
                .output()
                .context("running openssl (install it: apt-get install openssl)")?;
            anyhow::ensure!(
                out.status.success(),
                "openssl {}: {}",
                args[0],
                String::from_utf8_lossy(&out.stderr)
            );
        }
        use base64::Engine as _;
        made.p12_base64 = base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(made.dir.join("c.p12"))?);
        Ok(made)
    }
}

impl Drop for Certificate {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a run filed, for its line.
#[derive(Clone, Copy, Debug, Default)]
pub struct DianTally {
    /// The account's electronic documents.
    pub documents: usize,
    /// Documents sent and not yet answered when the server was killed.
    pub in_flight_at_kill: u64,
    /// Documents DIAN received more than once (a send whose answer was lost, asked about,
    /// not found yet, and sent again): refused as duplicates, never accepted twice.
    pub sent_again: usize,
    /// DIAN's calls faulted.
    pub faults: usize,
    /// Documents whose number DIAN held for another (one a run, once the burst reaches it).
    pub taken_rejected: usize,
}

impl std::fmt::Display for DianTally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} documents, {} faults, {} in flight at the kill, {} sent again, {} refused as taken",
            self.documents,
            self.faults,
            self.in_flight_at_kill,
            self.sent_again,
            self.taken_rejected
        )
    }
}

impl crate::Raw<'_> {
    /// Documents of the account sent and not yet answered.
    pub async fn dian_in_flight(&self, account: &AccountId) -> StoreResult<u64> {
        Ok(dian_document::Entity::scoped(account)
            .filter(dian_document::Column::Status.eq(DianStatus::Pending))
            .filter(dian_document::Column::SentAt.is_not_null())
            .count(self.conn())
            .await?)
    }

    /// Documents of the account not yet final (pending or awaiting a range).
    pub async fn dian_unfinished(&self, account: &AccountId) -> StoreResult<u64> {
        Ok(dian_document::Entity::scoped(account)
            .filter(
                dian_document::Column::Status
                    .is_in([DianStatus::Pending, DianStatus::AwaitingRange]),
            )
            .count(self.conn())
            .await?)
    }
}

/// DIAN's side of the run against ours (see the module's story).
pub async fn judge(
    store: &Store,
    account: &AccountId,
    peer: &DianPeer,
    http: &reqwest::Client,
    taken: &str,
    tally: &mut DianTally,
) -> anyhow::Result<Vec<Breach>> {
    let ours = dian_document::Entity::scoped(account)
        .all(crate::Raw(store).conn())
        .await?;
    let theirs: HashMap<String, AcceptedDocument> = peer
        .accepted(http)
        .await?
        .into_iter()
        .filter(|doc| doc.seller_nit == NIT)
        .map(|doc| (doc.number.clone(), doc))
        .collect();
    tally.documents = ours.len();
    tally.sent_again = theirs.values().filter(|doc| doc.sends > 1).count();
    let mut breaches = Vec::new();
    let mut known = std::collections::HashSet::new();
    for doc in &ours {
        if doc.number.as_deref() == Some(taken) {
            // DIAN holds this number for another document: ours ends rejected with DIAN's
            // rule 90, once, and is never sent again and again.
            tally.taken_rejected += 1;
            let by_rule_90 = doc
                .messages
                .as_deref()
                .is_some_and(|m| m.contains("Regla: 90"));
            if doc.status != DianStatus::Rejected || !by_rule_90 {
                breaches.push(Breach {
                    invariant: "a number DIAN holds for another document did not end rejected by rule 90",
                    detail: format!("{} {taken} {} {:?}", doc.id, doc.status.as_str(), doc.messages),
                });
            }
            known.insert(taken.to_owned());
            continue;
        }
        if doc.status != DianStatus::Accepted {
            breaches.push(Breach {
                invariant: "an electronic document not accepted after the faults stopped",
                detail: format!("{} {} {:?}", doc.id, doc.status.as_str(), doc.messages),
            });
        }
        let Some(number) = &doc.number else { continue };
        known.insert(number.clone());
        match theirs.get(number) {
            Some(at_dian) if Some(&at_dian.key) == doc.unique_code.as_ref() => {}
            Some(at_dian) => breaches.push(Breach {
                invariant: "DIAN holds a number of ours under another CUFE",
                detail: format!(
                    "{} {number}: ours {:?}, DIAN's {}",
                    doc.id, doc.unique_code, at_dian.key
                ),
            }),
            None if doc.status == DianStatus::Accepted => breaches.push(Breach {
                invariant: "a document we hold accepted that DIAN does not hold",
                detail: format!("{} {number}", doc.id),
            }),
            None => {}
        }
    }
    for number in theirs.keys().filter(|number| !known.contains(*number)) {
        breaches.push(Breach {
            invariant: "DIAN accepted a number we never issued",
            detail: number.clone(),
        });
    }
    Ok(breaches)
}
